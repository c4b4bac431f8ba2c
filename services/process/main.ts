/**
 * `node dist/services/process/main.js [--role all|gateway|matcher] [--port N] [--metrics-port N|off]
 * [--engine auto|gpu|fast|rtree|reference] [--gateways N] [--dev]`: one Ambit process, or with
 * `--gateways N` a node of N gateway processes sharing the port beside the matcher or the embedded hub (gateways.ts). Flags
 * override the AMBIT_* environment (see docs/service.md). SIGINT/SIGTERM shut it down gracefully.
 */
import { parseArgs } from 'node:util';
import { SCOPES } from '../edge/auth.js';
import { configFromEnv } from './config.js';
import { rootLogger } from './log.js';
import { isGatewayWorker, startGatewayNode } from './gateways.js';
import { startServer } from './server.js';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      role: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      'metrics-port': { type: 'string' },
      engine: { type: 'string' },
      gateways: { type: 'string' },
      dev: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help === true) {
    process.stderr.write(
      'usage: node dist/services/process/main.js [--role all|gateway|matcher] [--host H] [--port N] [--metrics-port N|off] [--engine auto|gpu|fast|rtree|reference] [--gateways N] [--dev]\n' +
        'Environment: AMBIT_ROLE AMBIT_HOST AMBIT_PORT AMBIT_METRICS_PORT REDIS_URL AMBIT_REDIS_PREFIX AMBIT_ENGINE AMBIT_GATEWAYS AMBIT_FANOUT_SHARDS AMBIT_DEVICE_STREAMS AMBIT_DIRECT_WRITES AMBIT_TOKEN_SECRET AMBIT_JWKS AMBIT_JWKS_REFRESH_S AMBIT_TOKEN_AUDIENCE AMBIT_TOKEN_ISSUER AMBIT_TOKEN_CLOCK_SKEW_S AMBIT_TOKEN_SUBJECT_CLAIM AMBIT_TOKEN_SCOPE_CLAIM AMBIT_DEV\n' +
        '             AMBIT_TLS_CERT AMBIT_TLS_KEY AMBIT_RETENTION_MAX AMBIT_RETENTION_HOURS AMBIT_LOG_LEVEL AMBIT_SHUTDOWN_GRACE_S\n' +
        '             AMBIT_PARTITIONS AMBIT_DEDUPE_WINDOW_S AMBIT_DEDUPE_MAX_IDS AMBIT_REDIS_CLUSTER AMBIT_REDIS_DEVICE_GROUPS AMBIT_MATCHER_PARTITIONS\n' +
        '             AMBIT_MATCHER_PARTITION AMBIT_MATCHER_LEASE_MS AMBIT_SNAPSHOT_DIR AMBIT_SNAPSHOT_INTERVAL_S AMBIT_COMMAND_STREAM_MAXLEN\n' +
        '             AMBIT_GEO_SHARDS AMBIT_GEO_WIDE_SHARDS AMBIT_GEO_CELL_DEG AMBIT_GEO_GUARD_M AMBIT_GEO_LAYOUT\n' +
        '             (docs/service.md, "Configuration", says what each does)\n',
    );
    return;
  }
  const env = { ...process.env };
  if (values.role !== undefined) env.AMBIT_ROLE = values.role;
  if (values.host !== undefined) env.AMBIT_HOST = values.host;
  if (values.port !== undefined) env.AMBIT_PORT = values.port;
  if (values['metrics-port'] !== undefined) env.AMBIT_METRICS_PORT = values['metrics-port'];
  if (values.engine !== undefined) env.AMBIT_ENGINE = values.engine;
  if (values.gateways !== undefined) env.AMBIT_GATEWAYS = values.gateways;
  if (values.dev === true) env.AMBIT_DEV = '1';
  const config = configFromEnv(env);
  const log = isGatewayWorker() ? rootLogger(config.logLevel).child({ gateway: Number(env.AMBIT_GATEWAY_INDEX ?? 0) }) : rootLogger(config.logLevel);
  const server = config.gateways > 1 && !isGatewayWorker() ? await startGatewayNode(config, env, log) : await startServer(config, log);
  if (config.dev && server.authority !== null) {
    const a = server.authority;
    const device = a.issue({ subject: 'demo-device', scopes: [SCOPES.device], ttlSeconds: 86_400 });
    const publisher = a.issue({ subject: 'demo-publisher', scopes: [SCOPES.publish], ttlSeconds: 86_400 });
    const secret = server.config.tokenSecret ?? a.secretForDev();
    const ops = a.issue({ subject: 'demo-ops', scopes: [SCOPES.ops, SCOPES.publish, SCOPES.device, SCOPES.locationAny], ttlSeconds: 86_400 });
    // To stderr, not the JSON log: these are for a person at a terminal, valid one day.
    process.stderr.write(
      `\nAmbit dev mode: gRPC on ${config.host}:${server.port}${server.metricsPort === null ? '' : `, metrics on http://${config.host}:${server.metricsPort}/metrics`}\n` +
        `Tokens (send as "authorization: Bearer <token>"; valid 24 h; this run's secret only):\n` +
        `  device demo-device:    ${device}\n  publisher:             ${publisher}\n  ops (all scopes):      ${ops}\n` +
        `Token secret of this run (dev only): ${secret}\n` +
        `Try: npm run demo -- --server ${config.host}:${server.port} --secret ${secret}\n\n`,
    );
  }
  if (isGatewayWorker() && server.port !== null) process.send?.({ ambit: 'listening', port: server.port, metricsPort: server.metricsPort, webPort: server.webPort });
  let stopping = false;
  const stop = (signal: string, fromSignal = true) => {
    if (stopping) {
      if (!fromSignal) return;
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    server.stop().then(
      () => {
        log.info('stopped');
        // Dawn may keep the event loop alive; everything of ours is closed.
        setTimeout(() => process.exit(0), 100).unref();
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  if (isGatewayWorker()) {
    // The primary asks its workers to stop; a worker whose primary is gone stops too.
    process.on('message', (m: unknown) => {
      if ((m as { ambit?: string } | null)?.ambit === 'stop') stop('primary', false);
    });
    process.on('disconnect', () => stop('primary gone', false));
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`ambit: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
