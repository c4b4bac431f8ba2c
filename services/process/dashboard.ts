/**
 * The ops dashboard on the ops port (`/dashboard`): a page (services/ops-ui/) and its data, one
 * sample a second pushed over server-sent events (`/dashboard/api/live`, the last 5 minutes first)
 * or read once (`/dashboard/api/snapshot`). Every data request needs a token with the `ops` scope
 * in its Authorization header; the page asks for one and keeps it in the tab's session storage.
 *
 * A sample: this process (role, uptime, memory, readiness and its checks), the deployment as its
 * hub sees it (engine and path, subscriptions, filters, devices, events, notifications and
 * location updates per second, dropped notifications, matchers and shards in Redis mode), and
 * what this process serves (connected device streams, send queue, streams held back, rejected
 * requests, publish → stored latency quantiles over the last second).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type client from 'prom-client';
import type { Counters } from '../edge/counters.js';
import { AuthError, type TokenAuthority, bearer, requireScope, SCOPES } from '../edge/auth.js';
import type { HubStats, ShardStatus } from '../hub/port.js';
import type { DensityMap } from '../edge/density.js';
import type { Readiness, ReadinessReport } from './readiness.js';

const UI = new URL('../ops-ui/', import.meta.url);
const vendor = (module: string) => () => createRequire(import.meta.url).resolve(module);
const own = (name: string) => () => new URL(name, UI);

interface StaticFile {
  from: () => string | URL;
  type: string;
  cache: string;
}

/** The page's files: its own (no-cache: they change with a build) and uPlot's (cached an hour). */
const FILES = new Map<string, StaticFile>(Object.entries({
  '/dashboard': { from: own('index.html'), type: 'text/html; charset=utf-8', cache: 'no-cache' },
  '/dashboard/': { from: own('index.html'), type: 'text/html; charset=utf-8', cache: 'no-cache' },
  '/dashboard/dashboard.mjs': { from: own('dashboard.mjs'), type: 'text/javascript; charset=utf-8', cache: 'no-cache' },
  '/dashboard/dashboard.css': { from: own('dashboard.css'), type: 'text/css; charset=utf-8', cache: 'no-cache' },
  '/dashboard/uplot.js': { from: vendor('uplot/dist/uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8', cache: 'max-age=3600' },
  '/dashboard/uplot.css': { from: vendor('uplot/dist/uPlot.min.css'), type: 'text/css; charset=utf-8', cache: 'max-age=3600' },
}));
const HISTORY = 300;
/** Bytes queued to a viewer beyond which it is let go. */
const MAX_BUFFERED = 4 << 20;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)))]).finally(() => clearTimeout(timer));
}

export interface DashboardSource {
  role: string;
  counters: Counters;
  publishSeconds: client.Histogram;
  stats: (() => Promise<HubStats>) | null;
  readiness: Readiness | null;
  /** The map of this process's gateway (null without one). */
  density: () => DensityMap | null;
  /** Redis mode: each matcher partition or shard (null, or an empty list: none). */
  shards?: (() => Promise<ShardStatus[]>) | null;
}

export interface Sample {
  at: number;
  role: string;
  pid: number;
  uptimeS: number;
  ready: ReadinessReport | null;
  mode: string;
  engine: string;
  engineDetail: string;
  enginePath: string;
  totals: { eventsPublished: number; notifications: number; locationUpdates: number; dropped: number; rejected: number };
  rates: { events: number; notifications: number; locations: number; rejected: number };
  latencyMs: { p50: number | null; p90: number | null; p99: number | null; publishes: number };
  gauges: { connectedDevices: number; sendQueue: number; streamsHeldBack: number; subscriptions: number; filters: number; devices: number };
  memory: { rss: number; heapUsed: number; engine: number; gpu: number };
  matchers: { alive: boolean | null; leading: number | null; epoch: number | null };
  shards: { geo: number; wide: number; alive: number; mapVersion: number; moving: boolean } | null;
  /** Each matcher partition or shard of a Redis deployment (null: none). */
  shardTable: ShardStatus[] | null;
  /**
   * The GPU engine's paths (totals since start; null for a CPU engine): events matched on the GPU
   * and on the CPU, those that fell back to the CPU after a GPU failure or overflowed the GPU's
   * result buffer, device losses, GPU errors and rebuilds, and why it runs on the CPU now.
   */
  gpu: { gpuEvents: number; cpuEvents: number; fallbackEvents: number; overflowEvents: number; deviceLosses: number; errors: number; rebuilds: number; cpuReason: string } | null;
  /** Devices connected here and events accepted here lately, binned (refreshed every 5 s); null without a gateway. */
  map: DensityMap | null;
}

type Buckets = { le: number; count: number }[];

export class Dashboard {
  private readonly clients = new Set<ServerResponse>();
  private readonly history: Sample[] = [];
  private timer: NodeJS.Timeout | null = null;
  private prev: { at: number; totals: Sample['totals']; buckets: Buckets } | null = null;
  private readonly startedAt = Date.now();
  private readonly files = new Map<string, Buffer>();
  private map: { at: number; map: DensityMap | null } | null = null;
  private mapSent: { at: number; map: DensityMap | null } | null = null;
  private ticking = false;

  constructor(
    private readonly src: DashboardSource,
    /** The tokens' authority; null: no token secret here, the data is not served. */
    private readonly authority: () => TokenAuthority | null,
    private readonly intervalMs = 1000,
  ) {}

  /** Serves a dashboard route; false when the URL is not one. */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    const path = (req.url ?? '').split('?')[0];
    const file = FILES.get(path);
    if (file !== undefined) return this.file(res, path, file);
    if (path === '/dashboard/api/snapshot' || path === '/dashboard/api/live') {
      const expiresAt = this.authorized(req, res);
      if (expiresAt === null) return true;
      if (path === '/dashboard/api/snapshot') {
        // A look now: the live stream's window is not moved by it.
        this.sample(false).then(
          (s) => json(res, 200, s),
          (err: unknown) => json(res, 500, { error: err instanceof Error ? err.message : String(err) }),
        );
      } else this.live(res, expiresAt);
      return true;
    }
    return false;
  }

  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    for (const c of this.clients) c.end();
    this.clients.clear();
  }

  /** The token's expiry (unix s) when it has the ops scope; null (answered) otherwise. */
  private authorized(req: IncomingMessage, res: ServerResponse): number | null {
    const authority = this.authority();
    if (authority === null) {
      json(res, 403, { error: 'this process has no token secret (AMBIT_TOKEN_SECRET): its dashboard data is not served' });
      return null;
    }
    try {
      const p = authority.verify(bearer(req.headers.authorization));
      requireScope(p, SCOPES.ops);
      // The dashboard shows the whole deployment: its own operators only, not a tenant's.
      if (p.tenant !== undefined && p.tenant !== '') throw new AuthError('PERMISSION_DENIED', "the dashboard is for the deployment's operators, not a tenant's");
      return p.expiresAt;
    } catch (err) {
      const code = err instanceof AuthError && err.code === 'PERMISSION_DENIED' ? 403 : err instanceof AuthError && err.code === 'UNAVAILABLE' ? 503 : 401;
      json(res, code, { error: err instanceof Error ? err.message : String(err) });
      return null;
    }
  }

  private live(res: ServerResponse, expiresAt: number): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    // The history without its maps, but for the newest one.
    const last = this.history.length - 1;
    res.write(`event: history\ndata: ${JSON.stringify(this.history.map((h, i) => (i === last ? { ...h, map: this.map?.map ?? null } : h)))}\n\n`);
    this.clients.add(res);
    // The stream lasts no longer than the token that opened it (the page asks for a new one).
    const expiry = setTimeout(() => res.end(), Math.max(0, Math.min(expiresAt * 1000 - Date.now(), 2 ** 31 - 1)));
    expiry.unref();
    res.on('close', () => {
      clearTimeout(expiry);
      this.clients.delete(res);
      if (this.clients.size === 0 && this.timer !== null) {
        clearInterval(this.timer);
        this.timer = null;
        // The next viewer's first rates start afresh, not from this one's last sample.
        this.prev = null;
      }
    });
    if (this.timer === null) {
      this.timer = setInterval(() => void this.tick(), this.intervalMs);
      this.timer.unref();
      void this.tick();
    }
  }

  private async tick(): Promise<void> {
    if (this.ticking) return; // the one before still waits for the hub
    this.ticking = true;
    let s: Sample;
    try {
      s = await this.sample(true);
    } catch {
      return;
    } finally {
      this.ticking = false;
    }
    this.history.push({ ...s, map: null });
    if (this.history.length > HISTORY) this.history.shift();
    // The map goes out when it was refreshed (every 5 s); the page keeps the last one.
    const frame = `data: ${JSON.stringify(this.mapSent === this.map ? { ...s, map: null } : s)}\n\n`;
    this.mapSent = this.map;
    for (const c of this.clients) {
      // A viewer that does not read is let go rather than buffered without end.
      if (c.writableLength > MAX_BUFFERED) c.destroy();
      else c.write(frame);
    }
  }

  /**
   * A sample now; rates and latency are over the time since the sample before, which `advance`
   * moves here (the live stream's ticks; a snapshot looks without moving it).
   */
  async sample(advance = true): Promise<Sample> {
    const src = this.src;
    const c = src.counters;
    const [stats, ready, hist, shardTable] = await Promise.all([
      src.stats === null ? null : withTimeout(src.stats(), 2000).catch(() => null),
      src.readiness === null ? null : src.readiness.report(),
      src.publishSeconds.get(),
      src.shards === undefined || src.shards === null ? null : withTimeout(src.shards(), 2000).catch(() => null),
    ]);
    const at = Date.now();
    const prev = this.prev;
    // The deployment's figures come from the hub; this process's own counters only without one.
    // A failed read keeps the last figures (no rate) rather than switching source.
    const fromHub = src.stats !== null;
    const totals =
      fromHub && stats === null && prev !== null
        ? { ...prev.totals, rejected: c.rejectedRequests }
        : {
            eventsPublished: fromHub ? (stats?.eventsPublished ?? 0) : c.eventsPublished,
            notifications: fromHub ? (stats?.notifications ?? 0) : c.notificationsSent,
            locationUpdates: fromHub ? (stats?.locationUpdates ?? 0) : c.locationUpdatesStream + c.locationUpdatesUnary,
            dropped: stats?.notificationsDropped ?? 0,
            rejected: c.rejectedRequests,
          };
    const buckets: Buckets = hist.values.filter((v) => v.metricName?.endsWith('_bucket')).map((v) => ({ le: v.labels.le === '+Inf' ? Infinity : Number(v.labels.le), count: v.value })).sort((a, b) => a.le - b.le);
    if (advance) this.prev = { at, totals, buckets };
    const dt = prev === null ? 0 : (at - prev.at) / 1000;
    const rate = (k: keyof Sample['totals']) => (prev === null || dt <= 0 ? 0 : Math.max(0, (totals[k] - prev.totals[k]) / dt));
    const window = buckets.map((b, i) => ({ le: b.le, count: b.count - (prev?.buckets[i]?.count ?? 0) }));
    const x = stats?.extra ?? {};
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
    const mem = process.memoryUsage();
    if (this.map === null || at - this.map.at >= 5000) this.map = { at, map: src.density() };
    return {
      at,
      role: src.role,
      pid: process.pid,
      uptimeS: Math.round((at - this.startedAt) / 1000),
      ready,
      mode: stats?.mode ?? '',
      engine: stats?.engine ?? '',
      engineDetail: stats?.engineDetail ?? 'no figures from the hub',
      enginePath: typeof x.path === 'string' ? x.path : '',
      totals,
      rates: { events: rate('eventsPublished'), notifications: rate('notifications'), locations: rate('locationUpdates'), rejected: rate('rejected') },
      latencyMs: { p50: quantileMs(window, 0.5), p90: quantileMs(window, 0.9), p99: quantileMs(window, 0.99), publishes: window.length === 0 ? 0 : window[window.length - 1].count },
      gauges: { connectedDevices: c.connectedDevices, sendQueue: c.sendQueue, streamsHeldBack: c.streamsHeldBack, subscriptions: stats?.subscriptions ?? 0, filters: stats?.filters ?? 0, devices: stats?.devices ?? 0 },
      memory: { rss: mem.rss, heapUsed: mem.heapUsed, engine: stats?.engineMemoryBytes ?? 0, gpu: num(x.gpuBytes) ?? 0 },
      matchers: { alive: typeof x.matcherAlive === 'boolean' ? x.matcherAlive : null, leading: x.matcherLeader === true ? 1 : x.matcherLeader === false ? 0 : num(x.matcherLeader), epoch: num(x.matcherEpoch) },
      map: this.map.map,
      shardTable: shardTable === null || shardTable.length === 0 ? null : shardTable,
      gpu:
        typeof x.gpuEvents === 'number'
          ? {
              gpuEvents: x.gpuEvents,
              cpuEvents: num(x.cpuEvents) ?? 0,
              fallbackEvents: num(x.fallbackEvents) ?? 0,
              overflowEvents: num(x.overflowEvents) ?? 0,
              deviceLosses: num(x.deviceLosses) ?? 0,
              errors: num(x.gpuErrors) ?? 0,
              rebuilds: num(x.rebuilds) ?? 0,
              cpuReason: typeof x.cpuReason === 'string' ? x.cpuReason : '',
            }
          : null,
      shards: typeof x.geoShards === 'number' ? { geo: x.geoShards, wide: num(x.wideShards) ?? 0, alive: num(x.shardsAlive) ?? 0, mapVersion: num(x.shardMapVersion) ?? 0, moving: x.shardMapMoving === true } : null,
    };
  }

  /** A file of the page, read once. */
  private file(res: ServerResponse, path: string, f: StaticFile): boolean {
    let body = this.files.get(path);
    if (body === undefined) {
      body = readFileSync(f.from());
      this.files.set(path, body);
    }
    res.writeHead(200, { 'content-type': f.type, 'cache-control': f.cache, 'x-content-type-options': 'nosniff' });
    res.end(body);
    return true;
  }
}

/** A quantile (ms) of the publishes counted in cumulative buckets, interpolated within its bucket; null when none. */
export function quantileMs(buckets: Buckets, q: number): number | null {
  if (buckets.length === 0) return null;
  const total = buckets[buckets.length - 1].count;
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const b of buckets) {
    if (b.count >= rank) {
      if (!Number.isFinite(b.le)) return lower * 1000;
      const inBucket = b.count - below;
      const f = inBucket <= 0 ? 1 : (rank - below) / inBucket;
      return (lower + (b.le - lower) * f) * 1000;
    }
    lower = b.le;
    below = b.count;
  }
  return lower * 1000;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(`${JSON.stringify(body)}\n`);
}
