/**
 * Prometheus metrics of one process, on their own registry (tests run several servers in one
 * process). Hot paths bump plain numbers; the registry reads them at scrape time through
 * `collect`, so a location update costs an increment, not a prom-client call.
 */
import { type IncomingMessage, type ServerResponse, createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import client from 'prom-client';
import { Counters, type EdgeMetrics } from '../edge/counters.js';
import type { Readiness } from './readiness.js';
import type { Hub, HubStats } from '../hub/port.js';

export class Metrics implements EdgeMetrics {
  readonly registry = new client.Registry();
  readonly counters = new Counters();
  readonly publishSeconds: client.Histogram;
  private hubStats: HubStats | null = null;
  private readonly readyGauge: client.Gauge;
  private http: Server | null = null;
  private refresh: () => Promise<void> = async () => {};

  /**
   * `hub`: whatever reports the engine figures (a Hub, or the matcher in a matcher-only process).
   * `matcher`: the Redis matcher of a process that also runs a gateway (role all): its lease
   * figures (ambit_matcher_leader, ambit_matcher_epoch) come from it.
   */
  constructor(
    private readonly hub: Pick<Hub, 'stats'> | null,
    role: string,
    matcher: Pick<Hub, 'stats'> | null = null,
  ) {
    const r = this.registry;
    r.setDefaultLabels({ role });
    this.readyGauge = new client.Gauge({ name: 'ambit_ready', help: 'Whether the process is ready (what /readyz answers: 1 for 200, 0 for 503)', registers: [r] });
    this.readyGauge.set(1);
    client.collectDefaultMetrics({ register: r, prefix: 'ambit_' }); // ambit_process_*, ambit_nodejs_*
    const c = this.counters;
    const counter = (name: string, help: string, read: () => number) => {
      let last = 0;
      return new client.Counter({
        name,
        help,
        registers: [r],
        collect() {
          const v = read();
          if (v > last) this.inc(v - last);
          last = v;
        },
      });
    };
    // One metric with a path label needs both series in one collect.
    let lastStream = 0;
    let lastUnary = 0;
    new client.Counter({
      name: 'ambit_location_updates_total',
      help: 'Location updates accepted, by path (device stream or the unary/batch endpoint)',
      labelNames: ['path'],
      registers: [r],
      collect() {
        this.inc({ path: 'stream' }, c.locationUpdatesStream - lastStream);
        this.inc({ path: 'endpoint' }, c.locationUpdatesUnary - lastUnary);
        lastStream = c.locationUpdatesStream;
        lastUnary = c.locationUpdatesUnary;
      },
    });
    counter('ambit_events_published_total', 'Events accepted from publishers on this process', () => c.eventsPublished);
    counter('ambit_matches_total', 'Subscriptions reached by published events', () => c.subscriptionsReached);
    counter('ambit_notifications_sent_total', 'Notifications written to device streams', () => c.notificationsSent);
    counter('ambit_requests_rejected_total', 'Requests answered with a client error', () => c.rejectedRequests);
    // Per tenant (tenants on): what each did through this process, by label.
    const perTenant = (name: string, help: string, key: 'eventsPublished' | 'notificationsSent' | 'locationUpdates') => {
      const last = new Map<string, number>();
      new client.Counter({
        name,
        help,
        labelNames: ['tenant'],
        registers: [r],
        collect() {
          for (const [tenant, counts] of c.tenants?.byTenant ?? []) {
            const v = counts[key];
            const was = last.get(tenant) ?? 0;
            if (v > was) this.inc({ tenant }, v - was);
            last.set(tenant, v);
          }
        },
      });
    };
    perTenant('ambit_tenant_events_published_total', 'Tenants: events accepted from each tenant\'s publishers on this process (tenant "" the default one)', 'eventsPublished');
    perTenant('ambit_tenant_notifications_sent_total', 'Tenants: notifications written to each tenant\'s device streams on this process', 'notificationsSent');
    perTenant('ambit_tenant_location_updates_total', 'Tenants: location updates of each tenant\'s devices on this process', 'locationUpdates');
    const lastLimited = { locations: 0, subscriptionChanges: 0, events: 0 };
    new client.Counter({
      name: 'ambit_rate_limited_total',
      help: 'Requests refused by a rate limit (RESOURCE_EXHAUSTED), by limit: a device\'s locations or subscription changes, a publisher\'s events',
      labelNames: ['limit'],
      registers: [r],
      collect() {
        for (const k of ['locations', 'subscriptionChanges', 'events'] as const) {
          this.inc({ limit: k === 'subscriptionChanges' ? 'subscription_changes' : k }, c.rateLimited[k] - lastLimited[k]);
          lastLimited[k] = c.rateLimited[k];
        }
      },
    });
    // Sharded by space: time the shards' leaders spent waiting to take devices over from shards
    // that had not stored their offsets past the hand-over (a shard without a leader stalls them).
    counter('ambit_handover_wait_seconds_total', 'Sharded by space: seconds shard leaders waited for the shards devices left to store past the hand-over', () => {
      const ms = this.hubStats?.extra.handOverWaitMs;
      return typeof ms === 'number' && Number.isFinite(ms) ? ms / 1000 : 0;
    });
    // Counted by the hub (in Redis mode, the deployment's totals: every gateway reports the same
    // figure, so aggregate with max, not sum).
    const hubCount = (key: string) => () => {
      const v = this.hubStats?.extra[key];
      return typeof v === 'number' && Number.isFinite(v) ? v : 0;
    };
    // The GPU engine's batching (0 with a CPU engine): events per batch is batches over events.
    counter('ambit_gpu_batches_total', 'GPU engine: batches of events matched on the GPU', hubCount('batches'));
    counter('ambit_gpu_events_total', 'GPU engine: events the GPU answered', hubCount('gpuEvents'));
    counter('ambit_gpu_cpu_events_total', "GPU engine: events its CPU side answered (lone events it chose to, overflow, below the crossover)", hubCount('cpuEvents'));
    // Per batch, over batches: the host's work before the submit, the wait for the GPU, the reading of the results.
    const hubMs = (key: string) => () => hubCount(key)() / 1000;
    counter('ambit_gpu_batch_submit_seconds_total', 'GPU engine: host time encoding and submitting batches', hubMs('batchSubmitMs'));
    counter('ambit_gpu_batch_wait_seconds_total', 'GPU engine: time from a batch\'s submit to its results being readable', hubMs('batchWaitMs'));
    counter('ambit_gpu_batch_read_seconds_total', 'GPU engine: host time reading batches\' results', hubMs('batchReadMs'));
    counter('ambit_handovers_forced_total', 'Sharded by space: hand-overs a shard leader applied after AMBIT_HANDOVER_WAIT_S without the shard the device left storing past it', hubCount('handOversForced'));
    counter('ambit_handovers_refused_total', 'Sharded by space: hand-overs past AMBIT_HANDOVER_WAIT_S that wait on, because a device in them holds the most owed windows of earlier ones', hubCount('handOversRefused'));
    // Device lifecycle.
    counter('ambit_devices_purged_total', 'Devices purged on request (PurgeDevice), by the hub (Redis mode: the deployment)', hubCount('devicesPurged'));
    counter('ambit_devices_expired_total', 'Devices purged because no gateway saw them for AMBIT_DEVICE_EXPIRY_DAYS, by the hub (Redis mode: the deployment)', hubCount('devicesExpired'));
    // Pattern subscriptions (an embedded node of one process; 0 elsewhere).
    counter('ambit_pattern_matches_total', 'Pattern subscriptions: matches delivered', hubCount('patternMatches'));
    counter('ambit_pattern_events_late_total', 'Pattern subscriptions: events that came after a later-timed event was released (never part of a pattern)', hubCount('patternEventsLate'));
    counter('ambit_pattern_events_evicted_total', 'Pattern subscriptions: events dropped by AMBIT_PATTERN_RETAINED_PER_ELEMENT before their windows closed', hubCount('patternEventsEvicted'));
    new client.Gauge({ name: 'ambit_connected_devices', help: 'Open device streams', registers: [r], collect() { this.set(c.connectedDevices); } });
    new client.Gauge({ name: 'ambit_send_queue', help: 'Notifications waiting for device streams to drain', registers: [r], collect() { this.set(c.sendQueue); } });
    new client.Gauge({ name: 'ambit_streams_held_back', help: 'Device streams not read because the client does not read its replies', registers: [r], collect() { this.set(c.streamsHeldBack); } });
    this.publishSeconds = new client.Histogram({
      name: 'ambit_publish_seconds',
      help: 'Publish to notifications stored (match latency as publishers see it)',
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
      registers: [r],
    });
    if (hub !== null) {
      // prom-client collects all metrics concurrently, so the hub's figures are read once per
      // scrape, before the registry (see scrape()).
      const readTime = new client.Gauge({ name: 'ambit_stats_read_seconds', help: 'Time this scrape took to read the engine figures', registers: [r] });
      const leaseSource = role === 'matcher' ? hub : matcher;
      let leaseStats: HubStats | null = null;
      this.refresh = async () => {
        const t0 = performance.now();
        const [s, l] = await Promise.all([hub.stats().catch(() => this.hubStats), leaseSource === null || leaseSource === hub ? null : leaseSource.stats().catch(() => leaseStats)]);
        this.hubStats = s;
        leaseStats = leaseSource === hub ? s : l;
        readTime.set((performance.now() - t0) / 1000);
        if (leaseStats !== null) for (const [g, read] of leaseGauges) g.set(read(leaseStats));
        if (s === null) return;
        for (const [g, read] of gauges) g.set(read(s));
        info.reset();
        info.set({ engine: s.engine, mode: s.mode, path: String(s.extra.path ?? '') }, 1);
      };
      const gauges: [client.Gauge, (s: HubStats) => number][] = [
        [new client.Gauge({ name: 'ambit_subscriptions', help: 'Subscriptions held by the engine', registers: [r] }), (s) => s.subscriptions],
        [new client.Gauge({ name: 'ambit_filters', help: 'Filters held by the engine', registers: [r] }), (s) => s.filters],
        [new client.Gauge({ name: 'ambit_devices', help: 'Devices with a known position', registers: [r] }), (s) => s.devices],
        [new client.Gauge({ name: 'ambit_engine_memory_bytes', help: 'Memory of the engine structures', registers: [r] }), (s) => s.engineMemoryBytes],
        [new client.Gauge({ name: 'ambit_gpu_memory_bytes', help: 'GPU buffer memory of the engine (0 without a GPU)', registers: [r] }), (s) => num(s.extra.gpuBytes)],
        [new client.Gauge({ name: 'ambit_matchers_alive', help: 'Redis mode, gateways: 1 while every matcher partition (or shard) has a live matcher, 0 otherwise (1 where it does not apply)', registers: [r] }), (s) => (s.extra.matcherAlive === false ? 0 : 1)],
        [new client.Gauge({ name: 'ambit_notifications_dropped', help: 'Notifications dropped by retention (oldest first)', registers: [r] }), (s) => s.notificationsDropped],
        [new client.Gauge({ name: 'ambit_location_updates_applied', help: 'Location updates the engine has applied', registers: [r] }), (s) => s.locationUpdates],
        [new client.Gauge({ name: 'ambit_shard_map_version', help: 'Redis mode sharded by space: the shard map version this process places devices by (0: as configured)', registers: [r] }), (s) => num(s.extra.shardMapVersion)],
        [new client.Gauge({ name: 'ambit_pattern_subscriptions', help: 'Pattern subscriptions held', registers: [r] }), (s) => num(s.extra.patternSubscriptions)],
        [new client.Gauge({ name: 'ambit_pattern_events_buffered', help: 'Pattern subscriptions: events waiting for earlier-timed ones (AMBIT_PATTERN_LATENESS_MS)', registers: [r] }), (s) => num(s.extra.patternEventsBuffered)],
        [new client.Gauge({ name: 'ambit_pattern_events_retained', help: 'Pattern subscriptions: events the patterns keep for their windows', registers: [r] }), (s) => num(s.extra.patternEventsRetained)],
        [new client.Gauge({ name: 'ambit_shard_map_moving', help: 'Redis mode sharded by space: 1 while cells move between shards', registers: [r] }), (s) => (s.extra.shardMapMoving === true ? 1 : 0)],
      ];
      const leaseGauges: [client.Gauge, (s: HubStats) => number][] = [];
      if (leaseSource !== null) {
        leaseGauges.push(
          [new client.Gauge({ name: 'ambit_matcher_leader', help: 'Redis mode: 1 while this matcher holds the lease and delivers, 0 while it stands by (a process serving several matcher partitions: how many it leads)', registers: [r] }), (s) => (s.extra.matcherLeader === true ? 1 : num(s.extra.matcherLeader))],
          [new client.Gauge({ name: 'ambit_matcher_epoch', help: 'Redis mode: the lease token this matcher leads (or last led) with', registers: [r] }), (s) => num(s.extra.matcherEpoch)],
          [new client.Gauge({ name: 'ambit_matcher_rebuilds', help: 'Redis mode: times this process rebuilt a matcher from Redis because its command stream was trimmed past what it had read (AMBIT_COMMAND_STREAM_MAXLEN too small for how far it fell behind)', registers: [r] }), (s) => num(s.extra.matcherRebuilds)],
        );
      }
      const info = new client.Gauge({ name: 'ambit_engine_info', help: 'The engine in use (value 1)', labelNames: ['engine', 'mode', 'path'], registers: [r] });
    }
  }

  /** The exposition text, with the hub's figures and readiness read now. */
  async scrape(): Promise<string> {
    await Promise.all([
      this.refresh(),
      this.readiness === null ? null : this.readiness.report().then((rep) => this.readyGauge.set(rep.ready ? 1 : 0), () => this.readyGauge.set(0)),
    ]);
    return this.registry.metrics();
  }

  /** What `/readyz` reports (readiness.ts); without one it answers as `/healthz`. */
  readiness: Readiness | null = null;
  /** More routes on the ops port (the dashboard): true when it answered the request. */
  routes: ((req: IncomingMessage, res: ServerResponse) => boolean) | null = null;

  /** Serves /metrics, /healthz (liveness) and /readyz (readiness) on `port` (0 = any free port); resolves with the port. */
  async listen(host: string, port: number): Promise<number> {
    const http = createServer((req, res) => {
      if (req.url === '/metrics') {
        this.scrape().then(
          (body) => {
            res.writeHead(200, { 'content-type': this.registry.contentType });
            res.end(body);
          },
          (err: unknown) => {
            res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(`metrics: ${err instanceof Error ? err.message : String(err)}\n`);
          },
        );
      } else if (req.url === '/healthz') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('ok\n');
      } else if (req.url === '/readyz' || req.url?.startsWith('/readyz?')) {
        const r = this.readiness;
        if (r === null) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(`${JSON.stringify({ ready: true, draining: false, checks: {} })}\n`);
          return;
        }
        r.report().then(
          (report) => {
            res.writeHead(report.ready ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' });
            res.end(`${JSON.stringify(report)}\n`);
          },
          (err: unknown) => {
            res.writeHead(503, { 'content-type': 'text/plain' });
            res.end(`readiness: ${err instanceof Error ? err.message : String(err)}\n`);
          },
        );
      } else if (this.routes === null || !this.routes(req, res)) {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found: try /metrics, /healthz, /readyz or /dashboard\n');
      }
    });
    this.http = http;
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      // Exclusive: in a node of several gateway processes each one has its own /metrics, not a
      // port the cluster primary shares among them.
      http.listen({ port, host, exclusive: true }, () => resolve());
    });
    return (http.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    const http = this.http;
    this.http = null;
    if (http !== null) await new Promise<void>((resolve) => http.close(() => resolve()));
    this.registry.clear();
  }
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}
