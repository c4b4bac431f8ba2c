/**
 * Configuration and the API definition's hygiene: configFromEnv's exact errors for each bad
 * AMBIT_* value (and what good values become), checkConfig's rules (also applied by startServer),
 * `buf lint` clean on proto/, and api/gen/ byte for byte what `buf generate` makes today.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DEFAULT_CONFIG, type ServerConfig, checkConfig, configFromEnv } from '../../services/process/config.js';
import { DEFAULT_RETENTION } from '../../services/hub/embedded.js';
import { DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE } from '../../services/hub/port.js';
import { startServer } from '../../services/process/server.js';
import { openPatterns } from '../../services/matcher/engine.js';
import { redisSource } from '../../services/process/roles.js';
import { DEFAULT_CLUSTER_GROUPS, MAX_CLUSTER_GROUPS, MAX_MATCHER_PARTITIONS } from '../../services/redis/keys.js';

// dist/test/service/x.js → the repository root.
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

describe('api config: configFromEnv', () => {
  const bad: [Record<string, string>, string][] = [
    [{ AMBIT_ROLE: 'edge' }, 'config: AMBIT_ROLE must be all, gateway or matcher, got "edge"'],
    [{ AMBIT_PORT: 'http' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "http"'],
    [{ AMBIT_PORT: '-1' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "-1"'],
    [{ AMBIT_PORT: '65536' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "65536"'],
    [{ AMBIT_PORT: '80.5' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "80.5"'],
    [{ AMBIT_PORT: ' 80' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got " 80"'],
    [{ AMBIT_PORT: '1e3' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "1e3"'],
    [{ AMBIT_METRICS_PORT: 'none' }, 'config: AMBIT_METRICS_PORT must be an integer in [0, 65535], got "none"'],
    [{ REDIS_URL: 'http://localhost:6379' }, 'config: REDIS_URL must start with redis:// or rediss://, got "http://localhost:6379"'],
    [{ AMBIT_ENGINE: 'cuda' }, 'config: AMBIT_ENGINE must be one of auto, gpu, fast, rtree, reference, got "cuda"'],
    [{ AMBIT_PATTERN_SEQUENCER: 'gtrex' }, 'config: AMBIT_PATTERN_SEQUENCER must be one of cdp, gpu, got "gtrex"'],
    [{ AMBIT_DEV: 'yes' }, 'config: AMBIT_DEV must be 0, 1, true or false, got "yes"'],
    [{ AMBIT_GPU_CPU_MIRROR: 'off' }, 'config: AMBIT_GPU_CPU_MIRROR must be 0, 1, true or false, got "off"'],
    [{ AMBIT_TLS_CERT: '/etc/cert.pem' }, 'config: AMBIT_TLS_CERT and AMBIT_TLS_KEY must be set together'],
    [{ AMBIT_TLS_KEY: '/etc/key.pem' }, 'config: AMBIT_TLS_CERT and AMBIT_TLS_KEY must be set together'],
    [{ AMBIT_RETENTION_MAX: '0' }, 'config: AMBIT_RETENTION_MAX must be an integer in [1, 10000000], got "0"'],
    [{ AMBIT_RETENTION_MAX: '10000001' }, 'config: AMBIT_RETENTION_MAX must be an integer in [1, 10000000], got "10000001"'],
    [{ AMBIT_RETENTION_HOURS: '0' }, 'config: AMBIT_RETENTION_HOURS must be an integer in [1, 8760], got "0"'],
    [{ AMBIT_RETENTION_HOURS: '1.5' }, 'config: AMBIT_RETENTION_HOURS must be an integer in [1, 8760], got "1.5"'],
    [{ AMBIT_MATCHER_LEASE_MS: '99' }, 'config: AMBIT_MATCHER_LEASE_MS must be an integer in [100, 600000], got "99"'],
    [{ AMBIT_SNAPSHOT_DIR: '/var/lib/ambit' }, 'config: AMBIT_SNAPSHOT_DIR is for Redis mode (REDIS_URL): an embedded node keeps nothing across restarts'],
    [{ AMBIT_SNAPSHOT_DIR: '/var/lib/ambit', REDIS_URL: 'redis://r:6379', AMBIT_ROLE: 'gateway' }, 'config: AMBIT_SNAPSHOT_DIR is for a process that runs a matcher (role matcher or all)'],
    [{ AMBIT_COMMAND_STREAM_MAXLEN: '99', REDIS_URL: 'redis://r:6379' }, 'config: AMBIT_COMMAND_STREAM_MAXLEN must be an integer in [100, 1000000000], got "99"'],
    [{ AMBIT_COMMAND_STREAM_MAXLEN: '500000' }, 'config: AMBIT_COMMAND_STREAM_MAXLEN is for Redis mode (REDIS_URL)'],
    [{ AMBIT_COMMAND_STREAM_MAXLEN: '500000', REDIS_URL: 'redis://r:6379', AMBIT_ROLE: 'matcher' }, 'config: AMBIT_COMMAND_STREAM_MAXLEN is for a process that runs a gateway (role gateway or all): gateways trim the command stream'],
    [{ AMBIT_SNAPSHOT_INTERVAL_S: '-5' }, 'config: AMBIT_SNAPSHOT_INTERVAL_S must be an integer in [0, 604800], got "-5"'],
    [{ AMBIT_DEDUPE_WINDOW_S: '-1' }, 'config: AMBIT_DEDUPE_WINDOW_S must be an integer in [0, 604800], got "-1"'],
    [{ AMBIT_DEDUPE_MAX_IDS: '0' }, 'config: AMBIT_DEDUPE_MAX_IDS must be an integer in [1, 100000000], got "0"'],
    [{ AMBIT_LOG_LEVEL: 'verbose' }, 'config: AMBIT_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"'],
    [{ AMBIT_SHUTDOWN_GRACE_S: '3601' }, 'config: AMBIT_SHUTDOWN_GRACE_S must be an integer in [0, 3600], got "3601"'],
    [{ AMBIT_PORT: '99999999999999999999' }, 'config: AMBIT_PORT must be an integer in [0, 65535], got "99999999999999999999"'],
    [{ AMBIT_GATEWAYS: '0' }, 'config: AMBIT_GATEWAYS must be an integer in [1, 256], got "0"'],
    [{ AMBIT_GATEWAYS: '257' }, 'config: AMBIT_GATEWAYS must be an integer in [1, 256], got "257"'],
    [{ AMBIT_GATEWAYS: 'all' }, 'config: AMBIT_GATEWAYS must be an integer in [1, 256], got "all"'],
    [{ AMBIT_FANOUT_SHARDS: '65', AMBIT_GATEWAYS: '4' }, 'config: AMBIT_FANOUT_SHARDS must be an integer in [0, 64], got "65"'],
    [{ AMBIT_FANOUT_SHARDS: '-1' }, 'config: AMBIT_FANOUT_SHARDS must be an integer in [0, 64], got "-1"'],
    [{ AMBIT_HUB_SHARDS: '/tmp/a.sock' }, 'config: AMBIT_HUB_SHARDS must be a JSON array of socket paths (set by a node for its gateway processes), got "/tmp/a.sock"'],
    [{ AMBIT_HUB_PARTITIONS: '[]' }, 'config: AMBIT_HUB_PARTITIONS must be a JSON array of socket paths (set by a node for its gateway processes), got "[]"'],
    [{ AMBIT_PARTITIONS: '-1' }, 'config: AMBIT_PARTITIONS must be an integer in [0, 64], got "-1"'],
    [{ AMBIT_TOKEN_CLOCK_SKEW_S: '3601' }, 'config: AMBIT_TOKEN_CLOCK_SKEW_S must be an integer in [0, 3600], got "3601"'],
    [{ AMBIT_JWKS_REFRESH_S: '-1' }, 'config: AMBIT_JWKS_REFRESH_S must be an integer in [0, 86400], got "-1"'],
    [{ AMBIT_TOKEN_AUDIENCE: 'ambit' }, "config: AMBIT_TOKEN_AUDIENCE is for an identity provider's tokens (AMBIT_JWKS)"],
    [{ AMBIT_TOKEN_CLOCK_SKEW_S: '30' }, "config: AMBIT_TOKEN_CLOCK_SKEW_S is for an identity provider's tokens (AMBIT_JWKS)"],
    [{ AMBIT_HUB_SHARDS: '["", "b"]' }, 'config: AMBIT_HUB_SHARDS must be a JSON array of socket paths (set by a node for its gateway processes), got "[\\"\\", \\"b\\"]"'],
  ];
  for (const [env, message] of bad) {
    it(`${Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} → ${JSON.stringify(message)}`, () => {
      assert.throws(() => configFromEnv(env), { message });
    });
  }

  it('a TLS file that cannot be read is named by its variable', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-config-'));
    try {
      writeFileSync(join(dir, 'cert.pem'), 'CERT');
      const missing = join(dir, 'nope.pem');
      assert.throws(() => configFromEnv({ AMBIT_TLS_CERT: join(dir, 'cert.pem'), AMBIT_TLS_KEY: missing }), (err: Error) => {
        assert.ok(err.message.startsWith(`config: AMBIT_TLS_KEY names a file that cannot be read (${JSON.stringify(missing)}): ENOENT`), err.message);
        return true;
      });
      const c = configFromEnv({ AMBIT_TLS_CERT: join(dir, 'cert.pem'), AMBIT_TLS_KEY: join(dir, 'cert.pem') });
      assert.equal(c.tls?.cert.toString(), 'CERT');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('identity provider tokens: the key set, audiences and issuers as lists, the skew and the claims', () => {
    const c = configFromEnv({ AMBIT_JWKS: 'https://id.example/.well-known/jwks.json', AMBIT_JWKS_REFRESH_S: '60', AMBIT_TOKEN_AUDIENCE: 'ambit, ambit-staging,', AMBIT_TOKEN_ISSUER: 'https://id.example', AMBIT_TOKEN_CLOCK_SKEW_S: '30', AMBIT_TOKEN_SUBJECT_CLAIM: 'uid', AMBIT_TOKEN_SCOPE_CLAIM: 'roles' });
    assert.deepEqual(
      [c.jwks, c.jwksRefreshS, c.tokenAudience, c.tokenIssuer, c.tokenClockSkewS, c.tokenSubjectClaim, c.tokenScopeClaim],
      ['https://id.example/.well-known/jwks.json', 60, ['ambit', 'ambit-staging'], ['https://id.example'], 30, 'uid', 'roles'],
    );
    assert.equal(configFromEnv({ AMBIT_JWKS: 'http://127.0.0.1:8080/jwks.json', AMBIT_TOKEN_ISSUER: 'local' }).jwks, 'http://127.0.0.1:8080/jwks.json');
    // A whole config's checks (startServer's): an issuer is required, and keys come over https (or from this host).
    const base = { ...DEFAULT_CONFIG, tokenSecret: 's'.repeat(32) };
    assert.throws(() => checkConfig({ ...base, jwks: '/etc/ambit/jwks.json' }), { message: "config: AMBIT_JWKS needs AMBIT_TOKEN_ISSUER (the issuer its tokens must name; keys can be shared across a provider's customers)" });
    assert.throws(() => checkConfig({ ...base, jwks: 'http://id.example/jwks.json', tokenIssuer: ['https://id.example'] }), { message: 'config: AMBIT_JWKS must be a file path or an https:// URL (http:// only on this host), got "http://id.example/jwks.json"' });
    for (const jwks of ['/etc/ambit/jwks.json', 'https://id.example/jwks.json', 'http://localhost:9000/k']) checkConfig({ ...base, jwks, tokenIssuer: ['i'] });
    const d = configFromEnv({});
    assert.deepEqual([d.jwks, d.jwksRefreshS, d.tokenAudience, d.tokenIssuer, d.tokenClockSkewS, d.tokenSubjectClaim, d.tokenScopeClaim], [null, 300, [], [], 0, 'sub', 'scope']);
  });

  it('AMBIT_PATTERN_SEQUENCER picks the hubs\' pattern sequencer: the CDP by default; gpu opens the GPU one, or refuses without a hardware adapter', async () => {
    assert.equal(configFromEnv({}).patternSequencer, 'cdp');
    assert.equal(configFromEnv({ AMBIT_PATTERN_SEQUENCER: 'gpu' }).patternSequencer, 'gpu');
    const cdp = await openPatterns({ engine: 'fast', patternLatenessMs: 0, patternRetainedPerElement: 100, patternSequencer: 'cdp' });
    assert.equal(cdp.stats().sequencer, 'cdp');
    await cdp.close();
    let gpu: Awaited<ReturnType<typeof openPatterns>> | null = null;
    try {
      gpu = await openPatterns({ engine: 'fast', patternLatenessMs: 0, patternRetainedPerElement: 100, patternSequencer: 'gpu' });
    } catch (err) {
      // No hardware adapter here (a software one is refused, as for AMBIT_ENGINE=gpu).
      assert.equal((err as { code?: string }).code, 'UNAVAILABLE', String(err));
    }
    if (gpu !== null) {
      assert.equal(gpu.stats().sequencer, 'gtrex');
      await gpu.close();
    }
  });

  it('no variables: the defaults; empty values count as unset', () => {
    assert.deepEqual(configFromEnv({}), { ...DEFAULT_CONFIG, retention: { ...DEFAULT_RETENTION } });
    assert.deepEqual(configFromEnv({ AMBIT_PORT: '', AMBIT_ROLE: '', AMBIT_ENGINE: '', REDIS_URL: '' }), configFromEnv({}));
    assert.equal(DEFAULT_CONFIG.maxSubscriptionsPerDevice, DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE);
  });

  it('good values land where they belong, and the defaults are not changed by them', () => {
    const c = configFromEnv({
      AMBIT_ROLE: 'gateway',
      AMBIT_HOST: '0.0.0.0',
      AMBIT_PORT: '0',
      AMBIT_METRICS_PORT: 'off',
      REDIS_URL: 'rediss://cache:6380/2',
      AMBIT_REDIS_PREFIX: 'staging:',
      AMBIT_ENGINE: 'rtree',
      AMBIT_GPU_CPU_MIRROR: '0',
      AMBIT_TOKEN_SECRET: 's'.repeat(32),
      AMBIT_DEV: 'true',
      AMBIT_RETENTION_MAX: '5',
      AMBIT_RETENTION_HOURS: '2',
      AMBIT_MATCHER_LEASE_MS: '5000',
      AMBIT_DEDUPE_WINDOW_S: '0',
      AMBIT_DEDUPE_MAX_IDS: '10',
      AMBIT_LOG_LEVEL: 'debug',
      AMBIT_SHUTDOWN_GRACE_S: '0',
    });
    assert.deepEqual(c, {
      ...DEFAULT_CONFIG,
      role: 'gateway',
      host: '0.0.0.0',
      port: 0,
      metricsPort: null,
      redisUrl: 'rediss://cache:6380/2',
      redisPrefix: 'staging:',
      engine: 'rtree',
      gpuCpuMirror: false,
      tokenSecret: 's'.repeat(32),
      dev: true,
      retention: { maxPerDevice: 5, maxAgeMs: 2 * 3600_000 },
      matcherLeaseMs: 5000,
      dedupe: { windowMs: 0, maxIds: 10 },
      logLevel: 'debug',
      shutdownGraceS: 0,
    } satisfies ServerConfig);
    assert.deepEqual(DEFAULT_RETENTION, { maxPerDevice: 10_000, maxAgeMs: 24 * 3600_000 });
    assert.deepEqual(configFromEnv({}).dedupe, { windowMs: 300_000, maxIds: 1_000_000 });
    assert.equal(configFromEnv({ AMBIT_DEDUPE_WINDOW_S: '60' }).dedupe.windowMs, 60_000);
    assert.equal(configFromEnv({ AMBIT_METRICS_PORT: '9100' }).metricsPort, 9100);
    const snap = configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_ROLE: 'matcher', AMBIT_SNAPSHOT_DIR: '/var/lib/ambit', AMBIT_SNAPSHOT_INTERVAL_S: '60' });
    assert.deepEqual([snap.snapshotDir, snap.snapshotIntervalS], ['/var/lib/ambit', 60]);
    assert.deepEqual([DEFAULT_CONFIG.snapshotDir, DEFAULT_CONFIG.snapshotIntervalS], [null, 300]);
    assert.equal(configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_COMMAND_STREAM_MAXLEN: '2000000' }).commandStreamMaxLen, 2_000_000);
    assert.equal(DEFAULT_CONFIG.commandStreamMaxLen, 100_000);
    assert.equal(DEFAULT_CONFIG.stuckReadS, 600);
    assert.equal(configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_MATCHER_STUCK_S: '0' }).stuckReadS, 0);
    assert.throws(() => configFromEnv({ AMBIT_MATCHER_STUCK_S: '60' }), /AMBIT_MATCHER_STUCK_S is for Redis mode/);
    assert.throws(() => configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_MATCHER_STUCK_S: '-1' }), /AMBIT_MATCHER_STUCK_S/);
    assert.equal(DEFAULT_CONFIG.handOverWaitS, 30);
    assert.equal(configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_GEO_SHARDS: '2', AMBIT_HANDOVER_WAIT_S: '0' }).handOverWaitS, 0, '0: no bound');
    assert.equal(configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_GEO_SHARDS: '2', AMBIT_HANDOVER_WAIT_S: '60' }).handOverWaitS, 60);
    assert.throws(() => configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_HANDOVER_WAIT_S: '10' }), /AMBIT_HANDOVER_WAIT_S needs AMBIT_GEO_SHARDS/);
    assert.throws(() => configFromEnv({ REDIS_URL: 'redis://r:6379', AMBIT_GEO_SHARDS: '2', AMBIT_HANDOVER_WAIT_S: '1.5' }), /AMBIT_HANDOVER_WAIT_S/);
    assert.equal(configFromEnv({ AMBIT_DEV: '0' }).dev, false);
    assert.equal(configFromEnv({ AMBIT_DEV: '1' }).dev, true);
  });
});

describe('api config: Redis Cluster variables', () => {
  const seeds = 'redis://10.0.0.1:7000,10.0.0.2:7001';
  const cluster = { AMBIT_REDIS_CLUSTER: '1', REDIS_URL: seeds };
  const urlShape = (url: string) => `config: REDIS_URL for a cluster must be redis://[user:password@]host:port[,host:port...], got ${JSON.stringify(url)}`;
  const notHostPort = (hp: string) => `config: REDIS_URL: ${JSON.stringify(hp)} is not host:port`;
  const groupsRange = (v: string) => `config: AMBIT_REDIS_DEVICE_GROUPS must be an integer in [1, ${MAX_CLUSTER_GROUPS}], got ${JSON.stringify(v)}`;
  const groupsNeedCluster = 'config: AMBIT_REDIS_DEVICE_GROUPS is for a Redis Cluster (AMBIT_REDIS_CLUSTER=1)';
  const prefixBraces = (v: string) => `config: AMBIT_REDIS_PREFIX must not contain { or } on a Redis Cluster (keys carry hash tags), got ${JSON.stringify(v)}`;
  const bad: [Record<string, string>, string][] = [
    [{ AMBIT_REDIS_CLUSTER: 'maybe' }, 'config: AMBIT_REDIS_CLUSTER must be 0, 1, true or false, got "maybe"'],
    [{ AMBIT_REDIS_CLUSTER: 'maybe', REDIS_URL: seeds }, 'config: AMBIT_REDIS_CLUSTER must be 0, 1, true or false, got "maybe"'],
    [{ AMBIT_REDIS_CLUSTER: '1' }, 'config: AMBIT_REDIS_CLUSTER needs REDIS_URL (the seed nodes: redis://host:port[,host:port...])'],
    [{ AMBIT_REDIS_CLUSTER: 'true', REDIS_URL: '' }, 'config: AMBIT_REDIS_CLUSTER needs REDIS_URL (the seed nodes: redis://host:port[,host:port...])'],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:notaport' }, notHostPort('a:notaport')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://' }, urlShape('redis://')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:7000,b' }, notHostPort('b')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:7000,,b:7001' }, notHostPort('')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://:7000' }, notHostPort(':7000')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:0' }, notHostPort('a:0')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:65536' }, notHostPort('a:65536')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:7000/0' }, urlShape('redis://a:7000/0')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://a:7000?db=1' }, urlShape('redis://a:7000?db=1')],
    [{ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'http://a:7000' }, 'config: REDIS_URL must start with redis:// or rediss://, got "http://a:7000"'],
    [{ AMBIT_REDIS_DEVICE_GROUPS: '16' }, groupsNeedCluster],
    [{ AMBIT_REDIS_DEVICE_GROUPS: '16', REDIS_URL: 'redis://r:6379' }, groupsNeedCluster],
    [{ AMBIT_REDIS_DEVICE_GROUPS: '16', REDIS_URL: seeds, AMBIT_REDIS_CLUSTER: '0' }, groupsNeedCluster],
    [{ AMBIT_REDIS_DEVICE_GROUPS: '16', REDIS_URL: seeds, AMBIT_REDIS_CLUSTER: 'false' }, groupsNeedCluster],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '0' }, groupsRange('0')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '4097' }, groupsRange('4097')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '-1' }, groupsRange('-1')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '8.5' }, groupsRange('8.5')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '1e2' }, groupsRange('1e2')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: ' 16' }, groupsRange(' 16')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: 'many' }, groupsRange('many')],
    [{ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '99999999999999999999' }, groupsRange('99999999999999999999')],
    [{ ...cluster, AMBIT_REDIS_PREFIX: 'app{1}:' }, prefixBraces('app{1}:')],
    [{ ...cluster, AMBIT_REDIS_PREFIX: 'app{' }, prefixBraces('app{')],
    [{ ...cluster, AMBIT_REDIS_PREFIX: '}app:' }, prefixBraces('}app:')],
  ];
  for (const [env, message] of bad) {
    it(`${Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} → ${JSON.stringify(message)}`, () => {
      assert.throws(() => configFromEnv(env), { message });
    });
  }

  it('a cluster config parses: the flag, the group count, the seeds for redisSource, the password on every node connection', () => {
    const c = configFromEnv({ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '16', AMBIT_REDIS_PREFIX: 'prod:' });
    assert.deepEqual(c, { ...DEFAULT_CONFIG, retention: { ...DEFAULT_RETENTION }, redisUrl: seeds, redisCluster: true, redisDeviceGroups: 16, redisPrefix: 'prod:' } satisfies ServerConfig);
    const cs = redisSource(c);
    assert.ok(typeof cs === 'object' && 'cluster' in cs, 'a cluster source');
    assert.deepEqual(cs.cluster, [{ host: '10.0.0.1', port: 7000 }, { host: '10.0.0.2', port: 7001 }]);
    assert.equal(cs.options?.redisOptions?.password, undefined, 'no password in the URL, none set');

    const secret = configFromEnv({ AMBIT_REDIS_CLUSTER: 'true', REDIS_URL: 'redis://:secret@h:1,h2:2' });
    const s = redisSource(secret);
    assert.ok(typeof s === 'object' && 'cluster' in s, 'a cluster source');
    assert.deepEqual(s.cluster, [{ host: 'h', port: 1 }, { host: 'h2', port: 2 }], 'every seed, in order');
    assert.equal(s.options?.redisOptions?.password, 'secret');
    assert.equal(s.options?.redisOptions?.username, undefined);

    // User and password (percent-encoded), TLS, a trailing slash, IPv6 in brackets, many seeds.
    const full = redisSource(configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'rediss://app:p%40ss@[::1]:7000,n2:7001,n3:7002/' }));
    assert.ok(typeof full === 'object' && 'cluster' in full, 'a cluster source');
    assert.deepEqual(full.cluster, [{ host: '::1', port: 7000 }, { host: 'n2', port: 7001 }, { host: 'n3', port: 7002 }]);
    assert.equal(full.options?.redisOptions?.username, 'app');
    assert.equal(full.options?.redisOptions?.password, 'p@ss');
    assert.deepEqual(full.options?.redisOptions?.tls, {}, 'rediss: TLS to every node');
    // As ioredis reads a plain URL: a password holding colons is split at the first only; a user alone is a user.
    const colons = redisSource(configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://:pa:ss@h:1' }));
    assert.ok(typeof colons === 'object' && 'cluster' in colons);
    assert.equal(colons.options?.redisOptions?.password, 'pa:ss');
    const userOnly = redisSource(configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://app@h:1' }));
    assert.ok(typeof userOnly === 'object' && 'cluster' in userOnly);
    assert.equal(userOnly.options?.redisOptions?.username, 'app');
    assert.equal(userOnly.options?.redisOptions?.password, undefined);
    // A malformed escape names the variable.
    assert.throws(() => configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://:50%@h:1' }), /^Error: config: REDIS_URL: the user or password has a malformed %-escape$/);

    // One seed is enough; the group count defaults; a prefix without braces is fine.
    const one = configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://127.0.0.1:7000' });
    assert.equal(one.redisCluster, true);
    assert.equal(one.redisDeviceGroups, DEFAULT_CLUSTER_GROUPS);
    assert.equal(one.redisPrefix, 'ambit:');
    const os = redisSource(one);
    assert.ok(typeof os === 'object' && 'cluster' in os, 'a cluster source');
    assert.deepEqual(os.cluster, [{ host: '127.0.0.1', port: 7000 }]);
    assert.equal(os.options?.redisOptions?.tls, undefined, 'redis: no TLS');
    // The bounds of the group count.
    assert.equal(configFromEnv({ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '1' }).redisDeviceGroups, 1);
    assert.equal(configFromEnv({ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: String(MAX_CLUSTER_GROUPS) }).redisDeviceGroups, MAX_CLUSTER_GROUPS);
  });

  it('without the flag REDIS_URL is one plain Redis: redisSource is the URL itself, and braces in the prefix are fine', () => {
    for (const flag of [{}, { AMBIT_REDIS_CLUSTER: '0' }, { AMBIT_REDIS_CLUSTER: 'false' }, { AMBIT_REDIS_CLUSTER: '' }]) {
      const c = configFromEnv({ ...flag, REDIS_URL: 'redis://:secret@r:6379/2', AMBIT_REDIS_PREFIX: 'app{1}:' });
      assert.equal(c.redisCluster, false, JSON.stringify(flag));
      assert.equal(c.redisDeviceGroups, DEFAULT_CLUSTER_GROUPS);
      assert.equal(redisSource(c), 'redis://:secret@r:6379/2');
    }
    assert.equal(configFromEnv({ ...cluster, AMBIT_REDIS_DEVICE_GROUPS: '' }).redisDeviceGroups, DEFAULT_CLUSTER_GROUPS, 'an empty group count counts as unset');
    assert.deepEqual(configFromEnv({ AMBIT_REDIS_DEVICE_GROUPS: '' }), configFromEnv({}), 'an empty group count needs no cluster');
    assert.throws(() => redisSource(configFromEnv({ AMBIT_REDIS_CLUSTER: '0' })), { message: 'redis roles: REDIS_URL is not set' });
  });
});

describe('api config: matcher partitions (AMBIT_MATCHER_PARTITIONS, AMBIT_MATCHER_PARTITION)', () => {
  const redis = { REDIS_URL: 'redis://r:6379' };
  const countRange = (v: string) => `config: AMBIT_MATCHER_PARTITIONS must be an integer in [1, ${MAX_MATCHER_PARTITIONS}], got ${JSON.stringify(v)}`;
  const partRange = (k: number, v: string) => `config: AMBIT_MATCHER_PARTITION must be an integer in [0, ${k - 1}], got ${JSON.stringify(v)}`;
  const needRedis = 'config: AMBIT_MATCHER_PARTITIONS is for Redis mode (REDIS_URL); an embedded node splits its hub with AMBIT_PARTITIONS';
  const notGateway = 'config: AMBIT_MATCHER_PARTITION is for a process that runs a matcher (role matcher or all)';
  const bad: [Record<string, string>, string][] = [
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: 'many' }, countRange('many')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '0' }, countRange('0')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '257' }, countRange('257')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '-2' }, countRange('-2')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2.5' }, countRange('2.5')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '1e1' }, countRange('1e1')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: ' 2' }, countRange(' 2')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '99999999999999999999' }, countRange('99999999999999999999')],
    [{ AMBIT_MATCHER_PARTITIONS: '0' }, countRange('0')],
    // More than one partition is Redis mode only; the message points an embedded node at AMBIT_PARTITIONS.
    [{ AMBIT_MATCHER_PARTITIONS: '2' }, needRedis],
    [{ AMBIT_MATCHER_PARTITIONS: '256', AMBIT_ROLE: 'all' }, needRedis],
    [{ AMBIT_MATCHER_PARTITIONS: '2', REDIS_URL: '' }, needRedis],
    [{ AMBIT_MATCHER_PARTITIONS: '4', AMBIT_MATCHER_PARTITION: '3' }, needRedis],
    // The partition must be one of the deployment's: [0, K-1] (K = 1 unless set).
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '2' }, partRange(2, '2')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '3' }, partRange(2, '3')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '256', AMBIT_MATCHER_PARTITION: '256' }, partRange(256, '256')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '-1' }, partRange(2, '-1')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: 'one' }, partRange(2, 'one')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: 'ALL' }, partRange(2, 'ALL')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '0.5' }, partRange(2, '0.5')],
    [{ ...redis, AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: ' 1' }, partRange(2, ' 1')],
    [{ ...redis, AMBIT_MATCHER_PARTITION: '1' }, partRange(1, '1')],
    [{ AMBIT_MATCHER_PARTITION: '1' }, partRange(1, '1')],
    // A gateway runs no matcher, so naming a partition for it is a mistake.
    [{ ...redis, AMBIT_ROLE: 'gateway', AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '0' }, notGateway],
    [{ ...redis, AMBIT_ROLE: 'gateway', AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '1' }, notGateway],
    [{ ...redis, AMBIT_ROLE: 'gateway', AMBIT_MATCHER_PARTITION: '0' }, notGateway],
  ];
  for (const [env, message] of bad) {
    it(`${Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} → ${JSON.stringify(message)}`, () => {
      assert.throws(() => configFromEnv(env), { message });
    });
  }

  it('defaults: one partition, served whole; "all", unset and empty all mean every partition (null)', () => {
    assert.equal(DEFAULT_CONFIG.matcherPartitions, 1);
    assert.equal(DEFAULT_CONFIG.matcherPartition, null);
    assert.equal(configFromEnv({}).matcherPartitions, 1);
    assert.equal(configFromEnv({}).matcherPartition, null);
    assert.deepEqual(configFromEnv({ AMBIT_MATCHER_PARTITIONS: '', AMBIT_MATCHER_PARTITION: '' }), configFromEnv({}), 'empty values count as unset');
    for (const role of ['matcher', 'all']) {
      for (const part of [{}, { AMBIT_MATCHER_PARTITION: 'all' }, { AMBIT_MATCHER_PARTITION: '' }]) {
        const c = configFromEnv({ ...redis, AMBIT_ROLE: role, AMBIT_MATCHER_PARTITIONS: '3', ...part });
        assert.equal(c.matcherPartitions, 3, `${role} ${JSON.stringify(part)}`);
        assert.equal(c.matcherPartition, null, `${role} ${JSON.stringify(part)}`);
      }
    }
    // A gateway may say "all" (the default): it serves no matcher partition either way.
    const gw = configFromEnv({ ...redis, AMBIT_ROLE: 'gateway', AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: 'all' });
    assert.equal(gw.matcherPartitions, 2);
    assert.equal(gw.matcherPartition, null);
    // One partition needs no Redis (it is the default), and an embedded node keeps its own AMBIT_PARTITIONS.
    assert.deepEqual(configFromEnv({ AMBIT_MATCHER_PARTITIONS: '1' }), configFromEnv({}));
    assert.equal(configFromEnv({ AMBIT_MATCHER_PARTITIONS: '1', AMBIT_PARTITIONS: '4' }).partitions, 4);
  });

  it('good values parse: the count, the partition, the bounds, beside a cluster; nothing else changes', () => {
    const c = configFromEnv({ ...redis, AMBIT_ROLE: 'matcher', AMBIT_MATCHER_PARTITIONS: '4', AMBIT_MATCHER_PARTITION: '3' });
    assert.deepEqual(c, { ...DEFAULT_CONFIG, retention: { ...DEFAULT_RETENTION }, role: 'matcher', redisUrl: 'redis://r:6379', matcherPartitions: 4, matcherPartition: 3 } satisfies ServerConfig);
    checkConfig(c);
    assert.equal(configFromEnv({ ...redis, AMBIT_ROLE: 'matcher', AMBIT_MATCHER_PARTITIONS: '2', AMBIT_MATCHER_PARTITION: '0' }).matcherPartition, 0, 'partition 0 is a partition, not unset');
    assert.equal(configFromEnv({ ...redis, AMBIT_MATCHER_PARTITION: '0' }).matcherPartition, 0, 'partition 0 of the default one');
    const most = configFromEnv({ ...redis, AMBIT_MATCHER_PARTITIONS: String(MAX_MATCHER_PARTITIONS), AMBIT_MATCHER_PARTITION: String(MAX_MATCHER_PARTITIONS - 1) });
    assert.equal(most.matcherPartitions, MAX_MATCHER_PARTITIONS);
    assert.equal(most.matcherPartition, MAX_MATCHER_PARTITIONS - 1);
    assert.equal(MAX_MATCHER_PARTITIONS, 256);
    const gateway = configFromEnv({ ...redis, AMBIT_ROLE: 'gateway', AMBIT_MATCHER_PARTITIONS: '8', AMBIT_TOKEN_SECRET: 's'.repeat(32) });
    assert.equal(gateway.matcherPartitions, 8);
    assert.equal(gateway.matcherPartition, null);
    checkConfig(gateway);
    const onCluster = configFromEnv({ AMBIT_REDIS_CLUSTER: '1', REDIS_URL: 'redis://10.0.0.1:7000', AMBIT_REDIS_DEVICE_GROUPS: '16', AMBIT_MATCHER_PARTITIONS: '3', AMBIT_MATCHER_PARTITION: '2', AMBIT_ROLE: 'matcher' });
    assert.equal(onCluster.redisCluster, true);
    assert.equal(onCluster.redisDeviceGroups, 16);
    assert.equal(onCluster.matcherPartitions, 3);
    assert.equal(onCluster.matcherPartition, 2);
  });
});

describe('api config: checkConfig', () => {
  const base: ServerConfig = { ...DEFAULT_CONFIG, dev: true };
  const bad: [string, Partial<ServerConfig>, string][] = [
    ['gateway without Redis', { role: 'gateway' }, 'config: role gateway needs REDIS_URL (only role all runs without Redis)'],
    ['matcher without Redis', { role: 'matcher' }, 'config: role matcher needs REDIS_URL (only role all runs without Redis)'],
    ['a hub in the parent for role all', { hubInParent: true }, 'config: AMBIT_HUB=parent is for a gateway process without REDIS_URL'],
    ['a hub in the parent beside Redis', { hubInParent: true, role: 'gateway', redisUrl: 'redis://r:6379' }, 'config: AMBIT_HUB=parent is for a gateway process without REDIS_URL'],
    ['several gateways for a matcher', { gateways: 4, role: 'matcher', redisUrl: 'redis://127.0.0.1:6379' }, 'config: AMBIT_GATEWAYS=4 with role matcher: a matcher serves no gRPC'],
    ['fan-out shards beside Redis', { fanoutShards: 2, gateways: 4, redisUrl: 'redis://r:6379' }, 'config: AMBIT_FANOUT_SHARDS is for an embedded node (without REDIS_URL): with Redis the notification logs live in Redis'],
    ['fan-out shards with one gateway', { fanoutShards: 2 }, 'config: AMBIT_FANOUT_SHARDS=2 needs AMBIT_GATEWAYS >= 2: the shards send notifications to gateway processes'],
    ['shard sockets outside a node', { hubShards: ['/tmp/x.sock'] }, 'config: AMBIT_HUB_SHARDS is for a gateway process of an embedded node (with AMBIT_HUB=parent)'],
    ['hub partitions beside Redis', { partitions: 2, redisUrl: 'redis://r:6379' }, 'config: AMBIT_PARTITIONS is for an embedded node (without REDIS_URL): with Redis the matcher runs in its own process'],
    ['hub partitions with fan-out shards', { partitions: 2, fanoutShards: 2, gateways: 2 }, "config: AMBIT_PARTITIONS and AMBIT_FANOUT_SHARDS exclude each other: each partition keeps its devices' notification logs itself"],
    ['too many hub partitions', { partitions: 65 }, 'config: AMBIT_PARTITIONS must be an integer in [0, 64], got 65'],
    ['partition sockets outside a node', { hubPartitions: ['/tmp/x.sock'] }, 'config: AMBIT_HUB_PARTITIONS is for a gateway process of an embedded node (with AMBIT_HUB=parent)'],
    ['a fractional number of shards', { fanoutShards: 0.5, gateways: 2 }, 'config: AMBIT_FANOUT_SHARDS must be an integer in [0, 64], got 0.5'],
    ['a fractional number of gateways', { gateways: 1.5 }, 'config: gateways must be an integer in [1, 256], got 1.5'],
    ['no secret outside dev mode', { dev: false }, 'config: AMBIT_TOKEN_SECRET is required (at least 32 bytes), or AMBIT_DEV=1 for a made-up one'],
    ['a short secret', { tokenSecret: 'short' }, 'config: AMBIT_TOKEN_SECRET must be at least 32 bytes, got 5'],
    ['a secret of 31 bytes in 16 characters', { tokenSecret: `${'é'.repeat(15)}x` }, 'config: AMBIT_TOKEN_SECRET must be at least 32 bytes, got 31'],
    ['a zero subscription cap', { maxSubscriptionsPerDevice: 0 }, 'config: maxSubscriptionsPerDevice must be an integer >= 1, got 0'],
    ['a fractional subscription cap', { maxSubscriptionsPerDevice: 2.5 }, 'config: maxSubscriptionsPerDevice must be an integer >= 1, got 2.5'],
  ];
  for (const [label, patch, message] of bad) {
    it(`${label} → ${JSON.stringify(message)}`, () => {
      assert.throws(() => checkConfig({ ...base, ...patch }), { message });
    });
  }

  it('accepted: dev mode without a secret, a secret of 32 bytes in 16 characters, a matcher with Redis and no secret, several gateways on the embedded hub', () => {
    checkConfig(base);
    checkConfig({ ...base, gateways: 4 });
    checkConfig({ ...base, role: 'gateway', hubInParent: true });
    checkConfig({ ...base, dev: false, tokenSecret: 'é'.repeat(16) });
    checkConfig({ ...base, dev: false, role: 'matcher', redisUrl: 'redis://r:6379' });
  });

  it('startServer applies the same checks before it opens anything', async () => {
    await assert.rejects(startServer({ port: 0, metricsPort: 0, engine: 'fast', tokenSecret: 'short' }), { message: 'config: AMBIT_TOKEN_SECRET must be at least 32 bytes, got 5' });
    await assert.rejects(startServer({ port: 0, metricsPort: 0, engine: 'fast', dev: true, maxSubscriptionsPerDevice: -1 }), { message: 'config: maxSubscriptionsPerDevice must be an integer >= 1, got -1' });
  });
});

describe('api config: proto/ and api/gen/', () => {
  const bin = join(ROOT, 'node_modules/.bin');
  const buf = join(bin, 'buf');
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` };
  const skip = existsSync(buf) ? false : `${buf} is not installed (npm install adds @bufbuild/buf)`;

  it('buf lint is clean', { skip }, () => {
    execFileSync(buf, ['lint'], { cwd: ROOT, env, stdio: 'pipe' });
  });

  it('api/gen is exactly what buf generate makes from proto/ now', { skip }, () => {
    const out = mkdtempSync(join(tmpdir(), 'ambit-gen-'));
    try {
      execFileSync(buf, ['generate', '--template', 'buf.gen.yaml', '-o', out], { cwd: ROOT, env, stdio: 'pipe' });
      const files = (dir: string): string[] =>
        readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? files(join(dir, n)) : [join(dir, n)]));
      const fresh = join(out, 'api/gen');
      const committed = join(ROOT, 'api/gen');
      const names = (dir: string) => files(dir).map((f) => relative(dir, f)).sort();
      assert.deepEqual(names(committed), names(fresh), 'the same files (none stale, none missing)');
      for (const f of names(fresh)) {
        assert.ok(readFileSync(join(committed, f)).equals(readFileSync(join(fresh, f))), `api/gen/${f} is out of date: run npm run proto`);
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe('api config: sharding by space (AMBIT_GEO_*)', () => {
  const redis = { REDIS_URL: 'redis://r:6379' };
  const shardsRange = (v: string) => `config: AMBIT_GEO_SHARDS must be an integer in [1, 128], got ${JSON.stringify(v)}`;
  const needShards = (name: string) => `config: ${name} needs AMBIT_GEO_SHARDS (sharding by space)`;
  const bad: [Record<string, string>, string][] = [
    [{ ...redis, AMBIT_GEO_SHARDS: '0' }, shardsRange('0')],
    [{ ...redis, AMBIT_GEO_SHARDS: '129' }, shardsRange('129')],
    [{ ...redis, AMBIT_GEO_SHARDS: 'two' }, shardsRange('two')],
    [{ ...redis, AMBIT_GEO_SHARDS: '1.5' }, shardsRange('1.5')],
    [{ AMBIT_GEO_SHARDS: '2' }, 'config: AMBIT_GEO_SHARDS is for Redis mode (REDIS_URL)'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_MATCHER_PARTITIONS: '2' }, 'config: AMBIT_GEO_SHARDS and AMBIT_MATCHER_PARTITIONS exclude each other: a deployment sharded by space has AMBIT_GEO_SHARDS + AMBIT_GEO_WIDE_SHARDS matcher partitions'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_WIDE_SHARDS: '0' }, 'config: AMBIT_GEO_WIDE_SHARDS must be an integer in [1, 64], got "0"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_WIDE_SHARDS: '65' }, 'config: AMBIT_GEO_WIDE_SHARDS must be an integer in [1, 64], got "65"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_CELL_DEG: '0' }, 'config: AMBIT_GEO_CELL_DEG must be a number in [0.001, 30], got "0"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_CELL_DEG: '31' }, 'config: AMBIT_GEO_CELL_DEG must be a number in [0.001, 30], got "31"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_CELL_DEG: 'NaN' }, 'config: AMBIT_GEO_CELL_DEG must be a number in [0.001, 30], got "NaN"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_CELL_DEG: '1e-2' }, 'config: AMBIT_GEO_CELL_DEG must be a number in [0.001, 30], got "1e-2"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_GUARD_M: '-1' }, 'config: AMBIT_GEO_GUARD_M must be a number in [0, 100000], got "-1"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_GUARD_M: 'Infinity' }, 'config: AMBIT_GEO_GUARD_M must be a number in [0, 100000], got "Infinity"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_GUARD_M: '100001' }, 'config: AMBIT_GEO_GUARD_M must be a number in [0, 100000], got "100001"'],
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_GEO_LAYOUT: 'hexagons' }, 'config: AMBIT_GEO_LAYOUT must be stripes or sectors, got "hexagons"'],
    [{ ...redis, AMBIT_GEO_WIDE_SHARDS: '2' }, needShards('AMBIT_GEO_WIDE_SHARDS')],
    [{ ...redis, AMBIT_GEO_CELL_DEG: '0.1' }, needShards('AMBIT_GEO_CELL_DEG')],
    [{ ...redis, AMBIT_GEO_GUARD_M: '10' }, needShards('AMBIT_GEO_GUARD_M')],
    [{ AMBIT_GEO_LAYOUT: 'stripes' }, needShards('AMBIT_GEO_LAYOUT')],
    // The shards are the deployment's matcher partitions: geographic, then wide.
    [{ ...redis, AMBIT_GEO_SHARDS: '2', AMBIT_MATCHER_PARTITION: '3' }, 'config: AMBIT_MATCHER_PARTITION must be an integer in [0, 2], got "3"'],
  ];
  for (const [env, message] of bad) {
    it(`${Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} → ${JSON.stringify(message)}`, () => {
      assert.throws(() => configFromEnv(env), { message });
    });
  }

  it('defaults: not sharded by space; with AMBIT_GEO_SHARDS one wide shard, 0.05° stripes and a 500 m guard band; the shards are the matcher partitions', () => {
    assert.equal(DEFAULT_CONFIG.geo, null);
    assert.equal(configFromEnv(redis).geo, null);
    const c = configFromEnv({ ...redis, AMBIT_GEO_SHARDS: '3' });
    assert.deepEqual(c.geo, { shards: 3, wide: 1, cellDeg: 0.05, guardM: 500, layout: 'stripes' });
    assert.equal(c.matcherPartitions, 4);
    assert.equal(c.matcherPartition, null);
    const d = configFromEnv({ ...redis, AMBIT_GEO_SHARDS: '4', AMBIT_GEO_WIDE_SHARDS: '2', AMBIT_GEO_CELL_DEG: '0.25', AMBIT_GEO_GUARD_M: '0', AMBIT_GEO_LAYOUT: 'sectors', AMBIT_ROLE: 'matcher', AMBIT_MATCHER_PARTITION: '5' });
    assert.deepEqual(d.geo, { shards: 4, wide: 2, cellDeg: 0.25, guardM: 0, layout: 'sectors' });
    assert.equal(d.matcherPartitions, 6);
    assert.equal(d.matcherPartition, 5);
    assert.deepEqual(configFromEnv({ ...redis, AMBIT_GEO_SHARDS: '', AMBIT_GEO_LAYOUT: '' }), configFromEnv(redis), 'empty values count as unset');
  });
});
