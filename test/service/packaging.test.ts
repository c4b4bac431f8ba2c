/**
 * The packaging in deploy/: the Dockerfile, the compose file and the Kubernetes manifests parse and
 * agree with the server: every variable they set is documented and accepted by the configuration
 * (configFromEnv + checkConfig), ports are the ones the server listens on, the image runs as a
 * user of its own. The compose topologies (Redis, two matchers, two gateways of two processes each;
 * a Redis Cluster, two matcher partitions with a standby each, two gateways) are then started with
 * real processes from the compose files' own environments and serve devices end to end. Images cannot be pulled here: what Docker itself would do is not run.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parse, parseAllDocuments } from 'yaml';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { checkConfig, configFromEnv } from '../../services/process/config.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, unary } from '../support/grpc.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';
import { type RedisClusterHandle, redisClusterMissing, startRedisCluster } from '../support/redis-cluster.js';

const ROOT = new URL('../../../', import.meta.url);
const read = (p: string) => readFileSync(new URL(p, ROOT), 'utf8');

/** The variables docs/service.md documents (its configuration table). */
const DOCUMENTED = new Set(
  [...read('docs/service.md').matchAll(/^\| (`(?:AMBIT_|REDIS_)[^|]*)\|/gm)].flatMap((m) => [...m[1].matchAll(/`((?:AMBIT_|REDIS_)[A-Z_]+)`/g)].map((n) => n[1])),
);
const SECRET = 'packaging-test-secret-0123456789abcdef01';

type Env = Record<string, string>;

/** One scratch directory for the processes' snapshot volumes, removed at the end. */
let scratchDir: string | null = null;
function scratch(): string {
  scratchDir ??= mkdtempSync(join(tmpdir(), 'ambit-packaging-'));
  return scratchDir;
}
after(() => {
  if (scratchDir !== null) rmSync(scratchDir, { recursive: true, force: true });
});

/** A container's environment as the server would see it, checked whole; returns the config. */
function accepted(where: string, env: Env) {
  for (const name of Object.keys(env)) assert.ok(DOCUMENTED.has(name), `${where}: ${name} is not a documented variable`);
  const c = configFromEnv(env);
  checkConfig(c);
  assert.equal(c.port, 50051, `${where}: the gRPC port is the image's`);
  assert.equal(c.metricsPort, 9464, `${where}: the metrics port is the image's`);
  return c;
}

interface ComposeService {
  image?: string;
  volumes?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  command?: string[];
}

function compose(file = 'deploy/compose.yaml'): Record<string, ComposeService> {
  const doc = parse(read(file), { merge: true }) as { services: Record<string, ComposeService> };
  return doc.services;
}

/** The compose services that run Ambit (the rest are Redis nodes and their one-shot init). */
const ambitServices = (services: Record<string, ComposeService>) => Object.entries(services).filter(([, s]) => s.image === 'ambit:latest');

/** A compose environment with its `${VAR:?...}` references filled in. */
function filled(env: Record<string, string>, vars: Env): Env {
  const out: Env = {};
  for (const [k, v] of Object.entries(env)) {
    out[k] = String(v).replace(/\$\{([A-Z_]+)(?::\?[^}]*)?\}/g, (_, name: string) => {
      assert.ok(name in vars, `compose refers to ${name}`);
      return vars[name];
    });
  }
  return out;
}

describe('packaging: deploy/ agrees with the server', () => {
  it('the Dockerfile builds in stages, runs the server entry point as a user of its own, exposes its ports', () => {
    const d = read('deploy/Dockerfile');
    assert.equal([...d.matchAll(/^FROM /gm)].length, 2, 'a build stage and a runtime stage');
    assert.match(d, /^USER node$/m);
    assert.match(d, /^EXPOSE 50051 9464$/m);
    const entry = /^ENTRYPOINT \[(.*)\]$/m.exec(d);
    assert.ok(entry !== null);
    const main = (JSON.parse(`[${entry[1]}]`) as string[]).find((a) => a.endsWith('.js'));
    assert.equal(main, 'dist/services/process/main.js');
    assert.ok(existsSync(new URL(main, ROOT)), 'the entry point is what the build makes');
    // Every source folder the build compiles is copied into the build stage.
    for (const dir of ['src', 'api', 'services', 'sdk', 'scripts']) assert.match(d, new RegExp(`^COPY ${dir} \\./${dir}$`, 'm'));
    const env = Object.fromEntries([...d.matchAll(/^\s+(AMBIT_[A-Z_]+)=(\S+)/gm)].map((m) => [m[1], m[2]]));
    accepted('Dockerfile ENV', { ...env, AMBIT_TOKEN_SECRET: SECRET });
  });

  it('the compose file: Redis without eviction, matchers and gateways whose environments the server accepts', () => {
    const services = compose();
    assert.deepEqual(services.redis.command?.slice(-2), ['--maxmemory-policy', 'noeviction']);
    const cmd = services.redis.command ?? [];
    assert.equal(cmd[cmd.indexOf('--stream-node-max-bytes') + 1], '512', 'small stream nodes (docs/service.md, Sizing Redis)');
    const roles: string[] = [];
    for (const [name, s] of Object.entries(services)) {
      if (name === 'redis') continue;
      const c = accepted(`compose ${name}`, filled(s.environment ?? {}, { AMBIT_TOKEN_SECRET: SECRET }));
      roles.push(c.role);
      assert.equal(c.redisUrl, 'redis://redis:6379');
      for (const p of s.ports ?? []) assert.match(p, /:(50051|9464)$/, `compose ${name}: publishes a port the server listens on`);
    }
    assert.deepEqual(roles.sort(), ['gateway', 'gateway', 'matcher', 'matcher'], 'a standby for the matcher, two gateways');
    snapshotVolumes(services);
  });

  it('the cluster compose file: six Redis nodes joined as three masters with replicas, two matcher partitions with a standby each, two gateways', () => {
    const services = compose('deploy/compose-cluster.yaml');
    const nodes = Object.keys(services).filter((n) => /^redis-\d+$/.test(n));
    assert.equal(nodes.length, 6);
    for (const n of nodes) {
      const cmd = services[n].command ?? [];
      assert.equal(cmd[cmd.indexOf('--cluster-enabled') + 1], 'yes', `${n} runs in cluster mode`);
      assert.deepEqual(cmd.slice(-2), ['--maxmemory-policy', 'noeviction']);
      assert.equal(cmd[cmd.indexOf('--stream-node-max-bytes') + 1], '512', `${n}: small stream nodes`);
    }
    const init = (services['redis-init'].command ?? []).join(' ');
    for (const n of nodes) assert.ok(init.includes(`${n}:6379`), `redis-init joins ${n}`);
    assert.match(init, /--cluster-replicas 1/);
    const byPartition = new Map<number, number>();
    const roles: string[] = [];
    for (const [name, s] of ambitServices(services)) {
      const c = accepted(`compose-cluster ${name}`, filled(s.environment ?? {}, { AMBIT_TOKEN_SECRET: SECRET }));
      roles.push(c.role);
      assert.equal(c.redisCluster, true);
      assert.equal(c.matcherPartitions, 2);
      // Every seed is a node of the file.
      for (const seed of c.redisUrl!.replace('redis://', '').split(',')) assert.ok(nodes.includes(seed.split(':')[0]), `${name}: seed ${seed}`);
      if (c.role === 'matcher') {
        assert.notEqual(c.matcherPartition, null, `${name} serves one partition`);
        byPartition.set(c.matcherPartition!, (byPartition.get(c.matcherPartition!) ?? 0) + 1);
      }
    }
    assert.deepEqual(roles.sort(), ['gateway', 'gateway', 'matcher', 'matcher', 'matcher', 'matcher']);
    assert.deepEqual([...byPartition].sort(), [[0, 2], [1, 2]], 'a leader and a standby for each partition');
    snapshotVolumes(services);
  });

  const manifests: [string, string[]][] = [
    ['deploy/k8s/ambit.yaml', ['Deployment/ambit-gateway', 'StatefulSet/ambit-matcher']],
    ['deploy/k8s/ambit-cluster.yaml', ['Deployment/ambit-gateway', 'StatefulSet/ambit-matcher-p0', 'StatefulSet/ambit-matcher-p1']],
  ];
  for (const [file, expected] of manifests) it(`the Kubernetes manifests of ${file}: every container environment is accepted, probes and services name real ports`, () => {
    const docs = parseAllDocuments(read(file)).map((d) => d.toJS() as Record<string, any>);
    const byKind = (kind: string) => docs.filter((d) => d.kind === kind);
    const config = byKind('ConfigMap')[0].data as Env;
    const workloads = [...byKind('StatefulSet'), ...byKind('Deployment')];
    assert.deepEqual(workloads.map((w) => `${w.kind}/${w.metadata.name}`).sort(), expected);
    const partitions = new Set<number>();
    for (const w of workloads) {
      const pod = w.spec.template.spec;
      assert.equal(pod.securityContext.runAsNonRoot, true);
      assert.ok(pod.terminationGracePeriodSeconds > Number(config.AMBIT_SHUTDOWN_GRACE_S), `${w.metadata.name}: the pod outlives the drain`);
      assert.deepEqual(w.spec.selector.matchLabels, w.spec.template.metadata.labels);
      for (const c of pod.containers) {
        const env: Env = { ...config };
        for (const e of c.env) env[e.name] = e.value ?? SECRET;
        const cfg = accepted(`${w.metadata.name}/${c.name}`, env);
        assert.equal(cfg.role, w.kind === 'StatefulSet' ? 'matcher' : 'gateway');
        const ports = new Map<string, number>(c.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]));
        assert.equal(ports.get('metrics'), cfg.metricsPort);
        if (cfg.role === 'gateway') {
          assert.equal(ports.get('grpc'), cfg.port);
          assert.equal(c.readinessProbe.grpc.port, cfg.port, 'gateway readiness is its gRPC health');
        }
        assert.equal(cfg.matcherPartitions, Number(config.AMBIT_MATCHER_PARTITIONS ?? '1'), `${w.metadata.name}: every process of a deployment has the same partition count`);
        if (cfg.role === 'matcher') {
          // One StatefulSet per partition (or one serving all), each with a standby on another node.
          assert.ok(w.spec.replicas >= 2, `${w.metadata.name}: a standby matcher`);
          const apart = pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0];
          assert.deepEqual(apart.labelSelector.matchLabels, w.spec.template.metadata.labels, `${w.metadata.name}: its pods on different nodes`);
          const headless = byKind('Service').find((x) => x.metadata.name === w.spec.serviceName);
          assert.ok(headless !== undefined && headless.spec.clusterIP === 'None', `${w.metadata.name}: serviceName names a headless Service`);
          assert.deepEqual(headless.spec.selector, w.spec.template.metadata.labels, `${w.metadata.name}: its Service selects its pods`);
          for (let k = 0; k < cfg.matcherPartitions; k++) if (cfg.matcherPartition === null || cfg.matcherPartition === k) partitions.add(k);
          // The snapshot directory is a volume of the pod's own, and liveness waits for the engine's build.
          const mount = (c.volumeMounts ?? []).find((m: { mountPath: string }) => m.mountPath === cfg.snapshotDir);
          assert.ok(mount !== undefined, `${w.metadata.name}: AMBIT_SNAPSHOT_DIR is a mounted volume`);
          assert.ok((w.spec.volumeClaimTemplates ?? []).some((t: { metadata: { name: string } }) => t.metadata.name === mount.name), `${w.metadata.name}: the snapshot volume is claimed per pod`);
          assert.equal(pod.securityContext.fsGroup, 1000, 'the snapshot volume is writable by the image user');
          assert.ok(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold >= 300, `${w.metadata.name}: a start may take minutes`);
        }
        // Liveness and start on /healthz (the process answers); readiness on /readyz or the gRPC
        // health service, which follow Redis, the matchers and the engine.
        for (const [probe, path] of [[c.livenessProbe, '/healthz'], [c.readinessProbe, '/readyz'], ...(c.startupProbe === undefined ? [] : [[c.startupProbe, '/healthz']])]) {
          if (probe.httpGet !== undefined) {
            assert.equal(probe.httpGet.path, path);
            assert.ok(ports.has(probe.httpGet.port));
          } else assert.ok(probe === c.readinessProbe && probe.grpc !== undefined, 'a probe is an HTTP GET, or readiness by gRPC health');
        }
      }
      const pdb = byKind('PodDisruptionBudget').find((p) => JSON.stringify(p.spec.selector.matchLabels) === JSON.stringify(w.spec.selector.matchLabels));
      assert.ok(pdb !== undefined, `${w.metadata.name} has a disruption budget`);
      const svc = byKind('Service').find((s) => JSON.stringify(s.spec.selector) === JSON.stringify(w.spec.selector.matchLabels));
      assert.ok(svc !== undefined, `${w.metadata.name} has a service`);
      const named = new Set(pod.containers.flatMap((c: { ports: { name: string }[] }) => c.ports.map((p) => p.name)));
      for (const p of svc.spec.ports) assert.ok(named.has(p.targetPort), `${svc.metadata.name}: port ${p.name} targets a container port`);
    }
    assert.equal(partitions.size, Number(config.AMBIT_MATCHER_PARTITIONS ?? '1'), 'every matcher partition has its matchers');
  });
});

/** Every matcher keeps its snapshot on a volume of its own. */
function snapshotVolumes(services: Record<string, ComposeService>): void {
  const volumes: string[] = [];
  for (const [name, s] of ambitServices(services)) {
    const env = s.environment ?? {};
    if (env.AMBIT_ROLE !== 'matcher') continue;
    const dir = env.AMBIT_SNAPSHOT_DIR;
    assert.ok(dir !== undefined, `${name}: a matcher keeps a snapshot`);
    const v = (s.volumes ?? []).find((x) => x.endsWith(`:${dir}`));
    assert.ok(v !== undefined, `${name}: its snapshot directory is a volume`);
    volumes.push(v.split(':')[0]);
  }
  assert.equal(new Set(volumes).size, volumes.length, 'no two matchers share a snapshot volume');
}

/** Starts the Ambit services of a compose file as real processes against `redisUrl` (free ports, the CPU engine). */
async function startTopology(file: string, redisUrl: string, procs: AmbitProcess[], byName: Map<string, AmbitProcess>, envs = new Map<string, Env>()): Promise<void> {
  for (const [name, s] of ambitServices(compose(file))) {
    // As compose runs it, but on this machine: the test's Redis, free ports, the CPU engine, and a
    // directory of its own where compose mounts a volume of its own.
    const env: Env = { ...filled(s.environment ?? {}, { AMBIT_TOKEN_SECRET: SECRET }), REDIS_URL: redisUrl, AMBIT_PORT: '0', AMBIT_METRICS_PORT: '0', AMBIT_ENGINE: 'fast' };
    if (env.AMBIT_SNAPSHOT_DIR !== undefined) {
      const volume = (s.volumes ?? []).find((v) => v.endsWith(`:${env.AMBIT_SNAPSHOT_DIR}`));
      assert.ok(volume !== undefined, `${name}: AMBIT_SNAPSHOT_DIR is a volume`);
      env.AMBIT_SNAPSHOT_DIR = join(scratch(), volume.split(':')[0]);
    }
    const p = await startAmbit(env, [], 30_000);
    procs.push(p);
    byName.set(name, p);
    envs.set(name, env);
  }
}

const leads = (l: Record<string, unknown>) => typeof l.msg === 'string' && l.msg.includes('leading (lease epoch');

/** A device on gateway-1 subscribes; an event published on gateway-2 reaches it. */
async function endToEnd(byName: Map<string, AmbitProcess>, device: string, eventId: string): Promise<void> {
  const authority = new TokenAuthority(SECRET);
  const g1 = new Clients(`127.0.0.1:${byName.get('gateway-1')!.port}`, grpc.credentials.createInsecure());
  const g2 = new Clients(`127.0.0.1:${byName.get('gateway-2')!.port}`, grpc.credentials.createInsecure());
  try {
    const dev = await DeviceStream.open(g1, authority.issue({ subject: device, scopes: [SCOPES.device] }));
    dev.stream.move(45.4642, 9.19);
    const num = (v: number) => ({ kind: { case: 'number', value: v } });
    const str = (v: string) => ({ kind: { case: 'text', value: v } });
    // Each call's event is for its own device only (the devices of earlier calls keep their subscriptions).
    assert.equal((await dev.stream.subscribe({ id: 's', filters: [{ constraints: [{ name: 'sev', op: Op.GE, value: num(1) }, { name: 'for', op: Op.EQ, value: str(device) }], area: { radiusM: 1000 } }] })).code, 0);
    await dev.stream.sync();
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${authority.issue({ subject: 'pkg-pub', scopes: [SCOPES.publish] })}`);
    const r = await unary<{ reached: bigint }>(g2.publisher, 'publish', { event: { id: eventId, position: { lat: 45.4642, lon: 9.19 }, attributes: { sev: num(2), for: str(device) } } }, md);
    assert.equal(r.reached, 1n);
    const [n] = await dev.stream.notifications(1, 10_000);
    assert.equal(n.event?.id, eventId);
    dev.stream.cancel();
  } finally {
    g1.close();
    g2.close();
  }
}

describe('packaging: the compose topology as real processes', { skip: redisServerMissing() ?? false, timeout: 120_000 }, () => {
  let redis: RedisServer;
  const procs: AmbitProcess[] = [];
  const byName = new Map<string, AmbitProcess>();

  const envs = new Map<string, Env>();

  before(async () => {
    redis = await startRedisServer();
    await startTopology('deploy/compose.yaml', redis.url, procs, byName, envs);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => null)));
    await redis?.stop();
  });

  it('one matcher leads, the other stands by; a device on one gateway gets an event published on the other', async () => {
    const matchers = [...byName].filter(([n]) => n.startsWith('matcher')).map(([, p]) => p);
    assert.equal(matchers.length, 2);
    await Promise.race(matchers.map((m) => m.waitForLog(leads, 15_000)));
    assert.equal(matchers.filter((m) => m.logs.some(leads)).length, 1, 'exactly one leads');
    await endToEnd(byName, 'pkg-dev', 'pkg-1');
  });

  it('a matcher stopped with SIGTERM writes its snapshot; started again on its volume, it loads it', async () => {
    const written = (l: Record<string, unknown>) => typeof l.msg === 'string' && l.msg.includes('snapshot written to');
    const loaded = (l: Record<string, unknown>) => typeof l.msg === 'string' && /loaded \d+ subscriptions and \d+ positions from/.test(l.msg);
    const before = byName.get('matcher-b')!;
    assert.equal(await before.stop(), 0);
    assert.ok(before.logs.some(written), 'the snapshot was written at the stop');
    const again = await startAmbit(envs.get('matcher-b')!, [], 30_000);
    procs.push(again);
    byName.set('matcher-b', again);
    const line = await again.waitForLog(loaded, 15_000);
    assert.match(String(line.msg), /loaded [1-9]\d* subscriptions/, 'what the devices subscribed');
  });
});

describe('packaging: the cluster compose topology as real processes', { skip: redisClusterMissing() ?? false, timeout: 120_000 }, () => {
  let cluster: RedisClusterHandle;
  const procs: AmbitProcess[] = [];
  const byName = new Map<string, AmbitProcess>();

  before(async () => {
    cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
    await startTopology('deploy/compose-cluster.yaml', `redis://${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`, procs, byName);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => null)));
    await cluster?.stop();
  });

  it('one matcher leads each partition, the other stands by; a device on one gateway gets an event published on the other', async () => {
    for (const k of [0, 1]) {
      const matchers = [...byName].filter(([n]) => n.startsWith(`matcher-p${k}-`)).map(([, p]) => p);
      assert.equal(matchers.length, 2);
      await Promise.race(matchers.map((m) => m.waitForLog(leads, 15_000)));
      assert.equal(matchers.filter((m) => m.logs.some(leads)).length, 1, `exactly one leads partition ${k}`);
    }
    // Devices of both partitions.
    await endToEnd(byName, 'pkg-dev-a', 'pkg-a');
    await endToEnd(byName, 'pkg-dev-b', 'pkg-b');
    await endToEnd(byName, 'pkg-dev-c', 'pkg-c');
  });
});
