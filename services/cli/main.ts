#!/usr/bin/env node
/**
 * `ambit`: the operators' command line, so running a deployment needs no TypeScript.
 *
 *   ambit token --subject S --scopes device,publish [--ttl SECONDS] [--tenant T]   mint a token (AMBIT_TOKEN_SECRET)
 *   ambit stats                                                       server totals
 *   ambit device ID                                                   a device's subscriptions, position, connection
 *   ambit move-cells ROW,COL:SHARD ...                                give cells of the shard map to other shards
 *   ambit plan-cells [--max-moves N] [--apply]                        cells to move so the shards hold even numbers of devices
 *   ambit ready [--metrics URL]                                       a process's /readyz (exit 0 ready, 1 not)
 *   ambit drain                                                       drain the gateway at --address
 *   ambit unsubscribe DEVICE SUBSCRIPTION                             remove one subscription of a device
 *   ambit devices [--prefix P] [--limit N] [--page-token T] [--all]   devices holding subscriptions, a page at a time
 *   ambit purge DEVICE                                                remove everything held for a device
 *   ambit revoke subject S | token-id ID | token T [--keep-days N]    revoke tokens in the whole deployment
 *
 * Calls go to `--address` (AMBIT_ADDRESS, default 127.0.0.1:50051) with `--token` (AMBIT_OPS_TOKEN)
 * over plaintext, or TLS with `--tls` (system roots) or `--tls-ca FILE`. `--json` prints JSON.
 * Exit status: 0 done, 1 the call failed (the error's code, message and field on stderr), 2 usage.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { AmbitOps, type DeviceSummary as OpsDeviceSummary } from '../../sdk/ops.js';
import { AmbitError } from '../../sdk/errors.js';
import { KNOWN_SCOPES, TokenAuthority } from '../edge/auth.js';

const USAGE = `usage: ambit <command> [options]
  token --subject S --scopes LIST [--ttl SECONDS] [--tenant T]   mint a token with AMBIT_TOKEN_SECRET (scopes: ${[...KNOWN_SCOPES].join(', ')})
  stats                                             the server's totals
  device ID                                         a device's subscriptions, last position and connection
  move-cells ROW,COL:SHARD ...                      give cells of the shard map to other geographic shards
  plan-cells [--max-moves N] [--apply]              the cells to move so the geographic shards hold even numbers of
                                                    devices (default at most 100); --apply moves them
  ready [--metrics URL]                             a process's readiness (default http://127.0.0.1:9464)
  drain                                             drain the gateway at --address before stopping it
  unsubscribe DEVICE SUBSCRIPTION                   remove one subscription of a device
  devices [--prefix P] [--limit N] [--page-token T] [--all]
                                                    the devices holding subscriptions, a page (or --all pages)
  purge DEVICE                                      remove a device's subscriptions, position and backlog
  revoke subject S | token-id ID | token T [--keep-days N]
                                                    revoke every token of a subject issued up to now, one token
                                                    by its id (token --json prints it) or one token whole
options: --address HOST:PORT (AMBIT_ADDRESS, 127.0.0.1:50051)  --token T (AMBIT_OPS_TOKEN)  --tls  --tls-ca FILE
         --deadline-ms N (30000)  --json
`;

class Usage extends Error {}

function out(json: boolean, value: unknown, text: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${text()}\n`);
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        address: { type: 'string' },
        token: { type: 'string' },
        tls: { type: 'boolean' },
        'tls-ca': { type: 'string' },
        'deadline-ms': { type: 'string' },
        json: { type: 'boolean' },
        subject: { type: 'string' },
        scopes: { type: 'string' },
        ttl: { type: 'string' },
        tenant: { type: 'string' },
        metrics: { type: 'string' },
        prefix: { type: 'string' },
        limit: { type: 'string' },
        'page-token': { type: 'string' },
        all: { type: 'boolean' },
        'keep-days': { type: 'string' },
        'max-moves': { type: 'string' },
        apply: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    throw new Usage(err instanceof Error ? err.message : String(err));
  }
  const { values: v, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (v.help === true || command === undefined || command === 'help') {
    if (command === undefined && v.help !== true) {
      process.stderr.write(USAGE);
      return 2;
    }
    process.stdout.write(USAGE);
    return 0;
  }
  const json = v.json === true;

  if (command === 'token') {
    const secret = process.env.AMBIT_TOKEN_SECRET;
    if (secret === undefined || secret === '') throw new Usage('token: set AMBIT_TOKEN_SECRET to the deployment\'s secret');
    if (v.subject === undefined) throw new Usage('token: --subject is required');
    if (v.scopes === undefined) throw new Usage('token: --scopes is required (a comma-separated list)');
    const ttl = v.ttl === undefined ? 86_400 : Number(v.ttl);
    if (!Number.isInteger(ttl) || ttl <= 0) throw new Usage(`token: --ttl must be a whole number of seconds > 0, got ${JSON.stringify(v.ttl)}`);
    if (rest.length > 0) throw new Usage(`token: unexpected ${JSON.stringify(rest[0])}`);
    const scopes = v.scopes.split(',').map((x) => x.trim()).filter((x) => x !== '');
    let token: string;
    try {
      token = new TokenAuthority(secret).issue({ subject: v.subject, scopes, ttlSeconds: ttl, ...(v.tenant === undefined ? {} : { tenant: v.tenant }) });
    } catch (err) {
      throw new Usage(`token: ${err instanceof Error ? err.message.replace(/^auth: /, '') : String(err)}`);
    }
    out(json, { token, tokenId: new TokenAuthority(secret).verify(token).tokenId, subject: v.subject, scopes, expiresInSeconds: ttl, ...(v.tenant === undefined ? {} : { tenant: v.tenant }) }, () => token);
    return 0;
  }

  const deadlineMs = v['deadline-ms'] === undefined ? 30_000 : Number(v['deadline-ms']);
  if (!Number.isInteger(deadlineMs) || deadlineMs <= 0) throw new Usage(`--deadline-ms must be a whole number > 0, got ${JSON.stringify(v['deadline-ms'])}`);

  if (command === 'ready') {
    if (rest.length > 0) throw new Usage(`ready: unexpected ${JSON.stringify(rest[0])}`);
    const base = (v.metrics ?? 'http://127.0.0.1:9464').replace(/\/+$/, '');
    let report: { ready: boolean; draining: boolean; checks: Record<string, { ok: boolean; required: boolean; detail: string }> };
    try {
      const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(deadlineMs) });
      const text = await res.text();
      try {
        report = JSON.parse(text) as typeof report;
      } catch {
        process.stderr.write(`ambit: ${base}/readyz answered ${res.status}: ${text.trim()}\n`);
        return 1;
      }
    } catch (err) {
      process.stderr.write(`ambit: cannot reach ${base}/readyz: ${err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err)}\n`);
      return 1;
    }
    out(json, report, () =>
      [`${report.ready ? 'ready' : 'NOT READY'}${report.draining ? ' (stopping)' : ''}`, ...Object.entries(report.checks).map(([name, c]) => `  ${c.ok ? 'ok  ' : c.required ? 'FAIL' : 'warn'} ${name}: ${c.detail}`)].join('\n'),
    );
    return report.ready ? 0 : 1;
  }

  if (!['stats', 'device', 'move-cells', 'plan-cells', 'drain', 'unsubscribe', 'devices', 'purge', 'revoke'].includes(command)) throw new Usage(`unknown command ${JSON.stringify(command)}`);
  const token = v.token ?? process.env.AMBIT_OPS_TOKEN;
  if (token === undefined || token === '') throw new Usage(`${command}: pass --token or set AMBIT_OPS_TOKEN (a token with the ops scope: ambit token --subject you --scopes ops)`);
  if ((command === 'stats' || command === 'drain' || command === 'devices' || command === 'plan-cells') && rest.length > 0) throw new Usage(`${command}: unexpected ${JSON.stringify(rest[0])}`);
  let limit = 0;
  if (v.limit !== undefined) {
    limit = Number(v.limit);
    if (!/^\d+$/.test(v.limit) || limit < 1 || limit > 1000) throw new Usage(`--limit: an integer in [1, 1000], got ${JSON.stringify(v.limit)}`);
  }
  let maxMoves = 100;
  if (v['max-moves'] !== undefined) {
    maxMoves = Number(v['max-moves']);
    if (!/^\d+$/.test(v['max-moves']) || maxMoves < 1 || maxMoves > 100_000) throw new Usage(`--max-moves: an integer in [1, 100000], got ${JSON.stringify(v['max-moves'])}`);
  }
  if (v.all === true && v['page-token'] !== undefined) throw new Usage('devices: --all starts from the first page; leave out --page-token');
  let tls: boolean | { rootCerts: Buffer } = v.tls === true;
  if (v['tls-ca'] !== undefined) {
    try {
      tls = { rootCerts: readFileSync(v['tls-ca']) };
    } catch (err) {
      throw new Usage(`--tls-ca: cannot read ${v['tls-ca']}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const ops = new AmbitOps(v.address ?? process.env.AMBIT_ADDRESS ?? '127.0.0.1:50051', token, { tls, deadlineMs });
  try {
    if (command === 'stats') {
      const s = await ops.stats();
      out(json, s, () => Object.entries(s).map(([k, x]) => `${k.padEnd(22)} ${String(x)}`).join('\n'));
    } else if (command === 'device') {
      if (rest.length !== 1) throw new Usage('device: give one device id');
      const d = await ops.deviceSubscriptions(rest[0]);
      out(json, d, () =>
        [
          `device ${rest[0]}: ${d.connected ? 'connected' : 'not connected'}, ${d.location === null ? 'no position' : `at ${d.location.lat}, ${d.location.lon}`}, ${d.subscriptions.length} subscriptions`,
          ...d.subscriptions.map((s) => `  ${s.id}: ${s.pattern === undefined ? JSON.stringify(s.filters) : `pattern ${JSON.stringify(s.pattern)}`}`),
        ].join('\n'),
      );
    } else if (command === 'unsubscribe') {
      if (rest.length !== 2) throw new Usage('unsubscribe: give the device id and the subscription id');
      await ops.deleteSubscription(rest[0], rest[1]);
      out(json, { deviceId: rest[0], subscriptionId: rest[1], removed: true }, () => `removed subscription ${rest[1]} of device ${rest[0]}`);
    } else if (command === 'devices') {
      const line = (d: { deviceId: string; subscriptions: number; location: { lat: number; lon: number } | null; lastSeenMs: number }) =>
        `${d.deviceId}  ${d.subscriptions} subscriptions  ${d.location === null ? 'no position' : `at ${d.location.lat}, ${d.location.lon}`}  ${d.lastSeenMs === 0 ? 'never seen' : `seen ${new Date(d.lastSeenMs).toISOString()}`}`;
      if (v.all === true) {
        const all: OpsDeviceSummary[] = [];
        for await (const d of ops.allDevices({ pageSize: limit || 1000, idPrefix: v.prefix ?? '' })) all.push(d);
        out(json, { devices: all }, () => (all.length === 0 ? 'no devices' : all.map(line).join('\n')));
      } else {
        const page = await ops.listDevices({ pageSize: limit, pageToken: v['page-token'] ?? '', idPrefix: v.prefix ?? '' });
        out(json, page, () => [...(page.devices.length === 0 ? ['no devices'] : page.devices.map(line)), ...(page.nextPageToken === '' ? [] : [`more: ambit devices --page-token ${page.nextPageToken}${v.prefix === undefined ? '' : ` --prefix ${JSON.stringify(v.prefix)}`}`])].join('\n'));
      }
    } else if (command === 'revoke') {
      const [kind, value] = rest;
      if (rest.length !== 2 || !['subject', 'token-id', 'token'].includes(kind)) throw new Usage('revoke: give subject S, token-id ID or token T');
      let keepDays: number | undefined;
      if (v['keep-days'] !== undefined) {
        keepDays = Number(v['keep-days']);
        if (!/^\d+$/.test(v['keep-days']) || keepDays < 1 || keepDays > 3650) throw new Usage(`--keep-days: an integer in [1, 3650], got ${JSON.stringify(v['keep-days'])}`);
        if (kind === 'token') throw new Usage('revoke token: a token given whole is revoked until it expires; leave out --keep-days');
      }
      const r = await ops.revokeTokens(kind === 'subject' ? { subject: value, keepDays } : kind === 'token-id' ? { tokenId: value, keepDays } : { token: value });
      out(json, { revoked: kind === 'token' ? 'token' : `${kind} ${value}`, ...r, keptUntil: new Date(r.keptUntilMs).toISOString() }, () => `revoked ${kind === 'subject' ? `every token of ${value} issued up to now` : kind === 'token-id' ? `token ${value}` : 'the token'} until ${new Date(r.keptUntilMs).toISOString()}; ${r.streamsEnded} device streams ended on this gateway`);
    } else if (command === 'purge') {
      if (rest.length !== 1) throw new Usage('purge: give one device id');
      const r = await ops.purgeDevice(rest[0]);
      out(json, { deviceId: rest[0], ...r }, () => `purged device ${rest[0]}: ${r.subscriptionsRemoved} subscriptions, ${r.notificationsRemoved} notifications, ${r.hadLocation ? 'its position' : 'no position'}`);
    } else if (command === 'plan-cells') {
      const plan = await ops.planCells(maxMoves);
      const cells = plan.moves.map((m) => `${m.row},${m.col}:${m.shard}`).join(' ');
      const applied = v.apply === true && plan.moves.length > 0 ? await ops.moveCells(plan.moves) : null;
      out(json, { ...plan, ...(applied === null ? {} : { applied }) }, () =>
        [
          `devices per geographic shard: ${plan.devicesBefore.join(' ')} now, ${plan.devicesAfter.join(' ')} after ${plan.moves.length} moves`,
          plan.moves.length === 0 ? 'nothing to move' : applied === null ? `moves: ${cells}\n(ambit plan-cells --apply, or ambit move-cells ${cells})` : `moved: shard map version ${applied.shardMapVersion}, ${applied.devicesMoved} devices handed over`,
        ].join('\n'),
      );
    } else if (command === 'drain') {
      const r = await ops.drainGateway();
      out(json, r, () => `draining: ${r.streamsEnded} device streams ended; new ones are refused until the process stops`);
    } else {
      if (rest.length === 0) throw new Usage('move-cells: give at least one ROW,COL:SHARD');
      const moves = rest.map((m) => {
        const x = /^(-?\d+),(-?\d+):(\d+)$/.exec(m);
        if (x === null) throw new Usage(`move-cells: ${JSON.stringify(m)} is not ROW,COL:SHARD (e.g. 2270,4729:1)`);
        return { row: Number(x[1]), col: Number(x[2]), shard: Number(x[3]) };
      });
      const r = await ops.moveCells(moves);
      out(json, r, () => `shard map version ${r.shardMapVersion}: ${r.devicesMoved} devices moved`);
    }
    return 0;
  } finally {
    ops.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof Usage) {
      process.stderr.write(`ambit: ${err.message}\n\n${USAGE}`);
      process.exitCode = 2;
    } else if (err instanceof AmbitError) {
      process.stderr.write(`ambit: ${err.codeName}: ${err.details}${err.field === '' ? '' : ` (field ${err.field})`}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`ambit: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    }
  },
);
