/**
 * The gateway side of the Redis deployment: a `Hub` whose state lives in Redis and whose matching
 * happens in a separate matcher process (matcher.ts). Every state change and every publish is one
 * entry of the command stream `{p}in`, so the matcher sees them in one total order; subscription
 * changes are checked and queued by one Lua script, so the stored subscriptions and the stream
 * never disagree. Notifications are read from the device's own stream; a device that does not read
 * leaves its backlog in Redis (trimmed by retention), never in this process.
 *
 * Connections: `cmd` carries this hub's writes in order (location flushes, subscription scripts,
 * publishes), `read` the inbox traffic, `sub` the pub/sub channels (publish replies, doorbells).
 *
 * One file because every call of the Hub contract here shares the three connections, the pending
 * publishes and the doorbell table; what differs when sharded by space lives in redis-geo.ts.
 */
import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import type { Logger } from 'pino';
import { AmbitError, PublishError, show } from '../../src/model/errors.js';
import { DEFAULT_PATTERN_LIMITS, validatePatternSubscription } from '../../src/model/event-patterns.js';
import { type Limits, resolveLimits, validateEvents, validateSubscription } from '../../src/model/limits.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import {
  type CellPlan,
  type Delivery,
  type DeviceInfo,
  type DevicePage,
  type DeviceQuery,
  type DeviceSubscription,
  type DeviceSummary,
  type PurgeResult,
  type Revocation,
  type ShardStatus,
  MAX_REVOCATIONS,
  revocationKey,
  type CellMove,
  type Hub,
  type HubStats,
  type Inbox,
  type LocationWriter,
  type PublishResult,
  compareDeliveryIds,
  parseDeliveryId,
  subscriptionKey,
  DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE,
  ENGINE_SIDE_LIMITS,
} from './port.js';
import { type LocColumns, decodePosition, encodeLocations, encodePositionsHset, splitStoredSubscription } from '../redis/codec.js';
import { type Conn, DEFAULT_REDIS, RawCommand, type RedisSource, closeConnection, connectAll, intOption, openConn, prefixOption, queueCommand } from '../redis/connection.js';
import { DEFAULT_PREFIX, type GeoSpec, type GroupKeys, Keys } from '../redis/keys.js';
import { checkLayout, layoutFor } from '../redis/layout.js';
import { Presence } from '../redis/presence.js';
import { type MatcherStatsRecord, type PublishReply, RecentEvents, locFields, parsePushedNotification, parseReply, parseStoredNotification, pubFields } from '../redis/protocol.js';
import { PURGED_DOORBELL, defineScripts, runScript } from '../redis/scripts.js';
import { missedAfter, resumePoint } from '../matcher/fanout.js';
import { DEFAULT_DEDUPE } from '../matcher/event-ids.js';
import { type InboxHost, RedisInbox } from './redis-inbox.js';
import { CoalescedWriter } from './coalesced-writer.js';
import { LocationBatcher } from './location-batcher.js';
import { GeoRouter } from './geo-router.js';
import { type GeoPending, GeoDuplicates, foldReply, geoHubStats, loadMap, moveCells, planCells, publishGeo, putGeoSubscription, sendGeoLocations } from './redis-geo.js';

const COMPONENT = 'redis hub';
/** Devices per ack script call. */
const ACKS_PER_CALL = 512;


export interface RedisHubOptions {
  /** URL, ioredis options or a Redis Cluster; default redis://127.0.0.1:6379. */
  redis?: RedisSource;
  /** Key prefix of the deployment; default "ambit:". */
  prefix?: string;
  /** Device groups of a cluster deployment (keys.ts); default 64. The same in every process. */
  deviceGroups?: number;
  /**
   * Matcher partitions of the deployment (default 1) and the one this hub speaks to (default 0):
   * a gateway of a partitioned deployment holds one RedisHub per partition behind a
   * PartitionedHub, which sends each device's calls to its partition's hub.
   */
  partitions?: number;
  partition?: number;
  /**
   * Sharding by space (keys.ts `GeoSpec`): one hub speaks to every shard, placing each device and
   * sending each publish to the shards it can reach (geo-router.ts). Excludes `partitions`.
   */
  geo?: GeoSpec;
  /** This gateway's id (its reply channel); default random. */
  gatewayId?: string;
  log?: Logger;
  /** @internal Stands in for a process of another build: the protocol it records (presence.ts). */
  protocol?: number;
  /** Location writers are flushed this often (ms); default 5. */
  flushMs?: number;
  /** ... or as soon as this many writers are dirty; also the most updates per `loc` entry. Default 1024. */
  flushSize?: number;
  /** Flushes in flight before writers only coalesce (backpressure); default 4. */
  maxInFlightFlushes?: number;
  /**
   * Sharding by space: how long an event id deduplicates (ms; default 300 000, 0: off). Decided
   * at publish, for the whole deployment; without sharding by space the matchers decide.
   */
  dedupeWindowMs?: number;
  /** How long publish() waits for the matcher; default 10 000 ms. */
  publishTimeoutMs?: number;
  /**
   * An inbox with nothing to deliver re-reads its stream this often even when nothing was
   * published to it; default 30 000 ms. A safety net only: notifications arrive on the doorbell
   * channel, and after a reconnect every open inbox reads its stream again.
   */
  pollMs?: number;
  /** Approximate cap of `{p}in` (XADD MAXLEN ~); default 100 000 entries. */
  inMaxLen?: number;
  maxSubscriptionsPerDevice?: number;
  /** Limits the matcher's engine applies, checked here so a bad request fails at the caller. */
  engineLimits?: Partial<Limits>;
  /** @internal A clock for retention tests (opening an inbox ages its stream by it); unset: Redis's clock. */
  now?: () => number;
}

interface PendingPublish {
  resolve(reply: PublishReply): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
  /** Sharding by space: the shards still to answer, with their events' indices, and the sums so far. */
  shards?: GeoPending;
}

export class RedisHub implements Hub, InboxHost {
  readonly mode = 'redis' as const;
  readonly gatewayId: string;
  readonly keys: Keys;
  private readonly log: Logger | undefined;
  private readonly cmd: Conn;
  private readonly read: Conn;
  private readonly sub: Conn;
  /** Shard channels (SSUBSCRIBE) on a cluster, plain ones otherwise. */
  private readonly sharded: boolean;
  private readonly limits: Limits;
  private readonly now: (() => number) | null;
  private readonly cap: number;
  private readonly inMaxLen: number;
  private readonly publishTimeoutMs: number;
  /** Sharding by space: how long event ids deduplicate (the deployment's window, decided by the publish script). */
  private readonly dedupeWindowMs: number;
  /** @internal read by inboxes */
  readonly pollMs: number;
  private readonly replyChannel: string;
  private readonly batcher: LocationBatcher;
  /** Sharding by space: where devices and publishes go; null otherwise. */
  private readonly router: GeoRouter | null;
  private readonly pending = new Map<string, PendingPublish>();
  /** Sharding by space: the reach of events for their duplicates (redis-geo.ts). */
  private readonly geoDups: GeoDuplicates;
  private corrSeq = 0;
  /** Open inboxes by device; a device's doorbell channel is subscribed while its set is non-empty. */
  private readonly doorbells = new Map<string, Set<RedisInbox>>();
  /** Revoked tokens as last read, who hears of them, and the reads (one at a time). */
  private revocationList: readonly Revocation[] | null = null;
  private readonly revocationListeners = new Set<(all: readonly Revocation[]) => void>();
  private revocationTimer: NodeJS.Timeout | null = null;
  private revocationReading = false;
  private revocationAgain = false;
  /** Events of recent pushes: one event's recipients here share its object (and its wire encoding). */
  private readonly recentEvents = new RecentEvents();
  /** Acks of this turn, the highest per device: sent together in one script call. */
  private acks = new Map<string, string>();
  private ackBatch: { done: Promise<void>; resolve(): void; reject(err: Error): void } | null = null;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** This gateway's record among the deployment's processes (the protocol check). */
  private presence: Presence | null = null;
  private readonly protocol: number | undefined;

  /** Connects, subscribes to this gateway's reply channel and returns a ready hub. */
  static async connect(options: RedisHubOptions = {}): Promise<RedisHub> {
    const hub = new RedisHub(options);
    try {
      await hub.start();
    } catch (err) {
      hub.crash();
      throw err;
    }
    return hub;
  }

  private constructor(options: RedisHubOptions) {
    const source = options.redis ?? DEFAULT_REDIS;
    const partitions = options.partitions ?? 1;
    const partition = options.partition ?? 0;
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions) throw new Error(`${COMPONENT}: partition must be an integer in [0, ${partitions - 1}], got ${show(partition)}`);
    this.keys = new Keys(prefixOption(COMPONENT, options.prefix, DEFAULT_PREFIX), layoutFor(COMPONENT, source, options.deviceGroups, options.partitions, options.geo), partition);
    this.router = this.keys.layout.geo === undefined ? null : new GeoRouter(this.keys.layout.geo);
    this.sharded = this.keys.layout.cluster;
    this.gatewayId = options.gatewayId ?? randomBytes(8).toString('hex');
    if (typeof this.gatewayId !== 'string' || this.gatewayId.length === 0 || this.gatewayId.length > 128) {
      throw new Error(`${COMPONENT}: gatewayId must be a string of 1 to 128 characters, got ${show(this.gatewayId)}`);
    }
    this.log = options.log;
    this.protocol = options.protocol;
    const flushMs = intOption(COMPONENT, 'flushMs', options.flushMs, 5, 1, 1000);
    const flushSize = intOption(COMPONENT, 'flushSize', options.flushSize, 1024, 1, 65_536);
    const maxInFlight = intOption(COMPONENT, 'maxInFlightFlushes', options.maxInFlightFlushes, 4, 1, 1024);
    this.publishTimeoutMs = intOption(COMPONENT, 'publishTimeoutMs', options.publishTimeoutMs, 10_000, 1, 600_000);
    this.dedupeWindowMs = intOption(COMPONENT, 'dedupeWindowMs', options.dedupeWindowMs, DEFAULT_DEDUPE.windowMs, 0, 7 * 24 * 3600 * 1000);
    this.pollMs = intOption(COMPONENT, 'pollMs', options.pollMs, 30_000, 10, 600_000);
    this.inMaxLen = intOption(COMPONENT, 'inMaxLen', options.inMaxLen, 100_000, 100, 1e9);
    this.cap = intOption(COMPONENT, 'maxSubscriptionsPerDevice', options.maxSubscriptionsPerDevice, DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE, 1, 1e6);
    this.limits = resolveLimits({ ...ENGINE_SIDE_LIMITS, ...options.engineLimits });
    this.now = options.now ?? null;
    this.replyChannel = this.keys.reply(this.gatewayId);
    // A caller waits for at most a few reconnect attempts, then gets UNAVAILABLE (and may retry).
    const fail = { maxRetriesPerRequest: 3 };
    // Auto-pipelining: the commands many device streams issue in one tick (inbox reads, acks,
    // subscription scripts) go out in one socket write instead of one write each.
    this.cmd = openConn(source, `gateway-${this.gatewayId}`, COMPONENT, this.log, { enableAutoPipelining: true }, fail);
    this.read = openConn(source, `gateway-${this.gatewayId}-read`, COMPONENT, this.log, { enableAutoPipelining: true }, fail);
    // On a cluster, doorbells and replies are shard channels: each is served by the master of
    // its slot, so they spread with the device groups instead of reaching every node.
    this.sub = openConn(source, `gateway-${this.gatewayId}-sub`, COMPONENT, this.log, {}, {}, { shardedSubscribers: true });
    this.batcher = new LocationBatcher((cols) => this.sendLocations(cols, flushSize), flushMs, flushSize, maxInFlight, this.log);
    this.geoDups = new GeoDuplicates(this.cmd, this.keys, this.publishTimeoutMs, () => this.closed);
  }

  /**
   * The deployment's instance id (`{p}matcher:instance`), set by the first of its processes: new
   * when Redis lost its data, and with it every device's state (welcome.state_id).
   */
  private async setInstance(): Promise<string> {
    await this.redis(() => this.cmd.set(this.keys.matcherInstance, randomBytes(8).toString('hex'), 'NX'));
    return (await this.redis(() => this.cmd.get(this.keys.matcherInstance))) ?? '';
  }

  private async start(): Promise<void> {
    await connectAll(COMPONENT, [this.cmd, this.read, this.sub]);
    defineScripts(this.cmd);
    defineScripts(this.read);
    await checkLayout(COMPONENT, this.cmd, this.keys);
    this.presence = await Presence.join(COMPONENT, this.cmd, this.keys.procs, 'gateway', { protocol: this.protocol, log: this.log });
    await this.setInstance();
    if (this.router !== null) await loadMap(this.cmd, this.keys, this.router);
    const ringAll = () => {
      for (const set of this.doorbells.values()) for (const inbox of set) inbox.ring();
    };
    if (this.sub instanceof Cluster) {
      this.sub.on('smessage', (channel: string, message: string) => this.onMessage(channel, message));
      // A shard subscriber (re)connected, after a failover or a node's restart: notifications
      // published meanwhile were missed, so every open inbox reads its stream. The events come
      // before its SSUBSCRIBEs are answered, so a notification stored in between would wait for
      // the next one: the inboxes read again a second later.
      const again = () => {
        ringAll();
        setTimeout(ringAll, 1000).unref();
        if (this.revocationTimer !== null) this.reloadRevocations();
      };
      this.sub.on('+subscriber', again);
      this.sub.on('subscribersReady', again);
    } else {
      this.sub.on('message', (channel: string, message: string) => this.onMessage(channel, message));
      // After a reconnect notifications may have been missed: every open inbox reads its stream,
      // once the channels are subscribed again (this subscribe is answered after ioredis's own).
      this.sub.on('ready', () => {
        this.subscribe(this.replyChannel).then(ringAll, ringAll);
        // Revocations added while the subscriber was away are read again.
        if (this.revocationTimer !== null) this.reloadRevocations();
      });
    }
    await this.subscribe(this.replyChannel);
  }

  private subscribe(channel: string): Promise<unknown> {
    return this.sharded ? this.sub.ssubscribe(channel) : this.sub.subscribe(channel);
  }

  private unsubscribe(channel: string): Promise<unknown> {
    return this.sharded ? this.sub.sunsubscribe(channel) : this.sub.unsubscribe(channel);
  }

  // ---- subscriptions ----

  addSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.putSubscription(device, sub, 'add');
  }

  replaceSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.putSubscription(device, sub, 'replace');
  }

  private async putSubscription(device: string, sub: DeviceSubscription, mode: 'add' | 'replace'): Promise<void> {
    this.checkOpen();
    if (sub.pattern !== undefined) {
      validatePatternSubscription({ id: subscriptionKey(device, sub.id), owner: device, pattern: sub.pattern }, this.limits, DEFAULT_PATTERN_LIMITS);
    } else {
      // The engine's own check, here, so a request it would refuse fails at the caller, not in the matcher.
      validateSubscription({ id: subscriptionKey(device, sub.id), owner: device, filters: sub.filters }, this.limits);
    }
    this.batcher.flush(); // this device's earlier positions go first
    const json = JSON.stringify(sub.pattern === undefined ? { id: sub.id, filters: sub.filters } : { id: sub.id, filters: [], pattern: sub.pattern });
    const k = this.keys;
    const router = this.router;
    let r: unknown;
    if (router !== null) {
      r = await this.redis(() => putGeoSubscription(this.cmd, k, router, { mode, device, sub, json, cap: this.cap, inMaxLen: this.inMaxLen }));
    } else r = await this.redis(() => runScript(this.cmd, 'ambitSub', k.subs(device), k.in, k.subDevices, mode, device, sub.id, json, this.cap, this.inMaxLen));
    if (r === 'ALREADY_EXISTS') throw new AmbitError('ALREADY_EXISTS', `device already has subscription ${show(sub.id)}`, 'subscription.id');
    if (r === 'NOT_FOUND') throw new AmbitError('NOT_FOUND', `device has no subscription ${show(sub.id)}`, 'subscription.id');
    if (r === 'RESOURCE_EXHAUSTED') throw new AmbitError('RESOURCE_EXHAUSTED', `device already has ${this.cap} subscriptions, the most allowed`, 'subscription');
  }

  async removeSubscription(device: string, subscriptionId: string): Promise<void> {
    this.checkOpen();
    this.batcher.flush();
    const k = this.keys;
    const r = await this.redis(() =>
      this.router !== null
        ? runScript(this.cmd, 'ambitGeoUnsub', k.seq, k.subs(device), k.meta(device), k.home, k.wide, k.shardPrefix, device, subscriptionId, this.inMaxLen, k.shared)
        : runScript(this.cmd, 'ambitUnsub', k.subs(device), k.in, k.subDevices, device, subscriptionId, this.inMaxLen),
    );
    if (r === 'NOT_FOUND') throw new AmbitError('NOT_FOUND', `device has no subscription ${show(subscriptionId)}`, 'subscription_id');
  }

  /** The device's subscriptions, ordered by id. */
  async listSubscriptions(device: string): Promise<DeviceSubscription[]> {
    this.checkOpen();
    const stored = await this.redis(() => this.cmd.hgetall(this.keys.subs(device)));
    const out: DeviceSubscription[] = [];
    for (const value of Object.values(stored)) out.push(JSON.parse(splitStoredSubscription(value).json) as DeviceSubscription);
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async deviceInfo(device: string): Promise<DeviceInfo> {
    this.checkOpen();
    this.batcher.flush(); // read after this hub's own pending positions
    const [subscriptions, pos] = await Promise.all([this.listSubscriptions(device), this.redis(() => this.cmd.hgetBuffer(this.keys.pos, device))]);
    return { subscriptions, location: decodePosition(pos) };
  }

  // ---- devices ----

  /**
   * SSCAN over the devices' set (each geographic or wide shard's in turn when sharded by space,
   * keeping those with subscriptions). The token is "<shard>:<cursor>:<skip>": the scan call to
   * repeat and how many of its devices the last page took.
   */
  async listDevices(q: DeviceQuery): Promise<DevicePage> {
    this.checkOpen();
    // Sharded by space: each shard's homed devices, then those with subscriptions homed nowhere yet.
    const shards = this.router === null ? 1 : this.keys.partitions + 1;
    let shard = 0;
    let cursor = '0';
    let skip = 0;
    if (q.after !== '') {
      const m = /^(\d{1,3}):(\d{1,20}):(\d{1,7})$/.exec(q.after);
      if (m === null || Number(m[1]) >= shards) throw new AmbitError('INVALID_ARGUMENT', 'is not a page token this listing gave', 'page_token');
      [shard, cursor, skip] = [Number(m[1]), m[2], Number(m[3])];
    }
    const match = `${globEscape(q.prefix)}*`;
    const out: DeviceSummary[] = [];
    const taken = new Set<string>();
    // A rare prefix would otherwise scan the whole set in one call: a page may end short.
    let scans = 0;
    for (; shard < shards; shard++, cursor = '0', skip = 0) {
      const set = this.router === null ? this.keys.subDevices : shard < this.keys.partitions ? this.keys.of(shard).subDevices : `${this.keys.shared}unhomed`;
      for (;;) {
        const [next, found] = await this.redis(() => this.read.sscan(set, cursor, 'MATCH', match, 'COUNT', Math.max(100, q.limit)));
        const batch = found.slice(skip);
        const rows = await this.summaries(batch);
        let used = skip;
        for (let i = 0; i < batch.length; i++) {
          used++;
          // Homed without subscriptions, purged meanwhile, or given again by the scan.
          if (rows[i].subscriptions === 0 || taken.has(batch[i])) continue;
          out.push(rows[i]);
          taken.add(batch[i]);
          if (out.length === q.limit) {
            const more = used < found.length || next !== '0' || shard + 1 < shards;
            return { devices: out, next: !more ? '' : used < found.length ? `${shard}:${cursor}:${used}` : next !== '0' ? `${shard}:${next}:0` : `${shard + 1}:0:0` };
          }
        }
        skip = 0;
        cursor = next;
        if (cursor === '0') break;
        if (++scans >= MAX_SCANS_PER_PAGE) return { devices: out, next: `${shard}:${cursor}:0` };
      }
    }
    return { devices: out, next: '' };
  }

  /** What a listing shows of each device (one pipeline in the devices' slot). */
  private async summaries(devices: readonly string[]): Promise<DeviceSummary[]> {
    if (devices.length === 0) return [];
    const k = this.keys;
    const p = this.read.pipeline();
    for (const d of devices) {
      p.hlen(k.subs(d));
      p.hgetBuffer(k.pos, d);
      p.zscore(k.seen, d);
    }
    const res = await this.redis(async () => {
      const r = await p.exec();
      checkResults(r);
      return r!;
    });
    return devices.map((device, i) => ({
      device,
      subscriptions: Number(res[3 * i][1]),
      location: decodePosition(res[3 * i + 1][1] as Buffer | null),
      lastSeenMs: Number(res[3 * i + 2][1] ?? 0),
    }));
  }

  async purgeDevice(device: string): Promise<PurgeResult> {
    this.checkOpen();
    return (await this.purge(device, '', 'devicesPurged')) as PurgeResult;
  }

  /** The purge script; SEEN when `seenBefore` is set and the device was seen at or after it. */
  private async purge(device: string, seenBefore: string, counter: 'devicesPurged' | 'devicesExpired'): Promise<PurgeResult | 'SEEN'> {
    // This gateway's pending positions first: none may bring the device back after its purge.
    this.batcher.flush();
    const k = this.keys;
    const notifications = await this.redis(() => this.read.xlen(k.notes(device)));
    const r = (await this.redis(() =>
      this.router !== null
        ? runScript(this.cmd, 'ambitGeoPurge', k.seq, k.subs(device), k.meta(device), k.home, k.wide, k.pos, k.seen, k.geoStats, k.shardPrefix, device, this.inMaxLen, seenBefore, counter, String(this.router.wideShard(device)), k.shared)
        : runScript(this.cmd, 'ambitPurge', k.subs(device), k.in, k.subDevices, k.pos, k.seen, k.stats, device, this.inMaxLen, seenBefore, counter),
    )) as [number, number] | 'SEEN';
    if (r === 'SEEN') return r;
    return { subscriptions: Number(r[0]), location: Number(r[1]) === 1, notifications };
  }

  async takeQuota(key: string, n: number, perS: number, capacity: number): Promise<number> {
    this.checkOpen();
    return Number(await this.redis(() => runScript(this.read, 'ambitQuota', this.keys.quota(key), perS / 1000, capacity, n)));
  }

  async markSeen(devices: readonly string[], ms: number): Promise<void> {
    this.checkOpen();
    for (let i = 0; i < devices.length; i += 1000) {
      const args: (string | number)[] = [];
      for (const d of devices.slice(i, i + 1000)) args.push(ms, d);
      await this.redis(() => this.cmd.zadd(this.keys.seen, 'GT', ...args));
    }
  }

  async expireDevices(beforeMs: number, max: number): Promise<string[]> {
    this.checkOpen();
    const stale = await this.redis(() => this.read.zrangebyscore(this.keys.seen, '-inf', `(${beforeMs}`, 'LIMIT', 0, max));
    const gone: string[] = [];
    for (const device of stale) if ((await this.purge(device, String(beforeMs), 'devicesExpired')) !== 'SEEN') gone.push(device);
    return gone;
  }

  /** Every shard's stats record when sharded by space; else this partition's. */
  async shardStatus(): Promise<ShardStatus[]> {
    this.checkOpen();
    const k = this.keys;
    const geo = k.layout.geo;
    const of = geo === undefined ? [k] : Array.from({ length: k.partitions }, (_, i) => k.of(i));
    const records = await this.redis(() => this.cmd.mget(of.map((x) => x.matcherStats)));
    return of.map((x, i) => {
      const r = records[i] === null ? null : (JSON.parse(records[i]!) as MatcherStatsRecord);
      const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
      return {
        name: geo !== undefined ? (x.partition < geo.shards ? `geo ${x.partition}` : `wide ${x.partition - geo.shards}`) : x.partitions > 1 ? `partition ${x.partition}` : 'matcher',
        alive: r !== null,
        matcherId: r?.matcherId ?? '',
        epoch: r?.epoch ?? 0,
        subscriptions: r?.subscriptions ?? 0,
        devices: r?.devices ?? 0,
        offset: r?.offset ?? '',
        streamLength: n(r?.extra.streamLength),
        handOversIn: n(r?.extra.handOversIn),
        handOversOut: n(r?.extra.handOversOut),
      };
    });
  }

  // ---- revoked tokens ----

  async revokeTokens(revocations: readonly Revocation[]): Promise<void> {
    this.checkOpen();
    if (revocations.length === 0) return;
    const args: (string | number)[] = [];
    for (const r of revocations) args.push(revocationKey(r), Math.ceil(r.untilS), 'tokenId' in r ? '-' : Math.floor(r.issuedUpToS));
    const k = this.keys;
    const n = await this.redis(() => runScript(this.cmd, this.sharded ? 'ambitRevokeSharded' : 'ambitRevoke', k.revoked, k.revocations, MAX_REVOCATIONS, ...args));
    if (n === 'RESOURCE_EXHAUSTED') throw new AmbitError('RESOURCE_EXHAUSTED', `at most ${MAX_REVOCATIONS} revocations are kept; revoke by subject instead of token by token`);
  }

  /**
   * The first watcher subscribes to the revocations channel and reads them all; they are read
   * again at each message, after a reconnect and every 30 s (what a lost message missed, and the
   * pruning of those past their keep).
   */
  watchRevocations(listener: (all: readonly Revocation[]) => void): () => void {
    this.revocationListeners.add(listener);
    if (this.revocationList !== null) listener(this.revocationList);
    if (this.revocationTimer === null && !this.closed) {
      this.revocationTimer = setInterval(() => this.reloadRevocations(), 30_000);
      this.revocationTimer.unref();
      this.subscribe(this.keys.revocations).then(
        () => this.reloadRevocations(),
        (err: unknown) => this.log?.warn({ err }, `${COMPONENT}: revocations channel not subscribed; they are read every 30 s`),
      );
      this.reloadRevocations();
    }
    return () => this.revocationListeners.delete(listener);
  }

  /** Reads every revocation (dropping those past their keep) and tells the watchers. */
  private reloadRevocations(): void {
    if (this.closed || this.revocationReading) {
      this.revocationAgain = !this.closed;
      return;
    }
    this.revocationReading = true;
    const k = this.keys;
    const nowS = (this.now === null ? Date.now() : this.now()) / 1000;
    this.cmd.hgetall(k.revoked).then(
      async (stored) => {
        const all: Revocation[] = [];
        const stale: string[] = [];
        for (const [key, v] of Object.entries(stored)) {
          const m = /^(\d+) (\d+|-)$/.exec(v);
          const untilS = m === null ? 0 : Number(m[1]);
          if (m === null || untilS <= nowS) {
            stale.push(key);
            continue;
          }
          if (key.startsWith('id:')) all.push({ tokenId: key.slice(3), untilS });
          else if (key.startsWith('sub:') && m[2] !== '-') all.push({ subject: key.slice(4), issuedUpToS: Number(m[2]), untilS });
        }
        if (stale.length > 0) await this.cmd.hdel(k.revoked, ...stale).catch(() => 0);
        this.revocationList = all;
        for (const l of this.revocationListeners) l(all);
      },
      (err: unknown) => this.log?.warn({ err }, `${COMPONENT}: revocations not read; tried again within 30 s`),
    ).finally(() => {
      this.revocationReading = false;
      if (this.revocationAgain) {
        this.revocationAgain = false;
        this.reloadRevocations();
      }
    });
  }

  // ---- locations ----

  async updateLocations(updates: readonly PositionUpdate[]): Promise<void> {
    this.checkOpen();
    if (updates.length === 0) return;
    this.batcher.flush(); // after the writers' pending positions, like any later write
    const n = updates.length;
    const cols: LocColumns = { devices: new Array<Buffer>(n), lat: new Float64Array(n), lon: new Float64Array(n), n };
    for (let i = 0; i < n; i++) {
      (cols.devices as Buffer[])[i] = Buffer.from(updates[i].device, 'utf8');
      (cols.lat as Float64Array)[i] = updates[i].lat;
      (cols.lon as Float64Array)[i] = updates[i].lon;
    }
    await this.redis(() => this.sendLocations(cols, this.batcher.flushSize));
  }

  /** Sends every writer's pending position and resolves once Redis has them (UNAVAILABLE if not). */
  async flush(): Promise<void> {
    this.checkOpen();
    await this.redis(() => this.batcher.drain());
  }

  locationWriter(device: string): LocationWriter {
    this.checkOpen();
    return new CoalescedWriter(this.batcher, Buffer.from(device, 'utf8'));
  }

  /**
   * One MULTI: the positions into `{p}pos` and the same updates as `loc` entries of `{p}in`
   * (at most `chunk` per entry), so the stored positions and the stream agree.
   */
  private async sendLocations(cols: LocColumns, chunk: number): Promise<void> {
    if (this.router !== null) return sendGeoLocations(this.cmd, this.keys, this.router, cols, chunk, this.inMaxLen);
    const m = this.cmd.multi();
    for (let from = 0; from < cols.n; from += chunk) {
      const to = Math.min(cols.n, from + chunk);
      const batch = encodeLocations(cols, from, to);
      m.xadd(this.keys.in, 'MAXLEN', '~', this.inMaxLen, '*', ...locFields(batch.blob));
      queueCommand(m, new RawCommand('hset', this.keys.pos, encodePositionsHset(this.keys.pos, cols, from, to, batch)));
    }
    m.hincrby(this.keys.stats, 'locations', cols.n);
    checkResults(await m.exec());
  }

  /**
   * Sharding by space: gives cells of the shard map to other geographic shards while traffic
   * flows (redis-geo.ts `moveCells`); resolves once every device homed in them lives on its new
   * shard. FAILED_PRECONDITION when this deployment is not sharded by space.
   */
  async moveCells(moves: readonly CellMove[], /** @internal test hook */ afterBegin?: () => Promise<void>): Promise<{ version: number; devicesMoved: number }> {
    this.checkOpen();
    if (this.router === null) throw new AmbitError('FAILED_PRECONDITION', 'the deployment is not sharded by space (AMBIT_GEO_SHARDS)', 'moves');
    this.batcher.flush();
    return this.redis(() => moveCells(this.cmd, this.keys, this.router!, moves, this.log, this.inMaxLen, afterBegin));
  }

  /**
   * Sharding by space: a plan that fits the shard map to load (redis-geo.ts `planCells`); nothing
   * moves. FAILED_PRECONDITION when this deployment is not sharded by space.
   */
  async planCells(maxMoves: number): Promise<CellPlan> {
    this.checkOpen();
    if (this.router === null) throw new AmbitError('FAILED_PRECONDITION', 'the deployment is not sharded by space (AMBIT_GEO_SHARDS)', 'max_moves');
    this.batcher.flush();
    return this.redis(() => planCells(this.cmd, this.keys, this.router!, maxMoves));
  }

  // ---- publish ----

  async publish(events: readonly Event[]): Promise<PublishResult[]> {
    if (this.closed || this.closing !== null) throw new PublishError('not-stored', `${COMPONENT}: closed`);
    if (events.length === 0) return [];
    validateEvents(events, this.limits);
    // Nothing is sent while Redis is away: the caller hears so at once and retries (a command
    // queued here and sent later, or lost on the way, would leave it guessing).
    if (this.cmd.status !== 'ready') throw new PublishError('not-stored', `${COMPONENT}: Redis is not reachable (${this.cmd.status}); nothing was stored`);
    this.batcher.flush(); // the events see this hub's latest positions
    const corr = String(++this.corrSeq);
    const payload = this.router === null ? JSON.stringify(events.map(plainEvent)) : '';
    const reached = new Promise<PublishReply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(corr);
        reject(
          new PublishError(
            'queued',
            `${COMPONENT}: ${events.length === 1 ? 'the event is' : `the ${events.length} events are`} stored but not matched within ${this.publishTimeoutMs} ms (is a matcher running?); notifications follow when it catches up`,
          ),
        );
      }, this.publishTimeoutMs);
      this.pending.set(corr, { resolve, reject, timer });
    });
    reached.catch(() => {}); // observed below; keeps an early rejection from being reported as unhandled
    const pend = this.pending.get(corr); // kept: sharded by space, its shards' answers are read after it resolves
    try {
      if (this.router !== null) {
        const p = this.pending.get(corr);
        const answering = await publishGeo(this.cmd, this.keys, this.router, { gatewayId: this.gatewayId, inMaxLen: this.inMaxLen, dedupeWindowMs: this.dedupeWindowMs }, p, corr, events.map(plainEvent));
        if (p?.shards !== undefined) this.geoDups.publishing(p.shards, events, reached);
        if (!answering) this.settleGeo(corr); // every event a duplicate: no shard answers
      }
      else await this.cmd.xadd(this.keys.in, 'MAXLEN', '~', this.inMaxLen, '*', ...pubFields(corr, this.gatewayId, payload));
    } catch (err) {
      const p = this.pending.get(corr);
      if (p !== undefined) {
        clearTimeout(p.timer);
        this.pending.delete(corr);
      }
      // Sent or not, stored or not: unknown (no outcome). A retry with the same ids is safe.
      throw new AmbitError('UNAVAILABLE', `${COMPONENT}: the publish may or may not be stored (${err instanceof Error ? err.message : String(err)}); publish again with the same event ids`);
    }
    const answer = await reached;
    if (this.router !== null) await this.geoDups.answered(pend?.shards, events, answer);
    const counts = answer.r ?? [];
    const dups = answer.d === undefined ? null : new Set(answer.d);
    return events.map((e, i) => (dups?.has(i) ? { eventId: e.id, reached: counts[i] ?? 0, duplicate: true } : { eventId: e.id, reached: counts[i] ?? 0 }));
  }

  /** Sharding by space: the publish `corr` has every answer it waits for; it resolves. */
  private settleGeo(corr: string): void {
    const p = this.pending.get(corr);
    const sh = p?.shards;
    if (p === undefined || sh === undefined) return;
    this.pending.delete(corr);
    clearTimeout(p.timer);
    p.resolve({ c: corr, r: sh.reached, ...(sh.dups.size > 0 ? { d: [...sh.dups] } : {}) });
  }

  private onMessage(channel: string, message: string): void {
    if (channel === this.keys.revocations) {
      this.reloadRevocations();
      return;
    }
    if (channel === this.replyChannel) {
      const reply = parseReply(message);
      if (reply === null) {
        this.log?.warn({ channel }, `${COMPONENT}: malformed publish reply ignored`);
        return;
      }
      const p = this.pending.get(reply.c);
      if (p === undefined) return; // timed out, or a replay after a matcher restart
      const sh = p.shards;
      if (sh !== undefined && reply.error === undefined) {
        // One shard's answer: its counts, by its events' indices in the publish.
        if (foldReply(sh, reply)) this.settleGeo(reply.c);
        return;
      }
      this.pending.delete(reply.c);
      clearTimeout(p.timer);
      if (reply.error !== undefined) p.reject(new AmbitError(reply.error.code, reply.error.message));
      else p.resolve(reply);
      return;
    }
    const device = this.keys.deviceOfWake(channel);
    if (device !== null) {
      const set = this.doorbells.get(device);
      if (set === undefined) return;
      if (message === PURGED_DOORBELL) {
        for (const inbox of [...set]) inbox.purge();
        return;
      }
      // The notification itself; a message that is not one (a plain doorbell) makes the inbox read.
      const d = parsePushedNotification(message, this.recentEvents);
      for (const inbox of set) {
        if (d === null) inbox.ring();
        else inbox.push(d);
      }
    }
  }

  // ---- inbox ----

  async openInbox(device: string, resumeAfter: string | null): Promise<Inbox> {
    this.checkOpen();
    if (resumeAfter !== null && resumeAfter !== '' && parseDeliveryId(resumeAfter) === null) {
      throw new AmbitError('INVALID_ARGUMENT', `must be a delivery id ("<ms>-<seq>") or empty, got ${show(resumeAfter)}`, 'resume_token');
    }
    const inbox = new RedisInbox(this, device);
    try {
      // Listen before reading, so a notification stored after our first read still rings.
      await this.watch(inbox);
      const g = this.keys.groupOf(device);
      const [[acked, seqText, oldest, born], instance] = await Promise.all([
        this.redis(() =>
          runScript(this.read, 'ambitOpen', g.notes(device), g.dstate, g.acked, g.stats, g.config, g.nseq, g.nlast, g.born(device), device, resumeAfter === null ? 'acked' : 'token', resumeAfter ?? '', this.now === null ? '' : this.now()),
        ) as Promise<[string, string, string, string]>,
        // Read at every open: a Redis that lost its data gets a new one (the first process to see it sets it).
        this.redis(() => this.read.get(this.keys.matcherInstance)).then(async (v) => v ?? (await this.setInstance())),
      ]);
      const last = Number(seqText);
      const start = resumePoint(acked, last);
      // A purged device's state is named by its purge, so a client sees the change.
      inbox.begin(start, missedAfter(start, oldest, last), start !== acked, born === '' ? instance : `${instance}.${born}`);
      return inbox;
    } catch (err) {
      inbox.close();
      throw err;
    }
  }

  private async watch(inbox: RedisInbox): Promise<void> {
    let set = this.doorbells.get(inbox.device);
    if (set === undefined) {
      set = new Set();
      this.doorbells.set(inbox.device, set);
    }
    set.add(inbox);
    // Every open subscribes (SUBSCRIBE is idempotent) so each one waits until listening.
    await this.redis(() => this.subscribe(this.keys.wake(inbox.device)));
  }

  /** @internal */
  unwatch(inbox: RedisInbox): void {
    const set = this.doorbells.get(inbox.device);
    if (set === undefined || !set.delete(inbox)) return;
    if (set.size === 0) {
      this.doorbells.delete(inbox.device);
      if (!this.closed) this.unsubscribe(this.keys.wake(inbox.device)).catch(() => {});
    }
  }

  /**
   * @internal XRANGE after `cursor` (exclusive; '' = from the start), with the events the entries
   * name read in one MGET (they are in this partition's slot). An entry whose event has expired
   * (older than twice the max age, which retention drops at the next write or open) is left out.
   */
  async range(device: string, cursor: string, max: number): Promise<Delivery[]> {
    const rows = await this.redis(() => this.read.xrange(this.keys.notes(device), cursor === '' ? '-' : `(${cursor}`, '+', 'COUNT', max));
    const parsed = rows.map(([id, f]) => {
      const n = parseStoredNotification(id, f);
      if (n === null) throw new AmbitError('UNAVAILABLE', `${COMPONENT}: notification ${id} of ${show(device)} has no event`);
      return n;
    });
    const refs = [...new Set(parsed.filter((n) => n.event === null).map((n) => n.ref as string))];
    const events = new Map<string, Event>();
    if (refs.length > 0) {
      const values = await this.redis(() => this.read.mget(refs.map((r) => this.keys.event(r))));
      for (let i = 0; i < refs.length; i++) {
        const v = values[i];
        if (v !== null) events.set(refs[i], this.recentEvents.get(v));
      }
    }
    const out: Delivery[] = [];
    for (const n of parsed) {
      const event = n.event ?? events.get(n.ref as string);
      if (event === undefined) {
        this.log?.warn({ device, deliveryId: n.deliveryId }, `${COMPONENT}: notification ${n.deliveryId} names an event that has expired; skipped`);
        continue;
      }
      if (n.match === undefined) out.push({ deliveryId: n.deliveryId, event, subscriptionIds: n.subscriptionIds, publishedAtMs: n.publishedAtMs });
      else out.push({ deliveryId: n.deliveryId, event, subscriptionIds: n.subscriptionIds, publishedAtMs: n.publishedAtMs, match: n.match });
    }
    return out;
  }

  /**
   * @internal Moves the device's ack point to `deliveryId` (forward only). Acks of one turn, from
   * every stream of this gateway, go in one script call; each resolves when that call has.
   */
  ackDelivery(device: string, deliveryId: string): Promise<void> {
    const cur = this.acks.get(device);
    if (cur === undefined || compareDeliveryIds(deliveryId, cur) > 0) this.acks.set(device, deliveryId);
    if (this.ackBatch === null) {
      let resolve!: () => void;
      let reject!: (err: Error) => void;
      const done = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      this.ackBatch = { done, resolve, reject };
      setImmediate(this.sendAcks);
    }
    return this.ackBatch.done;
  }

  private readonly sendAcks = (): void => {
    this.flushAcks().catch(() => {}); // the batch's callers get the error
  };

  /** Sends the acks of this turn (in calls of at most ACKS_PER_CALL devices). */
  private async flushAcks(): Promise<void> {
    const batch = this.ackBatch;
    if (batch === null) return;
    const acks = this.acks;
    this.ackBatch = null;
    this.acks = new Map();
    try {
      const calls: Promise<unknown>[] = [];
      // One call per device group (a cluster script stays in one slot), of at most ACKS_PER_CALL.
      const byGroup = new Map<GroupKeys, string[]>();
      for (const [device, id] of acks) {
        const g = this.keys.groupOf(device);
        let args = byGroup.get(g);
        if (args === undefined) byGroup.set(g, (args = []));
        args.push(device, id);
        if (args.length === 2 * ACKS_PER_CALL) {
          calls.push(runScript(this.read, 'ambitAcks', g.acked, ...args));
          byGroup.delete(g);
        }
      }
      for (const [g, args] of byGroup) calls.push(runScript(this.read, 'ambitAcks', g.acked, ...args));
      await this.redis(() => Promise.all(calls));
      batch.resolve();
    } catch (err) {
      batch.reject(err as Error);
      throw err;
    }
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** @internal Most notifications one inbox read asks for. */
  readonly readBatch = 64;
  private lastReadErrorLog = 0;

  /** @internal An inbox read failed (Redis away); the inbox tries again. Logged at most every 5 s. */
  readFailed(err: unknown): void {
    const now = Date.now();
    if (now - this.lastReadErrorLog < 5000) return;
    this.lastReadErrorLog = now;
    this.log?.warn({ err }, `${COMPONENT}: reading a device's notifications failed; retrying`);
  }

  // ---- stats, lifecycle ----

  async stats(): Promise<HubStats> {
    this.checkOpen();
    if (this.router !== null) return this.redis(() => geoHubStats(this.cmd, this.keys, this.router!, this.gatewayId));
    // The matcher's counters, plus the device groups' (notifications, dropped) where they are
    // other keys: a cluster's groups, or a partitioned deployment's. The groups are shared by the
    // partitions, so partition 0's hub alone counts them.
    const groupStats = this.keys.partition === 0 ? this.keys.groups.map((g) => g.stats).filter((k) => k !== this.keys.stats) : [];
    const statKeys = [this.keys.stats, ...new Set(groupStats)];
    const [m, ...all] = await this.redis(() => Promise.all([this.cmd.get(this.keys.matcherStats), ...statKeys.map((key) => this.cmd.hgetall(key))]));
    const num = (k: string) => {
      let n = 0;
      for (const s of all as Record<string, string>[]) n += Number(s[k] ?? 0);
      return n;
    };
    const matcher = m === null ? null : (JSON.parse(m) as MatcherStatsRecord);
    return {
      mode: 'redis',
      engine: matcher?.engine ?? 'none',
      engineDetail: matcher?.engineDetail ?? 'no matcher alive (its stats key has expired)',
      subscriptions: matcher?.subscriptions ?? 0,
      filters: matcher?.filters ?? 0,
      devices: matcher?.devices ?? 0,
      eventsPublished: num('events'),
      notifications: num('notifications'),
      locationUpdates: num('locations'),
      notificationsDropped: num('dropped'),
      engineMemoryBytes: matcher?.memoryBytes ?? 0,
      extra: {
        ...(matcher?.extra ?? {}),
        matcherAlive: matcher !== null,
        matcherId: matcher?.matcherId ?? '',
        matcherOffset: matcher?.offset ?? '',
        matcherEpoch: matcher?.epoch ?? 0,
        duplicateEvents: num('duplicates'),
        devicesPurged: num('devicesPurged'),
        devicesExpired: num('devicesExpired'),
        gatewayId: this.gatewayId,
      },
    };
  }

  /** Flushes pending positions, ends every inbox and pending publish, and quits the connections. */
  close(): Promise<void> {
    return (this.closing ??= this.shutdown());
  }

  private async shutdown(): Promise<void> {
    try {
      await this.batcher.drain();
    } catch (err) {
      this.log?.warn({ err }, `${COMPONENT}: positions not flushed at close`);
    }
    try {
      await this.flushAcks();
    } catch (err) {
      this.log?.warn({ err }, `${COMPONENT}: acks not stored at close`);
    }
    this.closed = true;
    this.batcher.stop();
    this.endWaiters();
    if (this.revocationTimer !== null) clearInterval(this.revocationTimer);
    await this.presence?.leave();
    await Promise.all([closeConnection(this.cmd), closeConnection(this.read), closeConnection(this.sub)]);
  }

  /**
   * Test hook: the process dies. Connections drop without flushing or unsubscribing; what Redis
   * did not receive is lost, as in a crash.
   * @internal
   */
  crash(): void {
    this.closed = true;
    if (this.revocationTimer !== null) clearInterval(this.revocationTimer);
    void this.presence?.leave(false);
    this.closing ??= Promise.resolve();
    this.batcher.stop();
    this.endWaiters();
    this.cmd.disconnect();
    this.read.disconnect();
    this.sub.disconnect();
  }

  private endWaiters(): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new PublishError('queued', `${COMPONENT}: closed before the matcher answered; the events are stored and will be delivered`));
    }
    this.pending.clear();
    this.ackBatch?.reject(new AmbitError('UNAVAILABLE', `${COMPONENT}: closed`));
    this.ackBatch = null;
    this.acks.clear();
    for (const set of this.doorbells.values()) for (const inbox of set) inbox.close();
    this.doorbells.clear();
  }

  private checkOpen(): void {
    if (this.closed || this.closing !== null) throw new AmbitError('UNAVAILABLE', `${COMPONENT}: closed`);
  }

  /** Runs a Redis call; a failure of Redis itself becomes UNAVAILABLE for the caller. */
  private async redis<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (err) {
      if (err instanceof AmbitError) throw err;
      throw new AmbitError('UNAVAILABLE', `${COMPONENT}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

// ---- helpers ----

/** SSCAN calls one page of a listing makes at most (the page may hold fewer devices than asked). */
const MAX_SCANS_PER_PAGE = 32;

/** A prefix as a literal SCAN pattern (glob's special characters escaped). */
function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, '\\$&');
}

/** Only the Event fields, so nothing else a caller attached travels through Redis. */
function plainEvent(e: Event): Event {
  const out: Event = { id: e.id, lat: e.lat, lon: e.lon, attributes: e.attributes };
  if (e.radiusM !== undefined) out.radiusM = e.radiusM;
  if (e.tags !== undefined && e.tags.length > 0) out.tags = e.tags;
  if (e.timeMs !== undefined) out.timeMs = e.timeMs;
  return out;
}

/** A MULTI's EXEC answer: null when aborted; each command's error rethrown. */
function checkResults(results: [Error | null, unknown][] | null): void {
  if (results === null) throw new Error(`${COMPONENT}: transaction aborted`);
  for (const [err] of results) if (err !== null) throw err;
}
