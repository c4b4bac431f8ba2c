/**
 * Redis servers a benchmark starts for itself on this host (one plain redis-server, or a Redis
 * Cluster of N masters without replicas, through the test suite's launchers) and the CPU they
 * use: `INFO cpu` of every node, user + system seconds, so a run can say what Redis cost per
 * notification beside the server's own CPU.
 */
import { Redis } from 'ioredis';
import { startRedisCluster } from '../../test/support/redis-cluster.js';
import { startRedisServer } from '../../test/support/redis-server.js';

export interface BenchRedis {
  /** REDIS_URL for the server: one URL, or the seed nodes of the cluster. */
  url: string;
  cluster: boolean;
  /** Every node's port (the masters of a cluster). */
  ports: number[];
  describe: string;
  stop(): Promise<void>;
}

/** `nodes` = 1: a plain redis-server; >= 3: a Redis Cluster of that many masters. */
export async function startBenchRedis(nodes: number): Promise<BenchRedis> {
  if (nodes === 1) {
    const r = await startRedisServer();
    return { url: r.url, cluster: false, ports: [r.port], describe: 'one redis-server on this host', stop: () => r.stop() };
  }
  if (nodes < 3) throw new Error(`bench: a Redis Cluster needs at least 3 masters, got ${nodes}`);
  const c = await startRedisCluster({ masters: nodes, replicasPerMaster: 0 });
  const ports = c.servers.map((s) => s.port);
  return { url: `redis://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, cluster: true, ports, describe: `a Redis Cluster of ${nodes} masters (no replicas) on this host`, stop: () => c.stop() };
}

/** CPU seconds (user + system) the servers on these ports have used, summed; NaN when one cannot be asked. */
export async function redisCpuSeconds(ports: readonly number[], host = '127.0.0.1'): Promise<number> {
  const each = await Promise.all(
    ports.map(async (port) => {
      const r = new Redis({ host, port, lazyConnect: true, protocol: 2, maxRetriesPerRequest: 1, connectTimeout: 2000 });
      try {
        await r.connect();
        const info = await r.info('cpu');
        const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]);
        const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
        return user + sys;
      } catch {
        return NaN;
      } finally {
        r.disconnect();
      }
    }),
  );
  return each.reduce((a, b) => a + b, 0);
}
