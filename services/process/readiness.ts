/**
 * Readiness: whether this process can do its work now, for `/readyz` on the ops port and for the
 * gRPC health service. `/healthz` stays liveness (the process answers at all).
 *
 * - `hub` (a process that serves devices and publishers): the hub answers its stats within the
 *   time limit. Embedded, that is the hub's thread (and its partitions); in Redis mode it needs
 *   Redis.
 * - `matchers` (Redis mode, a process that serves devices and publishers): every matcher
 *   partition (or shard) has a live leader. Reported, not required: while no matcher runs,
 *   publishes are still stored and queued, and devices still connect, move and read their
 *   backlog; a gateway that turned unready with it would only turn those away. The gRPC health
 *   of the Publisher service follows it (NOT_SERVING while events would only queue).
 * - `matcher` (a process that runs matcher partitions): each partition's connections to Redis are
 *   up and its loop runs (a standby is ready: it tails its stream).
 * - A process that is stopping is not ready (`draining`).
 */
import type { Hub, HubStats } from '../hub/port.js';

export interface CheckResult {
  ok: boolean;
  /** Whether a failure makes the process unready (false: reported only). */
  required: boolean;
  detail: string;
}

export interface ReadinessReport {
  ready: boolean;
  draining: boolean;
  checks: Record<string, CheckResult>;
}

type Probe = () => Promise<Record<string, CheckResult>>;

export class Readiness {
  private draining = false;
  private readonly probes: { names: string[]; run: Probe }[] = [];

  constructor(private readonly timeoutMs = 2000) {}

  /** A process serving devices and publishers: its hub (and, in Redis mode, the matchers behind it). */
  watchHub(hub: Pick<Hub, 'stats'>): this {
    this.probes.push({
      names: ['hub'],
      run: async () => {
        const s = await hub.stats();
        const out: Record<string, CheckResult> = { hub: { ok: true, required: true, detail: `${s.mode}: ${s.engineDetail}` } };
        if (s.mode === 'redis') {
          const alive = s.extra.matcherAlive === true;
          const shards = typeof s.extra.geoShards === 'number' ? `${num(s.extra.shardsAlive)} of ${num(s.extra.geoShards) + num(s.extra.wideShards)} shards have a live matcher` : alive ? 'every matcher partition has a live matcher' : 'a matcher partition has no live matcher';
          out.matchers = { ok: alive, required: false, detail: alive ? shards : `${shards}: publishes are stored and wait for it` };
        }
        return out;
      },
    });
    return this;
  }

  /** A process running matcher partitions (`matchersReady` of `matchersServed` in its stats). */
  watchMatchers(source: { stats(): Promise<HubStats> }): this {
    this.probes.push({
      names: ['matcher'],
      run: async () => {
        const s = await source.stats();
        const served = num(s.extra.matchersServed);
        const ready = num(s.extra.matchersReady);
        const leading = num(s.extra.matcherLeader === true ? 1 : s.extra.matcherLeader);
        return { matcher: { ok: served > 0 && ready === served, required: true, detail: `${ready} of ${served} matcher partitions connected to Redis and running, ${leading} leading` } };
      },
    });
    return this;
  }

  /** From now on the process reports not ready (it is stopping). */
  drain(): void {
    this.draining = true;
  }

  async report(): Promise<ReadinessReport> {
    const checks: Record<string, CheckResult> = {};
    await Promise.all(
      this.probes.map(async (p) => {
        let timer: NodeJS.Timeout | undefined;
        try {
          const got = await Promise.race([
            p.run(),
            new Promise<never>((_, reject) => {
              timer = setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
            }),
          ]);
          Object.assign(checks, got);
        } catch (err) {
          const detail = err instanceof Error ? err.message : String(err);
          for (const name of p.names) checks[name] = { ok: false, required: true, detail };
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    const ready = !this.draining && Object.values(checks).every((c) => c.ok || !c.required);
    return { ready, draining: this.draining, checks };
  }
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}
