/**
 * The matcher role of the Redis deployment: a process owns an engine, rebuilt from Redis at
 * start, and consumes the command stream `{p}in` in order: subscription changes and location
 * batches change the engine, publishes are matched and their notifications stored in each
 * recipient's stream, then the gateway that published gets the reached counts.
 *
 * Leadership: any number of matchers may run on one deployment; the one holding the lease
 * (`{p}matcher:lease`, a TTL renewed every quarter of it) leads, the others stand by. A standby
 * tails the stream too and applies every subscription change and location batch to its own engine
 * (warm), skipping publishes; when the lease lapses it takes it, with a token one above the last
 * (`{p}matcher:epoch`), and resumes leading from the older of its own position and the stored
 * offset. Everything a leader writes (notifications, offset, replies) is fenced by its token: a
 * leader that paused past its lease while another took over has its late writes refused whole, and
 * steps down when it finds out.
 *
 * Guarantees: a batch's notifications are stored before the offset that covers it is written, so a
 * crash replays at least what was not finished; the deliver script's per-device marker (last
 * in-entry id and event index) turns that replay into at most one copy per device. Matching a
 * replayed publish sees the state rebuilt at restart, not the state of its first run (see
 * `rebuild`).
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { AmbitError, type ErrorCode } from '../../src/model/errors.js';
import type { DeviceHandle, Matcher } from '../../src/engines/matcher.js';
import { inRange } from '../../src/model/limits.js';
import type { Event } from '../../src/model/types.js';
import type { DeviceSubscription } from '../hub/port.js';
import { compareStreamIds, decodeLocations, decodePosition, splitStoredSubscription, streamIdMs } from '../redis/codec.js';
import { DEFAULT_REDIS, type RedisSource, closeConnection, connectAll, intOption, openConnection, prefixOption, sleep } from '../redis/connection.js';
import { DEFAULT_PREFIX, Keys } from '../redis/keys.js';
import { type InEntry, type MatcherStatsRecord, encodeReply, parseInEntry } from '../redis/protocol.js';
import { defineScripts, runScript } from '../redis/scripts.js';
import { MatchCore, type Recipient } from './core.js';
import { type EngineChoice, openEngine } from './engine.js';
import { DEFAULT_RETENTION, type Retention } from './fanout.js';
import { RedisFanOut } from './redis-fanout.js';

const COMPONENT = 'redis matcher';

export interface RedisMatcherOptions {
  /** URL or ioredis options; default redis://127.0.0.1:6379. */
  redis?: RedisSource;
  prefix?: string;
  /** An engine to own (closed by stop()), or which one to open; default 'auto'. */
  engine?: Matcher | EngineChoice;
  /** Why this engine, for stats (set from openEngine when `engine` is a choice). */
  engineDetail?: string;
  log?: Logger;
  /** Per-device notification retention, applied when storing (and read by gateways from `{p}config`). */
  retention?: Partial<Retention>;
  /** Entries per XREAD; default 256. */
  readCount?: number;
  /** XREAD BLOCK timeout (ms); default 1000. */
  blockMs?: number;
  /** Stats/liveness key refresh (ms); the key lives 3× this. Default 1000. */
  statsMs?: number;
  /**
   * How long the lease lives without renewal (ms); default 2000. A standby takes over within about
   * 1.25× this after a leader dies (a leader that stops cleanly hands over at once).
   */
  leaseMs?: number;
  /** @internal test and benchmark hooks */
  hooks?: MatcherHooks;
  /**
   * @internal A clock for retention tests: stamps publishes and ages notifications by it. Unset
   * (production), a publish is stamped when Redis accepted it and ages by Redis's clock.
   */
  now?: () => number;
}

/** @internal */
export interface MatcherHooks {
  /** After a batch's notifications are stored, before its offset is written. */
  afterDeliver?(): void | Promise<void>;
  /** After each batch: entries, location updates applied and how long applying took. */
  onBatch?(b: { entries: number; locations: number; ms: number }): void;
  /** Awaited before a batch's notifications are sent to Redis (they are built already). */
  beforeStore?(): Promise<void> | void;
}

export type MatcherRole = 'leader' | 'standby';

type PubEntry = InEntry & { t: 'pub' };

export class RedisMatcher {
  readonly matcherId = randomBytes(6).toString('hex');
  readonly keys: Keys;
  readonly core: MatchCore;
  readonly engineDetail: string;
  private readonly log: Logger | undefined;
  private readonly cmd: Redis;
  private readonly blocking: Redis;
  private readonly retention: Retention;
  private readonly readCount: number;
  private readonly blockMs: number;
  private readonly statsMs: number;
  private readonly hooks: MatcherHooks;
  private readonly fanout: RedisFanOut;
  private readonly now: (() => number) | null;
  private blockingId = -1;
  /** Where the next XREAD starts. */
  private lastId = '0-0';
  /** The offset stored in Redis. */
  private committed = '0-0';
  private stopping = false;
  private crashed = false;
  private loopDone: Promise<void> = Promise.resolve();
  private statsTimer: NodeJS.Timeout | null = null;
  private ended: Promise<void> | null = null;
  private applied = 0;
  /** Engine handles of the devices with a position (see `move`). */
  private readonly handles = new Map<string, DeviceHandle>();
  private eventsMatched = 0;
  private invalid = 0;
  private readonly leaseMs: number;
  private leaseTimer: NodeJS.Timeout | null = null;
  private leaseBusy = false;
  private leaseSuspended = false;
  private currentRole: MatcherRole = 'standby';
  /** The lease token this matcher leads (or last led) with; '' before it ever led. */
  private token = '';
  /** When the lease was last renewed or taken (performance.now()). */
  private leaseAt = 0;
  /** Set when the lease was taken: the loop turns leader before its next read. */
  private promotion = false;
  private fenced = 0;
  private roleWaiters: { role: MatcherRole; resolve: () => void }[] = [];

  /** Opens the engine (when given a choice), connects, rebuilds from Redis and starts consuming. */
  static async start(options: RedisMatcherOptions = {}): Promise<RedisMatcher> {
    let engine: Matcher;
    let detail = options.engineDetail ?? '';
    if (typeof options.engine === 'object' && options.engine !== null) engine = options.engine;
    else {
      const opened = await openEngine(options.engine ?? 'auto');
      engine = opened.engine;
      detail = options.engineDetail ?? opened.detail;
    }
    const m = new RedisMatcher(options, engine, detail);
    try {
      await m.open();
    } catch (err) {
      await m.crash();
      throw err;
    }
    return m;
  }

  private constructor(options: RedisMatcherOptions, engine: Matcher, detail: string) {
    const source = options.redis ?? DEFAULT_REDIS;
    this.keys = new Keys(prefixOption(COMPONENT, options.prefix, DEFAULT_PREFIX));
    this.log = options.log;
    const r = { ...DEFAULT_RETENTION, ...options.retention };
    this.retention = {
      maxPerDevice: intOption(COMPONENT, 'retention.maxPerDevice', r.maxPerDevice, DEFAULT_RETENTION.maxPerDevice, 1, 1e8),
      maxAgeMs: intOption(COMPONENT, 'retention.maxAgeMs', r.maxAgeMs, DEFAULT_RETENTION.maxAgeMs, 1, 10 * 365 * 24 * 3600 * 1000),
    };
    this.readCount = intOption(COMPONENT, 'readCount', options.readCount, 256, 1, 100_000);
    this.blockMs = intOption(COMPONENT, 'blockMs', options.blockMs, 1000, 1, 60_000);
    this.statsMs = intOption(COMPONENT, 'statsMs', options.statsMs, 1000, 10, 60_000);
    this.leaseMs = intOption(COMPONENT, 'leaseMs', options.leaseMs, 2000, 100, 600_000);
    this.hooks = options.hooks ?? {};
    this.core = new MatchCore(engine);
    this.engineDetail = detail;
    this.cmd = openConnection(source, `matcher-${this.matcherId}`, COMPONENT, this.log);
    // Blocking reads wait as long as it takes for Redis to come back.
    this.blocking = openConnection(source, `matcher-${this.matcherId}-read`, COMPONENT, this.log, { maxRetriesPerRequest: null });
    this.now = options.now ?? null;
    this.fanout = new RedisFanOut(this.cmd, this.keys, this.retention, this.now);
    this.fanout.beforeExec = () => this.hooks.beforeStore?.();
  }

  /** Whether this matcher leads (matches and delivers) or stands by (keeps its engine warm). */
  get role(): MatcherRole {
    return this.currentRole;
  }

  /** The lease token this matcher leads with (0 while it has never led). */
  get epoch(): number {
    return this.token === '' ? 0 : Number(this.token);
  }

  /** Writes of this matcher that Redis refused because another had taken the lease. */
  get fencedWrites(): number {
    return this.fenced;
  }

  /** Resolves when this matcher has the given role (at once if it has it now). */
  whenRole(role: MatcherRole): Promise<void> {
    if (this.currentRole === role && !(role === 'standby' && this.promotion)) return Promise.resolve();
    return new Promise((resolve) => this.roleWaiters.push({ role, resolve }));
  }

  /**
   * Test hook: the lease is no longer renewed nor taken, as if the process were paused for the lease
   * timer only; the loop goes on.
   * @internal
   */
  suspendLease(): void {
    this.leaseSuspended = true;
  }

  /** Last `{p}in` entry whose effects are stored. */
  get offset(): string {
    return this.committed;
  }

  /** The last `{p}in` entry this matcher has read and applied (a standby's too). */
  get position(): string {
    return this.lastId;
  }

  /** Location updates applied from the stream since start (the snapshot not included). */
  get locationsApplied(): number {
    return this.applied;
  }

  private async open(): Promise<void> {
    await connectAll(COMPONENT, [this.cmd, this.blocking]);
    defineScripts(this.cmd);
    this.blockingId = Number(await this.blocking.client('ID'));
    await this.rebuild();
    await this.leaseTick();
    if (this.promotion) await this.lead();
    else this.log?.info({ matcherId: this.matcherId }, `${COMPONENT}: standing by (another matcher holds the lease); tailing ${this.keys.in}`);
    this.statsTimer = setInterval(() => {
      this.writeStats().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: stats not written`));
    }, this.statsMs);
    this.statsTimer.unref();
    this.leaseTimer = setInterval(() => void this.leaseTick(), Math.max(25, Math.floor(this.leaseMs / 4)));
    this.leaseTimer.unref();
    this.loopDone = this.loop();
  }

  private get leaseValue(): string {
    return `${this.token} ${this.matcherId}`;
  }

  /**
   * Every quarter lease: the leader renews (and steps down when the lease is someone else's, or
   * could not be renewed for a whole lease); a standby tries to take it.
   */
  private async leaseTick(): Promise<void> {
    if (this.leaseBusy || this.leaseSuspended || this.stopping) return;
    this.leaseBusy = true;
    const k = this.keys;
    try {
      if (this.currentRole === 'leader') {
        let held: boolean;
        try {
          held = (await runScript(this.cmd, 'ambitLeaseRenew', k.matcherLease, this.leaseValue, this.leaseMs)) === 1;
          if (held) this.leaseAt = performance.now();
        } catch (err) {
          held = performance.now() - this.leaseAt < this.leaseMs;
          if (!held) this.log?.warn({ err }, `${COMPONENT}: lease not renewed for ${this.leaseMs} ms`);
        }
        if (!held && !this.stopping) this.stepDown('the lease passed to another matcher or lapsed');
      } else if (!this.promotion) {
        const [taken, value] = (await runScript(this.cmd, 'ambitLeaseAcquire', k.matcherLease, k.matcherEpoch, this.matcherId, this.leaseMs)) as [number, string];
        if (taken === 1 && !this.stopping) {
          this.token = String(value);
          this.leaseAt = performance.now();
          this.promotion = true;
          // Wake the loop's blocked read so it leads at once.
          if (this.blockingId >= 0 && this.loopDone !== null) this.cmd.client('UNBLOCK', this.blockingId).catch(() => {});
        }
      }
    } catch (err) {
      this.log?.warn({ err }, `${COMPONENT}: lease check failed`);
    } finally {
      this.leaseBusy = false;
    }
  }

  /** The lease was taken: lead from the older of this matcher's position and the stored offset. */
  private async lead(): Promise<void> {
    const k = this.keys;
    const stored = (await this.cmd.get(k.matcherOffset)) ?? '0-0';
    const from = compareStreamIds(this.lastId, stored) < 0 ? this.lastId : stored;
    await this.cmd.hset(k.config, 'maxPerDevice', this.retention.maxPerDevice, 'maxAgeMs', this.retention.maxAgeMs);
    this.lastId = this.committed = from;
    this.fanout.token = this.token;
    this.promotion = false;
    this.currentRole = 'leader';
    await this.writeStats();
    this.log?.info({ epoch: this.epoch, offset: from, stored }, `${COMPONENT}: leading (lease epoch ${this.token}) from ${from}`);
    this.roleChanged();
  }

  /** Stops leading: what this matcher still writes is fenced; it tails the stream as a standby. */
  private stepDown(why: string): void {
    if (this.currentRole !== 'leader') return;
    this.currentRole = 'standby';
    this.log?.error({ epoch: this.epoch }, `${COMPONENT}: standing down from epoch ${this.token}: ${why}`);
    this.roleChanged();
  }

  private roleChanged(): void {
    const ready = this.roleWaiters.filter((w) => w.role === this.currentRole);
    this.roleWaiters = this.roleWaiters.filter((w) => w.role !== this.currentRole);
    for (const w of ready) w.resolve();
  }

  /**
   * The engine from Redis: every stored subscription and position, then the stream after the
   * stored offset is replayed (idempotent: upserts, moves, unsubscribing a missing one is a no-op).
   * A subscription written by a command still in the replay is left to that command, so publishes
   * replayed before it do not see it. What the replay cannot restore: a subscription removed or
   * replaced after a replayed publish is seen by it as it is now, and positions are the latest.
   */
  private async rebuild(): Promise<void> {
    const t0 = performance.now();
    const k = this.keys;
    const offset = await this.cmd.get(k.matcherOffset);
    const from = offset ?? '0-0';
    const trimmedTo = await this.maxDeletedId();
    if (compareStreamIds(trimmedTo, from) > 0) {
      this.log?.warn(
        { offset: from, trimmedTo },
        `${COMPONENT}: ${k.in} was trimmed past the stored offset: commands up to ${trimmedTo} were never matched (their publishes are lost; subscriptions and positions come from the snapshot)`,
      );
    }
    let subs = 0;
    let deferred = 0;
    let cursor = '0';
    do {
      const [next, devices] = await this.cmd.sscan(k.subDevices, cursor, 'COUNT', 500);
      cursor = next;
      if (devices.length === 0) continue;
      const p = this.cmd.pipeline();
      for (const d of devices) p.hgetall(k.subs(d));
      const results = (await p.exec()) ?? [];
      for (let i = 0; i < devices.length; i++) {
        const [err, stored] = results[i];
        if (err !== null) throw err;
        for (const value of Object.values(stored as Record<string, string>)) {
          const { version, json } = splitStoredSubscription(value);
          if (compareStreamIds(version, from) > 0 && compareStreamIds(version, trimmedTo) > 0) {
            deferred++; // its own command is in the replay
            continue;
          }
          try {
            this.core.put(devices[i], JSON.parse(json) as DeviceSubscription, 'upsert');
            subs++;
          } catch (err) {
            this.log?.warn({ err, device: devices[i] }, `${COMPONENT}: stored subscription refused by the engine, skipped`);
          }
        }
      }
    } while (cursor !== '0');
    let positions = 0;
    cursor = '0';
    do {
      const [next, flat] = await this.cmd.hscanBuffer(k.pos, cursor, 'COUNT', 10_000);
      cursor = next.toString();
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const p = decodePosition(flat[i + 1]);
        if (p === null) continue;
        this.move(flat[i].toString('utf8'), p.lat, p.lon);
        positions++;
      }
    } while (cursor !== '0');
    this.lastId = this.committed = from;
    this.log?.info(
      { subscriptions: subs, deferred, positions, offset: from, ms: Math.round(performance.now() - t0) },
      `${COMPONENT}: rebuilt ${subs} subscriptions and ${positions} positions; replaying ${k.in} after ${from}`,
    );
  }

  /** Highest id trimmed from `{p}in` ('0-0' when none, or no stream yet). */
  private async maxDeletedId(): Promise<string> {
    let info: unknown;
    try {
      info = await this.cmd.call('XINFO', 'STREAM', this.keys.in);
    } catch {
      return '0-0'; // no stream yet
    }
    const flat = info as unknown[];
    for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i] === 'max-deleted-entry-id') return String(flat[i + 1]);
    return '0-0';
  }

  private async loop(): Promise<void> {
    const k = this.keys;
    while (!this.stopping) {
      if (this.promotion && !this.crashed) {
        try {
          await this.lead();
        } catch (err) {
          if (this.stopping) break;
          this.log?.warn({ err }, `${COMPONENT}: taking the lead failed; retrying`);
          await sleep(200);
          continue;
        }
      }
      let reply: [Buffer, [Buffer, Buffer[]][]][] | null;
      try {
        reply = (await this.blocking.xreadBuffer('COUNT', this.readCount, 'BLOCK', this.blockMs, 'STREAMS', k.in, this.lastId)) as typeof reply;
      } catch (err) {
        if (this.stopping) break;
        this.log?.warn({ err }, `${COMPONENT}: read failed; retrying`);
        await sleep(500);
        continue;
      }
      if (reply === null || reply.length === 0 || this.crashed) continue;
      try {
        await this.process(reply[0][1]);
      } catch (err) {
        if (this.crashed) break;
        if (isFenced(err)) {
          this.fenced++;
          this.stepDown(`a write was refused: ${err instanceof Error ? err.message : String(err)}`);
          this.lastId = this.committed;
          continue;
        }
        this.log?.error({ err }, `${COMPONENT}: batch failed; replaying it from ${this.committed}`);
        this.lastId = this.committed;
        await sleep(1000);
      }
    }
  }

  /**
   * Applies one read batch in stream order; consecutive publishes are matched as one engine batch.
   * A standby applies everything but the publishes and stores nothing.
   */
  private async process(entries: [Buffer, Buffer[]][]): Promise<void> {
    const leading = this.currentRole === 'leader';
    const t0 = performance.now();
    const applied0 = this.applied;
    const flights: Promise<void>[] = [];
    let pubs: PubEntry[] = [];
    for (const [idBuf, fields] of entries) {
      const id = idBuf.toString('latin1');
      let entry: InEntry;
      try {
        entry = parseInEntry(id, fields);
      } catch (err) {
        this.log?.warn({ err, entry: id }, `${COMPONENT}: command ${id} skipped`);
        continue;
      }
      if (entry.t === 'pub') {
        if (leading) pubs.push(entry);
        continue;
      }
      if (pubs.length > 0) {
        flights.push((await this.matchPubs(pubs)).done);
        pubs = [];
      }
      try {
        if (entry.t === 'loc') this.applied += decodeLocations(entry.data, this.move);
        else if (entry.t === 'sub') this.core.put(entry.device, entry.sub, 'upsert');
        else this.core.remove(entry.device, entry.subscriptionId);
      } catch (err) {
        this.log?.warn({ err, entry: id }, `${COMPONENT}: command ${id} skipped`);
      }
    }
    if (pubs.length > 0) flights.push((await this.matchPubs(pubs)).done);
    const applyMs = performance.now() - t0;
    const last = entries[entries.length - 1][0].toString('latin1');
    if (!leading) {
      this.lastId = last;
      this.hooks.onBatch?.({ entries: entries.length, locations: this.applied - applied0, ms: applyMs });
      return;
    }
    await Promise.all(flights);
    if (this.crashed) throw new Error(`${COMPONENT}: crashed`);
    await this.hooks.afterDeliver?.();
    if (this.crashed) throw new Error(`${COMPONENT}: crashed`);
    await runScript(this.cmd, 'ambitCommit', this.keys.matcherOffset, this.keys.matcherEpoch, this.token, last);
    this.lastId = this.committed = last;
    this.hooks.onBatch?.({ entries: entries.length, locations: this.applied - applied0, ms: applyMs });
  }

  /**
   * The hot path of a loc batch: positions were range-checked by the gateway; a bad one is skipped.
   * Moves go straight to the engine's device handle, not through MatchCore.move (which also keeps
   * a copy of each position): at a million updates a second, the extra object per update is a
   * cache miss that costs a third of the throughput. Positions are read from `{p}pos` instead.
   */
  private readonly move = (device: string, lat: number, lon: number): void => {
    if (!inRange(lat, lon)) {
      this.invalid++;
      return;
    }
    let h = this.handles.get(device);
    if (h === undefined) {
      try {
        h = this.core.engine.openDevice(device);
      } catch {
        this.invalid++; // a device id the engine refuses
        return;
      }
      this.handles.set(device, h);
    }
    h.update(lat, lon);
  };

  /**
   * Matches publishes (the engine is awaited, so later commands see the state it matched) and
   * queues their notifications; the returned `done` settles once they are stored and the
   * publishers answered. One bad event fails only its own publish.
   */
  private async matchPubs(pubs: PubEntry[]): Promise<{ done: Promise<void> }> {
    const all: Event[] = [];
    for (const p of pubs) if (p.events !== null) all.push(...p.events);
    const results = new Map<PubEntry, Recipient[][]>();
    try {
      const flat = await this.core.match(all);
      let i = 0;
      for (const p of pubs) {
        if (p.events === null) continue;
        results.set(p, flat.slice(i, i + p.events.length));
        i += p.events.length;
      }
    } catch {
      for (const p of pubs) {
        if (p.events === null) continue;
        try {
          results.set(p, await this.core.match(p.events));
        } catch (err) {
          p.error = errorReply(err);
          this.log?.warn({ err, entry: p.id }, `${COMPONENT}: publish ${p.id} refused by the engine`);
        }
      }
    }
    const k = this.keys;
    const replies: [channel: string, reply: string][] = [];
    let events = 0;
    for (const p of pubs) {
      const matched = results.get(p);
      if (matched === undefined || p.events === null) {
        replies.push([k.reply(p.gw), encodeReply({ c: p.corr, error: p.error })]);
        continue;
      }
      const reached = this.fanout.deliver({ id: p.id, ms: this.now === null ? streamIdMs(p.id) : this.now() }, p.events, matched);
      events += p.events.length;
      replies.push([k.reply(p.gw), encodeReply({ c: p.corr, r: reached })]);
    }
    this.eventsMatched += events;
    const stored = this.fanout.flush();
    const done = (async () => {
      await stored;
      // Counted before the replies, so a publisher's stats() after its publish includes it.
      await runScript(this.cmd, 'ambitAnswer', k.stats, k.matcherEpoch, this.token, events, ...replies.flat());
    })();
    done.catch(() => {}); // awaited by process(); this keeps an early failure from being reported as unhandled
    return { done };
  }

  private async writeStats(): Promise<void> {
    if (this.currentRole !== 'leader') return;
    const s = this.core.stats();
    const record: MatcherStatsRecord = {
      matcherId: this.matcherId,
      engine: s.engine,
      engineDetail: this.engineDetail,
      subscriptions: this.core.subscriptions,
      filters: s.filters,
      devices: this.handles.size,
      memoryBytes: s.memoryBytes,
      offset: this.committed,
      locationsApplied: this.applied,
      epoch: this.epoch,
      extra: { ...(s.extra ?? {}), eventsMatched: this.eventsMatched, locationsApplied: this.applied, invalidUpdates: this.invalid, fencedWrites: this.fenced },
    };
    await this.cmd.set(this.keys.matcherStats, JSON.stringify(record), 'PX', this.statsMs * 3);
  }

  /** Events matched since start. */
  get eventsMatchedCount(): number {
    return this.eventsMatched;
  }

  /** Devices with a position in the engine. */
  get devices(): number {
    return this.handles.size;
  }

  private async closeEngine(): Promise<void> {
    for (const h of this.handles.values()) h.release();
    this.handles.clear();
    await this.core.close();
  }

  /** Finishes the current batch (its offset written), then closes the engine and connections. */
  stop(): Promise<void> {
    return (this.ended ??= this.shutdown());
  }

  private async shutdown(): Promise<void> {
    this.stopping = true;
    if (this.statsTimer !== null) clearInterval(this.statsTimer);
    if (this.leaseTimer !== null) clearInterval(this.leaseTimer);
    // Wake the blocked XREAD; repeated because it may reach Redis before the XREAD it should end.
    // With Redis unreachable neither the UNBLOCK nor the XREAD ever answers: after a bounded
    // wait the blocking connection is dropped, which rejects the XREAD and ends the loop (the
    // batch in progress, if any, was already stored or will be replayed from the offset).
    let exited = false;
    void this.loopDone.then(() => (exited = true));
    const giveUp = Date.now() + 3000;
    while (!exited) {
      if (Date.now() > giveUp || this.blocking.status !== 'ready') {
        this.blocking.disconnect();
        await Promise.race([this.loopDone, sleep(1000)]);
        break;
      }
      await Promise.race([this.cmd.client('UNBLOCK', this.blockingId).catch(() => {}), sleep(200)]);
      await Promise.race([this.loopDone, sleep(50)]);
    }
    const reachable = this.cmd.status === 'ready';
    if (reachable && this.currentRole === 'leader') {
      // The stats key goes first: a standby taking the lease writes its own.
      await Promise.race([this.cmd.del(this.keys.matcherStats).catch(() => {}), sleep(1000)]);
      // Hand over at once instead of after the lease's TTL.
      await Promise.race([runScript(this.cmd, 'ambitLeaseRelease', this.keys.matcherLease, this.leaseValue).catch(() => {}), sleep(1000)]);
    }
    await this.closeEngine();
    if (reachable) await Promise.race([Promise.all([closeConnection(this.cmd), closeConnection(this.blocking)]), sleep(2000)]);
    this.cmd.disconnect();
    this.blocking.disconnect();
    this.log?.info({ offset: this.committed }, `${COMPONENT}: stopped at ${this.committed}`);
  }

  /**
   * Test hook: the process dies mid-batch. Connections drop at once, nothing more is stored and
   * the offset stays where it was; the returned promise settles when the loop has ended.
   * @internal
   */
  crash(): Promise<void> {
    if (this.ended !== null) return this.ended;
    this.crashed = true;
    this.stopping = true;
    if (this.statsTimer !== null) clearInterval(this.statsTimer);
    if (this.leaseTimer !== null) clearInterval(this.leaseTimer);
    this.cmd.disconnect();
    this.blocking.disconnect();
    return (this.ended = this.loopDone.then(() => this.closeEngine()));
  }
}

// ---- helpers ----

function errorReply(err: unknown): { code: ErrorCode; message: string } {
  if (err instanceof AmbitError) return { code: err.code, message: err.message };
  return { code: 'UNAVAILABLE', message: `${COMPONENT}: ${err instanceof Error ? err.message : String(err)}` };
}

/** A write Redis refused because this matcher's lease token is no longer the newest. */
function isFenced(err: unknown): boolean {
  return err instanceof Error && err.message.includes('FENCED');
}
