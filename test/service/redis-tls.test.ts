/**
 * Mutual TLS between the roles and Redis (AMBIT_REDIS_TLS_CA, AMBIT_REDIS_TLS_CERT,
 * AMBIT_REDIS_TLS_KEY): a redis-server that takes TLS clients only with a certificate its CA
 * signed (certificates made here with openssl), a node in Redis mode on rediss:// whose publish
 * reaches a device; the configuration's checks.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { configFromEnv } from '../../services/process/config.js';
import { redisSource } from '../../services/process/roles.js';
import { DeviceStream, type Init, startTestServer, unary } from '../support/grpc.js';
import { freePort } from '../support/ports.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

describe('Redis over mutual TLS', { skip: redisServerMissing() ?? false, timeout: 60_000 }, () => {
  let dir = '';
  let redis: RedisServer | null = null;
  let tlsPort = 0;
  let why = '';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ambit-redis-tls-'));
    const ossl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe', cwd: dir });
    try {
      ossl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=ambit test CA', '-keyout', 'ca.key', '-out', 'ca.crt');
      for (const [name, cn, ext] of [['server', 'localhost', ['-extfile', 'san.cnf']], ['client', 'ambit-node', []]] as const) {
        if (name === 'server') execFileSync('sh', ['-c', 'printf "subjectAltName=DNS:localhost" > san.cnf'], { cwd: dir });
        ossl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${cn}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
        ossl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', `${name}.crt`, ...ext);
      }
    } catch (err) {
      why = `openssl could not make the certificates: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
      return;
    }
    tlsPort = await freePort();
    try {
      redis = await startRedisServer({ args: ['--tls-port', String(tlsPort), '--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', join(dir, 'server.key'), '--tls-ca-cert-file', join(dir, 'ca.crt'), '--tls-auth-clients', 'yes'] });
    } catch (err) {
      why = `redis-server without TLS: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
    }
  });

  after(async () => {
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a node on rediss:// with its client certificate serves a publish to a device', async (t) => {
    if (why !== '') return t.skip(why);
    const redisTls = { ca: readFileSync(join(dir, 'ca.crt')), cert: readFileSync(join(dir, 'client.crt')), key: readFileSync(join(dir, 'client.key')) };
    // The server takes no TLS client without a certificate: what the node connects with is its own.
    const bare = new Redis({ host: 'localhost', port: tlsPort, tls: { ca: redisTls.ca, servername: 'localhost' }, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    bare.on('error', () => {});
    await assert.rejects(bare.connect().then(() => bare.ping()));
    bare.disconnect();
    const srv = await startTestServer({ redisUrl: `rediss://localhost:${tlsPort}`, redisTls, redisPrefix: 'tls:' });
    try {
      const clients = srv.clients();
      const { stream } = await DeviceStream.open(clients, srv.token('tls-dev', ['device']));
      await stream.subscribeOk({ id: 'all', filters: [{}] });
      const r = (await unary(clients.publisher, 'publish', { event: { id: 'over-tls', position: { lat: 0, lon: 0 }, attributes: {} } }, srv.meta('pub', ['publish']), { deadline: Date.now() + 10_000 })) as Init;
      assert.equal(r.reached, 1n);
      assert.equal((await stream.notifications(1))[0].event!.id, 'over-tls');
      stream.cancel();
      clients.close();
    } finally {
      await srv.stop();
    }
  });

  it('configuration: PEM files, a client certificate whole, rediss:// only; cluster and plain sources carry the material', (t) => {
    if (why !== '') return t.skip(why);
    const files = { AMBIT_REDIS_TLS_CA: join(dir, 'ca.crt'), AMBIT_REDIS_TLS_CERT: join(dir, 'client.crt'), AMBIT_REDIS_TLS_KEY: join(dir, 'client.key') };
    const c = configFromEnv({ REDIS_URL: 'rediss://user:p%40ss@localhost:6390/2', ...files });
    assert.ok(c.redisTls?.ca !== undefined && c.redisTls.cert !== undefined && c.redisTls.key !== undefined);
    const plain = redisSource(c) as Record<string, unknown>;
    assert.deepEqual([plain.host, plain.port, plain.username, plain.password, plain.db, (plain.tls as { servername: string }).servername], ['localhost', 6390, 'user', 'p@ss', 2, 'localhost']);
    const cluster = redisSource({ ...configFromEnv({ REDIS_URL: 'rediss://a:1,b:2', AMBIT_REDIS_CLUSTER: '1', ...files }) }) as { options: { redisOptions: { tls: { cert: Buffer } } } };
    assert.ok(Buffer.isBuffer(cluster.options.redisOptions.tls.cert));
    assert.throws(() => configFromEnv({ REDIS_URL: 'redis://localhost:6379', AMBIT_REDIS_TLS_CA: files.AMBIT_REDIS_TLS_CA }), /need a rediss:\/\/ REDIS_URL/);
    assert.throws(() => configFromEnv({ REDIS_URL: 'rediss://localhost:6379', AMBIT_REDIS_TLS_CERT: files.AMBIT_REDIS_TLS_CERT }), /must be set together/);
  });
});
