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
 *
 * Batches: a batch is applied and matched while the previous one's writes are in flight; each
 * batch's offset is written after the one before it, and a failure replays from the stored offset.
 *
 * One file because the loop, the two batches in flight, the lease's transitions and the replay
 * after a failure read and write the same position, offset and in-flight event ids, which must
 * change together; the lease, the rebuild and the fan-out are already modules of their own.
 */
import { deserialize, serialize } from 'node:v8';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AmbitError, type ErrorCode } from '../../src/model/errors.js';
import type { Matcher } from '../../src/engines/matcher.js';
import { inRange } from '../../src/model/limits.js';
import type { Event } from '../../src/model/types.js';
import { compareStreamIds, decodeLocations, decodePosition, splitStoredSubscription, streamIdMs } from '../redis/codec.js';
import { type Conn, DEFAULT_REDIS, type RedisSource, closeConnection, connectAll, intOption, openConn, prefixOption, sleep } from '../redis/connection.js';
import { DEFAULT_PREFIX, type GeoSpec, type GroupKeys, Keys } from '../redis/keys.js';
import { checkLayout, layoutFor } from '../redis/layout.js';
import { Presence } from '../redis/presence.js';
import { StreamReader } from '../redis/stream-reader.js';
import { type Acquired, type InEntry, type MatcherStatsRecord, encodeReply, parseInEntry } from '../redis/protocol.js';
import { defineScripts, runScript } from '../redis/scripts.js';
import { MatchCore, type PatternCut, type PatternDelivery, type Recipient } from './core.js';
import type { DeviceSubscription } from '../hub/port.js';
import { MatcherLease } from './lease.js';
import { type Deferred, holdsAfter, holdsEntry, putStored, rebuildFromRedis, streamBounds } from './rebuild.js';
import { type SnapshotInfo, SnapshotRefused, type SnapshotSource, checkSnapshot, readSnapshot, writeSnapshot } from './snapshot.js';
import type { SequencerName } from '../../src/engines/index.js';
import { type EngineChoice, openEngine, openPatterns } from './engine.js';
import type { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { DEFAULT_RETENTION, type Retention } from './fanout.js';
import { RedisFanOut } from './redis-fanout.js';
import { DEFAULT_DEDUPE, type PublishPlan, type PublishSlot, StreamIdJudge, planPublish, settlePublish } from './event-ids.js';

const COMPONENT = 'redis matcher';
/** Stream entries held back by another matcher beyond which the leader warns. */
const HELD_WARN_ENTRIES = 10_000;
const NONE_KNOWN: ReadonlyMap<string, { reached: number; entry: string }> = new Map();

export interface RedisMatcherOptions {
  /** URL, ioredis options or a Redis Cluster; default redis://127.0.0.1:6379. */
  redis?: RedisSource;
  prefix?: string;
  /** Device groups of a cluster deployment (keys.ts); default 64. The same in every process. */
  deviceGroups?: number;
  /**
   * Matcher partitions of the deployment (default 1) and the one this matcher serves (default 0):
   * devices are split over the partitions by id, each with its own command stream, state, lease
   * and matchers. The same count in every process.
   */
  partitions?: number;
  partition?: number;
  /**
   * Sharding by space (keys.ts `GeoSpec`; excludes `partitions`): this matcher serves shard
   * `partition` of the `geo.shards + geo.wide` shards. A shard applies a device it takes over
   * (an `acq` entry) only once the shard it leaves has stored its offset past the hand-over.
   */
  geo?: GeoSpec;
  /** An engine to own (closed by stop()), or which one to open; default 'auto'. */
  engine?: Matcher | EngineChoice;
  /** With `engine` a choice that opens the GPU engine: false keeps no CPU engine beside it. */
  gpuCpuMirror?: boolean;
  /** Why this engine, for stats (set from openEngine when `engine` is a choice). */
  engineDetail?: string;
  log?: Logger;
  /** @internal Stands in for a process of another build: the protocol it records (presence.ts). */
  protocol?: number;
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
  /**
   * How long an event id deduplicates (ms; default 300 000, 0 turns it off): an event whose id was
   * matched within it is answered as a duplicate and delivers nothing. Ids live in Redis
   * (`{p}eid:{id}`), so the window holds across matcher restarts and takeovers.
   */
  dedupeWindowMs?: number;
  /**
   * Snapshot files (snapshot.ts) in `dir`, one per matcher partition: written every `intervalMs`
   * (default 300 000; 0: only at a clean stop) and when the matcher stops cleanly; read at start,
   * when the command stream still holds every command after it, instead of reading every
   * subscription back from Redis. Each matcher needs a directory of its own.
   */
  snapshot?: {
    dir: string;
    intervalMs?: number;
    /**
     * How long the stream keeps the commands after this matcher's snapshot start once the matcher
     * stops renewing the claim (it died, or stopped cleanly): a restart within it loads the file.
     * Default twice the interval plus a minute, at least 10 minutes (11 at the default interval).
     */
    holdMs?: number;
    /** @internal bytes per block (tests) */ blockBytes?: number;
  };
  /**
   * Pattern subscriptions (docs/semantics.md §9): the lateness bound (E3, ms; default 0) and the
   * events each element keeps (E15; default 10 000). The release order's clock is the command
   * stream's: each publish moves it to the time Redis accepted the entry.
   */
  patterns?: { latenessMs?: number; retainedPerElement?: number; sequencer?: SequencerName };
  /** @internal test and benchmark hooks */
  hooks?: MatcherHooks;
  /**
   * How long (ms, by Redis's clock) another matcher's read position may stay put behind the stored
   * offset and still hold back this leader's trimming (default 600 000; 0: no bound). A standby
   * stuck longer is trimmed past and rebuilds itself from Redis (`RebuildingMatcher`); one that is
   * slow but reading, or building its engine, still holds the stream.
   */
  stuckReadMs?: number;
  /**
   * Sharded by space: how long (ms) this shard's leader waits for the shards devices leave to
   * store past a hand-over before it applies the arrival anyway (default 0: no bound; the
   * service's processes take `AMBIT_HANDOVER_WAIT_S`, 30 s by default). A later hand-over from a
   * shard given up on that has still not stored since is applied at once.
   * While it waits its whole loop waits, so a shard left with no leader and no standby would
   * stall every shard its devices move to. Applied early, each device's state first opens an
   * owed window (owed-scripts.ts OWE), so what the shard left behind still owes the device is stored
   * when that shard runs again, after what this shard stored meanwhile; nothing is lost or
   * matched twice (docs/service.md).
   */
  handOverWaitMs?: number;
  /**
   * Sharded by space: the most owed windows one device may hold at once (default 4): one per
   * hand-over applied past the bound whose shard left behind has not stored past it yet. A
   * hand-over that would open one more waits for the shard it comes from instead (counted as
   * refused).
   */
  maxOwedWindows?: number;
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
  /** Awaited at the top of each turn of the loop (before it leads, if it is to, and reads). */
  beforeRead?(): Promise<void> | void;
  /** The lease was taken (the loop leads at its next turn). */
  onLease?(): void;
  /** Awaited before a batch's notifications are sent to Redis (they are built already). */
  beforeStore?(): Promise<void> | void;
  /**
   * Awaited at start once the state is loaded (a snapshot file, before the commands after it are
   * applied; or the rebuild from Redis, before the stream is read).
   */
  restoring?(): Promise<void> | void;
  /** Awaited after each block of a snapshot file is written (the matcher goes on meanwhile). */
  snapshotBlock?(): Promise<void> | void;
  /** A leader's batch is applied and matched (its writes may wait for the batch before it). */
  onMatched?(b: { last: string; publishes: number }): void;
  /** The stream was found trimmed past this matcher's read position. */
  onTrimmedPast?(readPosition: string): void;
  /** The leader ran its trim: the stream was trimmed below `below` ('' when nothing may go), `removed` entries. */
  onKeep?(t: { below: string; removed: number }): void;
  /** Sharding by space: a leader waits for the shards devices leave before it applies their arrival. */
  onHandOverWait?(w: { entry: string; from: number[] }): void;
  /** Sharded by space: the wait above ran past `handOverWaitMs` and the arrival is applied without it. */
  onHandOverForced?(w: { entry: string; from: number[]; waitedMs: number }): void;
  /** Sharded by space: past `handOverWaitMs`, but a device in the arrival holds the most owed windows (`maxOwedWindows`): it waits on. */
  onHandOverRefused?(w: { entry: string; from: number[]; waitedMs: number }): void;
  /** A leader's stats record is in Redis (what gateways read for their stats and metrics). */
  onStatsWritten?(record: MatcherStatsRecord): void;
  /** The owed windows of a hand-over applied past the bound were closed (its sources stored past it). */
  onOwedClosed?(w: { released: string; closed: number }): void;
}

export type MatcherRole = 'leader' | 'standby';

type PubEntry = InEntry & { t: 'pub' };

/** The patterns' state for a snapshot file: the core's cut and the stream positions it holds. */
interface PatternsCut {
  /** The file's start (the replay begins after it). */
  start: string;
  /** Publishes up to here are in the state (not fed again). */
  fedTo: string;
  /** Subscription commands up to here are in the state (not applied to the patterns again). */
  subsAt: string;
  state: PatternCut;
}

export class RedisMatcher {
  readonly matcherId = randomBytes(6).toString('hex');
  readonly keys: Keys;
  readonly core: MatchCore;
  readonly engineDetail: string;
  private readonly log: Logger | undefined;
  private readonly cmd: Conn;
  private readonly blocking: StreamReader;
  private readonly retention: Retention;
  private readonly readCount: number;
  private readonly blockMs: number;
  private readonly statsMs: number;
  private readonly hooks: MatcherHooks;
  private readonly fanout: RedisFanOut;
  private readonly now: (() => number) | null;
  /** Where the next XREAD starts. */
  private lastId = '0-0';
  /** The offset stored in Redis. */
  private committed = '0-0';
  private stopping = false;
  private crashed = false;
  private loopDone: Promise<void> = Promise.resolve();
  private statsTimer: NodeJS.Timeout | null = null;
  private ended: Promise<void> | null = null;
  /** Set by stopForRebuild: the stop writes no snapshot and removes the file. */
  private discardSnapshot = false;
  private applied = 0;
  /** The highest stream id any applied command had: no state holds the effect of a later one. */
  private appliedMax = '0-0';
  /** `{p}matcher:instance`: names this deployment's stream in snapshots. */
  private instance = '';
  private readonly snapshotPath: string | null;
  private readonly snapshotIntervalMs: number;
  private readonly snapshotBlockBytes: number | undefined;
  private snapshotTimer: NodeJS.Timeout | null = null;
  /** Snapshot writes run one after another on this chain; `snapshotsPending` counts them. */
  private snapshotChain: Promise<unknown> = Promise.resolve();
  private snapshotsPending = 0;
  /**
   * While a snapshot is written: the lowest read position since it began. A replay (a failed batch,
   * a new term) moves the read position back and applies older commands again over the state the
   * writer is taking; the snapshot's start must be at or before them.
   */
  private snapshotLow: string | null = null;
  private lastSnapshot: (SnapshotInfo & { ms: number }) | null = null;
  /** Where the snapshot file on disk starts (loaded at start or written since): the stream is kept from there. */
  private snapshotStart: string | null = null;
  /** The start of the snapshot being written, from when it is taken until the file is in place. */
  private writingStart: string | null = null;
  private readonly snapshotHoldMs: number;
  /** How long (ms) another matcher's read position may stay put behind the stored offset and still hold trimming (0: no bound). */
  private readonly stuckReadMs: number;
  /** Set once the engine is built: the read position is kept from then on. */
  private reading = false;
  private streamTrims = 0;
  private keepKeys: string[] | null = null;
  /** What holds the stream's trimming (a keep record's field or an offset key) and its length, as the leader last saw. */
  private streamHeldBy = '';
  private streamLength = 0;
  private heldWarnedAt = 0;
  /**
   * Stored subscriptions a rebuild from Redis left to their commands in the stream, by command id;
   * dropped as the loop reads past them, applied here when their command was trimmed away first.
   */
  private deferred: Deferred[] = [];
  /** Where the engine came from at start, and how long that took. */
  private restored: { from: 'snapshot' | 'redis'; ms: number; replayed: number } = { from: 'redis', ms: 0, replayed: 0 };
  private eventsMatched = 0;
  private invalid = 0;
  private readonly leaseMs: number;
  private readonly lease: MatcherLease;
  private currentRole: MatcherRole = 'standby';
  /** Set when the lease was taken: the loop turns leader before its next read. */
  private promotion = false;
  private fenced = 0;
  /** Times the stream was found trimmed past this matcher's read position (commands it never applied). */
  private trimmedPast = 0;
  private trimmedReported = '';
  private readSinceStart = false;
  /** Sharding by space: time spent waiting for shards that devices left (ms). */
  private handOverWaitMs = 0;
  private handOversForced = 0;
  /** Hand-overs past the wait bound that were not forced (a device held the most owed windows): they wait on. */
  private handOversRefused = 0;
  /** Hand-overs applied past the bound whose owed windows are open: closed once their sources store past them. */
  private owedOpen: { released: string; offsets: string[]; byGroup: Map<GroupKeys, string[]> }[] = [];
  private closingOwed = false;
  /**
   * Shards this leader gave up waiting for (a hand-over from them applied past the bound), each
   * with the release entry it had not stored past: a later hand-over from one of them that has
   * still not stored past that entry is applied at once, without waiting the bound again (it has
   * been stuck for longer than the bound already). Forgotten once the shard stores past it.
   */
  private readonly stuckSources = new Map<number, string>();
  private readonly handOverWaitLimitMs: number;
  private readonly maxOwedWindows: number;
  /** This matcher's record among the deployment's processes (the protocol check). */
  private presence: Presence | null = null;
  private readonly protocol: number | undefined;
  /** Devices this matcher's engine took over from another shard, and gave to one (hand-over entries applied). */
  private handOversIn = 0;
  private handOversOut = 0;
  /** A purge's drop was queued in the fan-out since the batch's last flush. */
  private dropsQueued = false;
  private duplicates = 0;
  private readonly dedupeWindowMs: number;
  /**
   * Fresh event ids of the batches matched and not yet answered (their `{p}eid:` keys may not be in
   * Redis yet): their reach, and the batch that holds them.
   */
  private inBatch = new Map<string, { reach: Promise<number>; batch: number }>();
  /** Read batches so far; the one being applied. */
  private batchSeq = 0;
  /**
   * The writes of the batch before this one (its notifications, answers and offset), still in
   * flight while the next batch is read and matched; null when none is.
   */
  private finishing: Promise<void> | null = null;
  /** A batch is being applied and matched (the patterns' state is between two commands). */
  private inProcess = false;
  /** Snapshots waiting for the patterns' cut: woken when a batch is done. */
  private cutWanted: (() => void)[] = [];
  private patternCut: PatternsCut | null = null;
  /**
   * The last publish whose events went to the patterns, and the last command that changed their
   * subscriptions: a batch replayed after a failed write (or the replay after a snapshot) must
   * not give them again (a pattern would count an event twice, or lose its history to a replace).
   */
  private patternsFedTo = '0-0';
  private patternSubsAt = '0-0';
  /**
   * What each publish not yet committed releases, stored again if its batch is replayed; a
   * standby's, until the leader's stored offset passes them (it may lead before that).
   */
  private patternReleased = new Map<string, Promise<PatternDelivery[]>>();
  /** Standing by: how the publishes it follows were judged fresh (null when leading). */
  private standbyJudge: StreamIdJudge | null = null;
  /**
   * Every device's position at the patterns' cut: a snapshot with patterns writes these, not the
   * positions as they are when reached, so the replay after it matches at the positions of then.
   */
  private cutPositions: { devices: string[]; coords: Float64Array } | null = null;
  private readonly patternsLatenessMs: number;
  private patternMatches = 0;
  private roleWaiters: { role: MatcherRole; resolve: () => void }[] = [];

  /** Opens the engine (when given a choice), connects, rebuilds from Redis and starts consuming. */
  static async start(options: RedisMatcherOptions = {}): Promise<RedisMatcher> {
    let engine: Matcher;
    let detail = options.engineDetail ?? '';
    if (typeof options.engine === 'object' && options.engine !== null) engine = options.engine;
    else {
      const opened = await openEngine(options.engine ?? 'auto', options);
      engine = opened.engine;
      detail = options.engineDetail ?? opened.detail;
    }
    // Sharded by space, a device with a pattern lives on its wide shard (which every event visits)
    // as long as it has one, so a pattern's history never moves between shards.
    const patterns = await openPatterns({
      engine: typeof options.engine === 'string' ? options.engine : 'fast',
      patternLatenessMs: options.patterns?.latenessMs ?? 0,
      patternRetainedPerElement: options.patterns?.retainedPerElement ?? 10_000,
      patternSequencer: options.patterns?.sequencer ?? 'cdp',
    });
    const m = new RedisMatcher(options, engine, detail, patterns);
    try {
      await m.open();
    } catch (err) {
      await m.crash();
      throw err;
    }
    return m;
  }

  private constructor(options: RedisMatcherOptions, engine: Matcher, detail: string, patterns: PatternMatcher | null) {
    const source = options.redis ?? DEFAULT_REDIS;
    this.keys = new Keys(prefixOption(COMPONENT, options.prefix, DEFAULT_PREFIX), layoutFor(COMPONENT, source, options.deviceGroups, options.partitions, options.geo), partitionOption(options));
    this.log = options.log;
    this.protocol = options.protocol;
    const r = { ...DEFAULT_RETENTION, ...options.retention };
    this.retention = {
      maxPerDevice: intOption(COMPONENT, 'retention.maxPerDevice', r.maxPerDevice, DEFAULT_RETENTION.maxPerDevice, 1, 1e8),
      maxAgeMs: intOption(COMPONENT, 'retention.maxAgeMs', r.maxAgeMs, DEFAULT_RETENTION.maxAgeMs, 1, 10 * 365 * 24 * 3600 * 1000),
    };
    this.readCount = intOption(COMPONENT, 'readCount', options.readCount, 256, 1, 100_000);
    this.blockMs = intOption(COMPONENT, 'blockMs', options.blockMs, 1000, 1, 60_000);
    this.statsMs = intOption(COMPONENT, 'statsMs', options.statsMs, 1000, 10, 60_000);
    this.leaseMs = intOption(COMPONENT, 'leaseMs', options.leaseMs, 2000, 100, 600_000);
    // Sharded by space, event ids are deduplicated by the publish script for all shards at once.
    this.dedupeWindowMs = options.geo !== undefined ? 0 : intOption(COMPONENT, 'dedupeWindowMs', options.dedupeWindowMs, DEFAULT_DEDUPE.windowMs, 0, 7 * 24 * 3600 * 1000);
    this.hooks = options.hooks ?? {};
    const snap = options.snapshot;
    if (snap !== undefined && (typeof snap !== 'object' || snap === null || typeof snap.dir !== 'string' || snap.dir === '')) {
      throw new Error(`${COMPONENT}: snapshot.dir must be a directory path, got ${JSON.stringify(snap)}`);
    }
    this.snapshotPath = snap === undefined ? null : join(snap.dir, snapshotFileName(this.keys));
    this.snapshotBlockBytes = snap?.blockBytes;
    this.snapshotIntervalMs = intOption(COMPONENT, 'snapshot.intervalMs', snap?.intervalMs, 300_000, 0, 7 * 24 * 3600 * 1000);
    this.snapshotHoldMs = intOption(COMPONENT, 'snapshot.holdMs', snap?.holdMs, Math.max(600_000, 2 * this.snapshotIntervalMs + 60_000), 1000, 30 * 24 * 3600 * 1000);
    this.stuckReadMs = intOption(COMPONENT, 'stuckReadMs', options.stuckReadMs, 600_000, 0, 30 * 24 * 3600 * 1000);
    this.handOverWaitLimitMs = intOption(COMPONENT, 'handOverWaitMs', options.handOverWaitMs, 0, 0, 24 * 3600 * 1000);
    this.maxOwedWindows = intOption(COMPONENT, 'maxOwedWindows', options.maxOwedWindows, 4, 1, 64);
    this.core = new MatchCore(engine, undefined, patterns);
    this.patternsLatenessMs = options.patterns?.latenessMs ?? 0;
    this.engineDetail = detail;
    this.cmd = openConn(source, `matcher-${this.matcherId}`, COMPONENT, this.log);
    this.blocking = new StreamReader(source, this.cmd, this.keys.in, `matcher-${this.matcherId}`, COMPONENT, this.log);
    this.now = options.now ?? null;
    this.fanout = new RedisFanOut(this.cmd, this.keys, this.retention, this.now);
    this.fanout.beforeExec = () => this.hooks.beforeStore?.();
    this.lease = new MatcherLease(
      this.cmd,
      this.keys,
      this.matcherId,
      this.leaseMs,
      {
        taken: () => {
          this.promotion = true;
          this.hooks.onLease?.();
          // Wake the loop's blocked read so it leads at once.
          this.blocking.wake().catch(() => {});
        },
        lost: (why) => {
          this.promotion = false;
          this.stepDown(why);
        },
      },
      this.log,
      COMPONENT,
    );
  }

  /** Whether this matcher leads (matches and delivers) or stands by (keeps its engine warm). */
  get role(): MatcherRole {
    return this.currentRole;
  }

  /** The lease token this matcher leads with (0 while it has never led). */
  get epoch(): number {
    return this.token === '' ? 0 : Number(this.token);
  }

  /** The lease token this matcher leads (or last led) with; '' before it ever led. */
  private get token(): string {
    return this.lease.token;
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
    this.lease.suspend();
  }

  /** Whether its connections to Redis are up and its loop runs (readiness). */
  get redisReady(): boolean {
    return !this.crashed && !this.stopping && this.cmd.status === 'ready' && this.blocking.ready;
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
    await connectAll(COMPONENT, [this.cmd]);
    defineScripts(this.cmd);
    await checkLayout(COMPONENT, this.cmd, this.keys);
    this.presence = await Presence.join(COMPONENT, this.cmd, this.keys.procs, 'matcher', { protocol: this.protocol, log: this.log });
    await this.cmd.set(this.keys.matcherInstance, randomBytes(8).toString('hex'), 'NX');
    this.instance = (await this.cmd.get(this.keys.matcherInstance)) ?? '';
    await this.blocking.open();
    await this.keepStream();
    await this.rebuild();
    this.reading = true;
    await this.keepStream();
    await this.lease.start();
    if (this.promotion) await this.lead();
    else this.log?.info({ matcherId: this.matcherId }, `${COMPONENT}: standing by (another matcher holds the lease); tailing ${this.keys.in}`);
    this.statsTimer = setInterval(() => {
      this.writeStats().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: stats not written`));
      this.checkTrimmed().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: the command stream's bounds not read`));
      this.keepStream().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: the command stream's keep not written`));
      this.pruneFollowed().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: the leader's offset not read`));
      this.closeOwed().catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: owed windows not closed`));
    }, this.statsMs);
    this.statsTimer.unref();
    if (this.snapshotPath !== null && this.snapshotIntervalMs > 0) {
      this.snapshotTimer = setInterval(() => {
        if (this.snapshotsPending === 0 && !this.stopping) void this.snapshotNow();
      }, this.snapshotIntervalMs);
      this.snapshotTimer.unref();
    }
    this.loopDone = this.loop();
  }

  /** The lease was taken: lead from the older of this matcher's position and the stored offset. */
  private async lead(): Promise<void> {
    if (!this.lease.held) {
      this.promotion = false;
      return;
    }
    const k = this.keys;
    const stored = (await this.cmd.get(k.matcherOffset)) ?? '0-0';
    const from = compareStreamIds(this.lastId, stored) < 0 ? this.lastId : stored;
    await this.cmd.hset(k.config, 'maxPerDevice', this.retention.maxPerDevice, 'maxAgeMs', this.retention.maxAgeMs);
    // Each device group's copy of the retention where it is another key (a cluster's groups, or
    // the shared groups of matcher partitions): gateways age a device's stream by it when it opens.
    await Promise.all(k.groups.filter((g) => g.config !== k.config).map((g) => this.cmd.hset(g.config, 'maxPerDevice', this.retention.maxPerDevice, 'maxAgeMs', this.retention.maxAgeMs)));
    if (k.layout.cluster) {
      // Each group's fence raised to this lease's token before anything is delivered there: an
      // older leader's late deliveries to the group are refused from here on.
      await Promise.all(k.groups.map((g) => runScript(this.cmd, 'ambitFenceRaise', g.fence, this.token)));
    }
    await this.rewindHandOvers(from, this.lastId);
    await this.loadOwed();
    this.rewind(from);
    this.committed = from;
    this.inBatch.clear();
    // The publishes it followed standing by are in the patterns already: those after `from` are
    // read again now, matched, and what they released then is stored (feedPatterns).
    this.standbyJudge = null;
    this.fanout.resetChain();
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
   * The engine from this matcher's snapshot file when there is a usable one (`restore`), else from
   * Redis (rebuild.ts); the stream is read from the stored offset on.
   */
  private async rebuild(): Promise<void> {
    const t0 = performance.now();
    const replayed = this.snapshotPath === null ? null : await this.restore(this.snapshotPath);
    if (replayed === null) {
      const { from, deferred } = await rebuildFromRedis(this.cmd, this.keys, this.core, this.move, this.log, COMPONENT);
      this.deferred = deferred;
      // The homes read are those of now; the replay starts at the stored offset.
      await this.rewindHandOvers(from, '+');
      this.lastId = this.committed = from;
      // Redis's state may hold the effect of any command written before this read.
      this.appliedMax = (await streamBounds(this.cmd, this.keys)).lastId;
      await this.hooks.restoring?.();
    }
    this.restored = { from: replayed === null ? 'redis' : 'snapshot', ms: performance.now() - t0, replayed: replayed ?? 0 };
  }

  /**
   * Deferred subscriptions whose command the stream no longer holds, though the loop has not read
   * it: what Redis stores for them now is applied (they come before anything the loop reads next);
   * one removed since is gone, one written again by a command still to be read stays deferred
   * under that command. `firstRead` is the first id of the batch about to be applied, or null when
   * the loop found nothing to read.
   */
  private async applyDeferred(firstRead: string | null): Promise<void> {
    const bounds = firstRead === null ? await streamBounds(this.cmd, this.keys) : null;
    const trimmed = (version: string) => (bounds === null ? compareStreamIds(version, firstRead!) < 0 : !holdsEntry(bounds, version));
    const gone = this.deferred.filter((d) => trimmed(d.version));
    if (gone.length === 0) return;
    const p = this.cmd.pipeline();
    for (const d of gone) p.hget(this.keys.subs(d.device), d.sub.id);
    const now = (await p.exec()) ?? [];
    const still: Deferred[] = [];
    let applied = 0;
    for (let i = 0; i < gone.length; i++) {
      const [err, value] = now[i];
      if (err !== null) throw err;
      if (value === null) continue; // removed since, by a command trimmed too: not in the engine
      const { version, json } = splitStoredSubscription(value as string);
      if (!trimmed(version)) {
        try {
          still.push({ version, device: gone[i].device, sub: JSON.parse(json) as DeviceSubscription });
        } catch (err) {
          this.log?.warn({ err, device: gone[i].device }, `${COMPONENT}: stored subscription refused by the engine, skipped`);
        }
      } else if (putStored(this.core, gone[i].device, json, this.log, `${COMPONENT}: stored subscription`)) applied++;
    }
    const done = new Set(gone);
    this.deferred = [...this.deferred.filter((d) => !done.has(d)), ...still].sort((a, b) => compareStreamIds(a.version, b.version));
    this.log?.warn(
      { subscriptions: gone.length, applied },
      `${COMPONENT}: the commands of ${gone.length} stored subscriptions were trimmed from ${this.keys.in} before they were read; ${applied} applied as Redis stores them now`,
    );
  }

  /** Deferred subscriptions whose command was read (at or before `last`) are the stream's now. */
  private dropDeferred(last: string): void {
    let n = 0;
    while (n < this.deferred.length && compareStreamIds(this.deferred[n].version, last) <= 0) n++;
    if (n > 0) this.deferred = this.deferred.slice(n);
  }

  /**
   * Loads the snapshot file when it is of this deployment, whole, and the stream still holds every
   * command after its start and no less than it saw; then applies the commands after its start up
   * to the stored offset (their publishes were answered). Returns how many it applied, or null
   * when the snapshot is not used (nothing was loaded).
   */
  private async restore(path: string): Promise<number | null> {
    let info: SnapshotInfo;
    try {
      info = await checkSnapshot(path, this.identity);
    } catch (err) {
      if (!(err instanceof SnapshotRefused)) throw err;
      if (err.missing) this.log?.info({ path }, `${COMPONENT}: no snapshot at ${path}; rebuilding from Redis`);
      else this.log?.warn({ path, reason: err.reason }, `${COMPONENT}: ${err.message}; rebuilding from Redis`);
      return null;
    }
    const bounds = await streamBounds(this.cmd, this.keys);
    if (!holdsAfter(bounds, info.start)) {
      this.log?.warn({ path, start: info.start, first: bounds.first }, `${COMPONENT}: snapshot ${path} starts at ${info.start} but ${this.keys.in} no longer holds every command after it (trimmed up to ${bounds.first ?? bounds.lastId}); rebuilding from Redis`);
      return null;
    }
    if (compareStreamIds(info.end, bounds.lastId) > 0) {
      this.log?.warn({ path, end: info.end, streamLast: bounds.lastId }, `${COMPONENT}: snapshot ${path} has seen commands up to ${info.end}, ${this.keys.in} only up to ${bounds.lastId} (Redis lost acknowledged writes); rebuilding from Redis`);
      return null;
    }
    // The stream is kept from the file's start while it loads (and after, until a newer file).
    this.snapshotStart = info.start;
    await this.keepStream();
    const stored = (await this.cmd.get(this.keys.matcherOffset)) ?? '0-0';
    if (compareStreamIds(info.end, stored) > 0) {
      // Publishes after the stored offset are matched again: against the state of the snapshot's
      // end they could reach subscriptions made after them.
      this.log?.warn({ path, end: info.end, offset: stored }, `${COMPONENT}: snapshot ${path} has applied commands up to ${info.end}, past the stored offset ${stored} whose publishes are matched again; rebuilding from Redis`);
      this.snapshotStart = null; // not used: the stream need not be kept for it
      return null;
    }
    const t0 = performance.now();
    let patternsRestored = false;
    await readSnapshot(path, this.identity, {
      // First in the file: the pattern subscriptions as of its start, with their history.
      patterns: (bytes) => {
        let cut: PatternsCut;
        try {
          cut = deserialize(bytes) as PatternsCut;
        } catch (err) {
          // Unreadable here (another V8): the patterns start from the records, with no history.
          this.log?.warn({ err, path }, `${COMPONENT}: the pattern state of snapshot ${path} cannot be read; patterns start with no history`);
          return;
        }
        this.core.restorePatterns(cut.state);
        this.patternsFedTo = cut.fedTo;
        this.patternSubsAt = cut.subsAt;
        patternsRestored = true;
      },
      subscriptions: (device, subs) => {
        for (const sub of subs) {
          // A pattern subscription comes from the pattern state (taken at the start; the records
          // may be later versions, which the replay brings in order). One the state lacks came
          // after it: added now, its history starts again where the replay adds it (E17).
          if (patternsRestored && sub.pattern !== undefined && this.core.isPattern(device, sub.id)) continue;
          putStored(this.core, device, sub, this.log, `${COMPONENT}: a subscription of the snapshot`);
        }
      },
      position: this.move,
    }, undefined, false);
    const loadMs = performance.now() - t0;
    await this.hooks.restoring?.();
    const replayed = compareStreamIds(info.start, stored) < 0 ? await this.applyRange(info.start, stored) : 0;
    // Gateways trim the stream as they write: if it was trimmed past the snapshot's start while the
    // file loaded, commands were skipped. The engine holds them half applied: start again.
    if (!holdsAfter(await streamBounds(this.cmd, this.keys), info.start)) {
      throw new Error(`${COMPONENT}: ${this.keys.in} was trimmed past the start of snapshot ${path} (${info.start}) while it loaded; a new start rebuilds from Redis`);
    }
    this.lastId = this.committed = stored;
    this.appliedMax = stored;
    this.log?.info(
      { path, subscriptions: info.subscriptions, positions: info.positions, start: info.start, end: info.end, replayed, offset: stored, loadMs: Math.round(loadMs), ms: Math.round(performance.now() - t0) },
      `${COMPONENT}: loaded ${info.subscriptions} subscriptions and ${info.positions} positions from ${path} (taken ${info.start}..${info.end}), applied ${replayed} commands up to the stored offset ${stored}`,
    );
    return replayed;
  }

  /**
   * Applies the subscription changes and location batches after `after` up to `upTo`; their
   * publishes were matched and answered, so they are not matched again, but their fresh events go
   * to the pattern subscriptions, in stream order among the other commands (the matches they
   * release were stored then and are not stored again): the patterns' history is that of a matcher
   * that never stopped. An event is fresh as it was then: unless its id was fresh in an earlier
   * entry of the range, or in the earlier entry its dedupe record names, less than the window
   * before it (by the entries' stream times); with no window, unless repeated in its own entry.
   */
  private async applyRange(after: string, upTo: string): Promise<number> {
    let from = `(${after}`;
    let n = 0;
    const judge = new StreamIdJudge(this.dedupeWindowMs);
    const fed: Promise<unknown>[] = [];
    for (;;) {
      const page = await this.cmd.xrangeBuffer(this.keys.in, from, upTo, 'COUNT', 1000);
      const entries = page.map(([idBuf, fields]) => this.parse(idBuf, fields));
      const pubs = this.core.patterns === null ? [] : entries.filter((e): e is PubEntry => e !== null && e.t === 'pub' && e.events !== null);
      const known = pubs.length === 0 ? new Map<string, { reached: number; entry: string }>() : await this.knownIds(pubs);
      for (const entry of entries) {
        if (entry === null) continue;
        if (entry.t !== 'pub') {
          this.applyState(entry);
          n++;
          continue;
        }
        if (this.core.patterns === null || entry.events === null) continue;
        const plan = judge.plan(entry.id, entry.events, known);
        for (const p of this.feedPatterns(new Map([[entry, plan]])).values()) fed.push(p);
      }
      if (page.length < 1000) break;
      from = `(${page[page.length - 1][0].toString('latin1')}`;
    }
    // As when they were first matched: a publish the patterns refuse is logged and skipped.
    for (const r of await Promise.allSettled(fed)) if (r.status === 'rejected') this.log?.warn({ err: r.reason }, `${COMPONENT}: pattern subscriptions skipped a replayed publish`);
    return n;
  }

  /** A stream entry as a command, or null (logged) when it is not one. */
  private parse(idBuf: Buffer, fields: Buffer[]): InEntry | null {
    const id = idBuf.toString('latin1');
    try {
      return parseInEntry(id, fields);
    } catch (err) {
      this.log?.warn({ err, entry: id }, `${COMPONENT}: command ${id} skipped`);
      return null;
    }
  }

  /** A subscription change or location batch; a bad one is logged and skipped. */
  private applyState(entry: Exclude<InEntry, PubEntry>): void {
    try {
      if (entry.t === 'loc') this.applied += decodeLocations(entry.data, this.move);
      else if (entry.t === 'sub') {
        // Replayed: the patterns hold it (or what came after it) already; a replace would drop the history.
        if (!(this.patternSubsHold(entry.id) && (entry.sub.pattern !== undefined || this.core.isPattern(entry.device, entry.sub.id)))) this.core.put(entry.device, entry.sub, 'upsert');
      } else if (entry.t === 'unsub') {
        if (!(this.patternSubsHold(entry.id) && this.core.isPattern(entry.device, entry.subscriptionId))) this.core.remove(entry.device, entry.subscriptionId);
      } else if (entry.t === 'purge') {
        this.release(entry.device, this.patternSubsHold(entry.id));
        // The leader drops its notifications, after those of the commands before (one flush chain).
        if (this.currentRole === 'leader') {
          this.fanout.drop(entry.device, entry.id);
          this.dropsQueued = true;
        }
      } else if (entry.t === 'rel') {
        for (const d of entry.devices) this.release(d, this.patternSubsHold(entry.id));
        this.handOversOut += entry.devices.length;
      } else {
        for (const a of entry.devices) this.acquire(a, this.patternSubsHold(entry.id));
        this.handOversIn += entry.devices.length;
      }
    } catch (err) {
      this.log?.warn({ err, entry: entry.id }, `${COMPONENT}: command ${entry.id} skipped`);
    }
    if (this.core.patterns !== null && entry.t !== 'loc' && compareStreamIds(entry.id, this.patternSubsAt) > 0) this.patternSubsAt = entry.id;
  }

  /**
   * A device leaves this matcher (its subscriptions and position): handed over or purged.
   * `keepPatterns`: a replayed purge or hand-over, whose pattern subscriptions the patterns
   * dropped already (those held now came after it).
   */
  private release(device: string, keepPatterns = false): void {
    for (const sub of this.core.list(device)) if (!(keepPatterns && sub.pattern !== undefined)) this.core.remove(device, sub.id);
    if (this.deferred.length > 0) this.deferred = this.deferred.filter((d) => d.device !== device);
    this.core.forgetPosition(device);
  }

  /**
   * Sharding by space: a device comes to this shard, whole (what it held here before is replaced).
   * `keepPatterns`: a replayed arrival, whose pattern subscriptions the patterns hold already (with
   * the history since, or what came after them): only the others are put again.
   */
  private acquire(a: Acquired, keepPatterns = false): void {
    this.release(a.device, keepPatterns);
    for (const stored of a.stored) {
      const sub = parsedStored(splitStoredSubscription(stored).json);
      if (keepPatterns && typeof sub !== 'string' && sub.pattern !== undefined) continue;
      putStored(this.core, a.device, sub, this.log, `${COMPONENT}: a handed-over subscription`);
    }
    if (a.lat !== null && a.lon !== null) {
      this.move(a.device, a.lat, a.lon);
      this.applied++;
    }
  }

  /**
   * Sharding by space: this matcher is about to read its stream again from `from` while its
   * devices are those of a later point `upTo` (a standby's engine is at its read position, a
   * failed batch was applied, a rebuild from Redis has the homes of now). A device whose first
   * hand-over entry in (from, upTo] is an `acq` had not arrived at `from`: it is released (the
   * replay brings it back at its `acq`, gated). A device whose first is a `rel` was still here: it
   * is brought back at the position its `rel` names, with its subscriptions as Redis stores them
   * (the replay releases it at its `rel`). So a publish replayed is matched by the shard that held
   * each device at its place in the order.
   */
  private async rewindHandOvers(from: string, upTo: string): Promise<void> {
    if (this.keys.layout.geo === undefined || (upTo !== '+' && compareStreamIds(from, upTo) >= 0)) return;
    // Everything is read first and applied at once: a failed read changes nothing (the caller retries).
    const first = new Map<string, { kind: 'rel' | 'acq'; id: string }>();
    const left = new Map<string, { at: { lat: number; lon: number } | null; to: string; id: string }>();
    let start = `(${from}`;
    for (;;) {
      const page = await this.cmd.xrangeBuffer(this.keys.in, start, upTo, 'COUNT', 1000);
      for (const [idBuf, fields] of page) {
        const kind = fields.length > 1 ? fields[1].toString('latin1') : '';
        if (kind !== 'rel' && kind !== 'acq') continue;
        const entry = this.parse(idBuf, fields);
        if (entry === null || (entry.t !== 'rel' && entry.t !== 'acq')) continue;
        if (entry.t === 'acq') {
          for (const a of entry.devices) if (!first.has(a.device)) first.set(a.device, { kind: 'acq', id: entry.id });
        } else {
          entry.devices.forEach((d, i) => {
            if (first.has(d)) return;
            first.set(d, { kind: 'rel', id: entry.id });
            left.set(d, { at: entry.at[i], to: entry.to[i], id: entry.id });
          });
        }
      }
      if (page.length < 1000) break;
      start = `(${page[page.length - 1][0].toString('latin1')}`;
    }
    // A device that left comes back with the subscriptions it took along: the acq entry the same
    // script wrote to the shard it went to (id q+2 beside the rel's q+1) holds them.
    const took = new Map<string, string[]>();
    const arrivals = new Map<string, Set<string>>(); // "<shard> <acq id>" → devices
    for (const [d, l] of left) {
      if (l.to === '') continue;
      const [ms, q] = l.id.split('-');
      const key = `${l.to} ${ms}-${Number(q) + 1}`;
      let set = arrivals.get(key);
      if (set === undefined) arrivals.set(key, (set = new Set()));
      set.add(d);
    }
    for (const [key, devices] of arrivals) {
      const [shard, id] = key.split(' ');
      const rows = await this.cmd.xrangeBuffer(this.keys.of(Number(shard)).in, id, id);
      for (const [idBuf, fields] of rows) {
        const entry = this.parse(idBuf, fields);
        if (entry?.t === 'acq') for (const a of entry.devices) if (devices.has(a.device)) took.set(a.device, a.stored);
      }
    }
    // Without that entry (trimmed, or a rel of an earlier version): the subscriptions stored now.
    const missing = [...left.keys()].filter((d) => !took.has(d));
    for (let i = 0; i < missing.length; i += 500) {
      const chunk = missing.slice(i, i + 500);
      const p = this.cmd.pipeline();
      for (const d of chunk) p.hvals(this.keys.subs(d));
      const subs = (await p.exec()) ?? [];
      chunk.forEach((d, j) => {
        const [err, stored] = subs[j] ?? [null, []];
        if (err !== null) throw err;
        took.set(d, stored as string[]);
      });
    }
    let released = 0;
    // The patterns keep what they took from the entries they applied (the replay gives them
    // nothing twice): an arrival they saw keeps its patterns, a departure they saw does not bring
    // its patterns back.
    for (const [d, f] of first) {
      if (f.kind !== 'acq') continue;
      this.release(d, this.patternSubsHold(f.id));
      released++;
    }
    for (const [d, l] of left) this.acquire({ device: d, from: '', lat: l.at?.lat ?? null, lon: l.at?.lon ?? null, stored: took.get(d) ?? [] }, this.patternSubsHold(l.id));
    if (released + left.size > 0) this.log?.info({ from, upTo, released, restored: left.size }, `${COMPONENT}: reading again from ${from}: ${released} devices that arrived since released, ${left.size} that left since brought back`);
  }

  /** rewindHandOvers, tried again until it succeeds (a replay must not start from devices half put back). */
  private async rewindUntilDone(from: string, upTo: string): Promise<void> {
    for (;;) {
      try {
        return await this.rewindHandOvers(from, upTo);
      } catch (err) {
        if (this.crashed || this.stopping) throw err;
        this.log?.warn({ err }, `${COMPONENT}: putting devices back before a replay failed; retrying`);
        await sleep(500);
      }
    }
  }

  /** Reads from `id` on; a snapshot being written starts no later than it. */
  private rewind(id: string): void {
    this.lastId = id;
    if (this.snapshotLow !== null && compareStreamIds(id, this.snapshotLow) < 0) this.snapshotLow = id;
  }

  /** What a snapshot of this matcher is of: its stream and the deployment's instance. */
  private get identity(): string {
    return `${this.keys.in} ${this.instance}`;
  }

  /**
   * Writes this matcher's snapshot file now (after the one being written, if any), a block at a
   * time between batches. Resolves to what it holds, or null when it could not be written (logged)
   * or this matcher keeps none.
   */
  async snapshotNow(): Promise<SnapshotInfo | null> {
    const path = this.snapshotPath;
    if (path === null || this.engineClosed) return null;
    const run = this.snapshotChain.then(async () => {
      if (this.engineClosed) return null;
      const t0 = performance.now();
      try {
        await this.cutPatterns();
        const info = await writeSnapshot(path, this.identity, this.snapshotSource(), {
          blockBytes: this.snapshotBlockBytes,
          betweenBlocks: async () => {
            await new Promise<void>((res) => setImmediate(res));
            await this.hooks.snapshotBlock?.();
            // A crash clears the engine's lists: a snapshot of what is left would be wrong.
            if (this.crashed) throw new Error(`${COMPONENT}: crashed while writing the snapshot`);
          },
        });
        const ms = performance.now() - t0;
        this.lastSnapshot = { ...info, ms };
        this.snapshotStart = info.start;
        this.log?.info({ path, subscriptions: info.subscriptions, positions: info.positions, bytes: info.bytes, start: info.start, end: info.end, ms: Math.round(ms) }, `${COMPONENT}: snapshot written to ${path}`);
        return info;
      } catch (err) {
        this.log?.warn({ err, path }, `${COMPONENT}: snapshot not written`);
        return null;
      } finally {
        this.writingStart = null;
      }
    });
    this.snapshotChain = run;
    this.snapshotsPending++;
    try {
      return await run;
    } finally {
      this.snapshotsPending--;
    }
  }

  /**
   * The pattern subscriptions' state for the next snapshot, taken between two batches with no
   * search running, so it is the state of exact stream positions (`patternsFedTo`,
   * `patternSubsAt`); the file's start is at or before them (its replay skips what they hold).
   */
  private async cutPatterns(): Promise<void> {
    const patterns = this.core.patterns;
    if (patterns === null) return;
    for (;;) {
      if (!this.inProcess && patterns.idle) {
        let state: PatternCut;
        try {
          state = this.core.capturePatterns()!;
        } catch (err) {
          // Their engine failed: the snapshot goes without their history (the records hold the patterns).
          this.log?.warn({ err }, `${COMPONENT}: the pattern subscriptions' state is not in this snapshot`);
          return;
        }
        this.patternCut = { start: this.lastId, fedTo: this.patternsFedTo, subsAt: this.patternSubsAt, state };
        // The stream is kept from here on, and the positions written are those of now.
        this.snapshotLow = this.lastId;
        this.cutPositions = this.core.positionCut();
        return;
      }
      if (this.inProcess) await new Promise<void>((resolve) => this.cutWanted.push(resolve));
      else await patterns.snapshot().catch(() => undefined); // waits for the searches left of a failed batch
    }
  }

  /** Whether a command at `id` is already in the patterns' subscriptions (a replayed one). */
  private patternSubsHold(id: string): boolean {
    return this.core.patterns !== null && compareStreamIds(id, this.patternSubsAt) <= 0;
  }

  /** The snapshot this matcher last wrote (with how long it took), or null. */
  get snapshot(): (SnapshotInfo & { ms: number }) | null {
    return this.lastSnapshot;
  }

  /** How the engine was filled at start: from the snapshot or Redis, how long, and commands replayed after a snapshot. */
  get restoredFrom(): { from: 'snapshot' | 'redis'; ms: number; replayed: number } {
    return this.restored;
  }

  private snapshotSource(): SnapshotSource {
    const self = this;
    return {
      engine: this.core.engine.name,
      begin: () => {
        // With patterns, the replay starts where their state was cut, between two batches.
        this.snapshotLow = this.patternCut?.start ?? this.lastId;
      },
      patterns: () => {
        const cut = this.patternCut;
        this.patternCut = null;
        return cut === null ? null : serialize(cut);
      },
      start: () => {
        const low = this.snapshotLow ?? this.lastId;
        this.snapshotLow = null;
        // Kept from here until the file is in place (then as its start).
        this.writingStart = low;
        return low;
      },
      end: () => this.appliedMax,
      subscriptions: () => this.core.byDevice(),
      *positions() {
        const cut = self.cutPositions;
        self.cutPositions = null;
        if (cut !== null) {
          for (let i = 0; i < cut.devices.length; i++) if (cut.devices[i] !== '') yield [cut.devices[i], cut.coords[2 * i], cut.coords[2 * i + 1]];
          return;
        }
        yield* self.core.positions();
      },
    };
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      await this.hooks.beforeRead?.();
      if (this.promotion && !this.crashed) {
        // Writes of an earlier term still in flight settle first: their refusals must not be taken
        // for the new lease's, and their event ids must not count as seen by the new term.
        if (!(await this.settle())) continue;
        try {
          await this.lead();
        } catch (err) {
          if (this.stopping) break;
          this.log?.warn({ err }, `${COMPONENT}: taking the lead failed; retrying`);
          await sleep(200);
          continue;
        }
      }
      let entries: [Buffer, Buffer[]][] | null;
      try {
        entries = await this.blocking.read(this.readCount, this.blockMs, this.lastId);
      } catch (err) {
        if (this.stopping) break;
        this.log?.warn({ err }, `${COMPONENT}: read failed; retrying`);
        await sleep(500);
        continue;
      }
      if (entries === null || entries.length === 0 || this.crashed) {
        // Nothing new: let the batch in flight finish (or fail and be replayed) before blocking again.
        await this.settle();
        if (this.deferred.length > 0 && !this.crashed) await this.applyDeferred(null).catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: deferred subscriptions not checked`));
        continue;
      }
      if (this.keys.layout.geo !== undefined) {
        const gated = await this.gateHandOvers(entries);
        if (gated === null) continue;
        entries = gated;
      }
      if (this.deferred.length > 0) await this.applyDeferred(entries[0][0].toString('latin1'));
      try {
        // Batch N is applied and matched while batch N-1's writes are still in flight; N's
        // offset is written only after N-1's (the chain below), and N+1 waits for N-1.
        const before = this.finishing;
        const finish = await this.process(entries);
        if (finish !== null) {
          const chained = (async () => {
            if (before !== null) await before;
            await finish();
          })();
          chained.catch(() => {}); // observed by settle()
          this.finishing = chained;
        }
        if (before !== null) await before;
      } catch (err) {
        if (!(await this.failed(err))) break;
      }
    }
    // What is in flight stores its effects (or fails and is replayed by the next leader).
    if (this.finishing !== null) await this.finishing.catch(() => {});
  }

  /**
   * Sharding by space: a batch holds at most one hand-over's arrivals (an `acq` entry), as its
   * first entry; what a read brought after it is read again. A leader applies an `acq` entry only
   * when everything before it is stored (its own offset, which a shard waiting on this one reads)
   * and every shard its devices leave has stored its offset at or past their `rel` entry: what that
   * shard owes the devices is stored before this one stores anything for them. Null when the batch
   * before failed (the loop replays it).
   */
  private async gateHandOvers(entries: [Buffer, Buffer[]][]): Promise<[Buffer, Buffer[]][] | null> {
    const isAcq = (fields: Buffer[]) => fields.length > 1 && fields[1].length === 3 && fields[1].toString('latin1') === 'acq';
    let at = -1;
    for (let i = 0; i < entries.length; i++) {
      if (isAcq(entries[i][1])) {
        at = i;
        break;
      }
    }
    if (at < 0) return entries;
    if (at > 0) return entries.slice(0, at);
    let next = 1;
    while (next < entries.length && !isAcq(entries[next][1])) next++;
    const batch = next === entries.length ? entries : entries.slice(0, next);
    if (this.currentRole !== 'leader' || this.crashed) return batch;
    if (!(await this.settle())) return null;
    const entry = this.parse(entries[0][0], entries[0][1]);
    if (entry === null || entry.t !== 'acq') return batch;
    const sources = new Set<number>();
    for (const a of entry.devices) {
      const from = Number(a.from);
      if (a.from !== '' && Number.isInteger(from) && from !== this.keys.partition && from >= 0 && from < this.keys.partitions) sources.add(from);
    }
    if (sources.size === 0) return batch;
    const [ms, q] = entry.id.split('-');
    const released = `${ms}-${Number(q) - 1}`;
    const offsets = [...sources].map((from) => this.keys.of(from).matcherOffset);
    const t0 = Date.now();
    let pause = 1;
    let warned = t0;
    let told = false;
    // A device that holds the most owed windows of other hand-overs is not forced (OWE): it waits.
    let forceable = this.handOverWaitLimitMs > 0;
    const sourceList = [...sources];
    while (!this.stopping && !this.crashed && this.currentRole === 'leader') {
      const stored = await this.cmd.mget(offsets);
      let behind = 0;
      let stuck = 0;
      for (let i = 0; i < sourceList.length; i++) {
        const o = stored[i];
        const was = this.stuckSources.get(sourceList[i]);
        // A shard given up on before that has stored past where it was stuck runs again.
        if (was !== undefined && o !== null && compareStreamIds(o, was) >= 0) this.stuckSources.delete(sourceList[i]);
        if (o !== null && compareStreamIds(o, released) >= 0) continue;
        behind++;
        if (this.stuckSources.has(sourceList[i])) stuck++;
      }
      if (behind === 0) break;
      const waited = Date.now() - t0;
      if (forceable && (waited >= this.handOverWaitLimitMs || stuck === behind)) {
        // What the shards left behind still owe these devices stays theirs to store: each device's
        // state opens a window up to the release entry before this shard stores anything for it.
        const owing = entry.devices.filter((a) => sources.has(Number(a.from))).map((a) => a.device);
        const opened = await this.openOwed(released, owing, offsets);
        if (opened === 'failed') return null;
        if (opened === 'refused') {
          forceable = false;
          this.handOversRefused++;
          this.hooks.onHandOverRefused?.({ entry: entry.id, from: [...sources], waitedMs: waited });
          this.log?.error({ entry: entry.id, from: [...sources] }, `${COMPONENT}: hand-over ${entry.id} is not applied past the wait bound: a device in it holds the most owed windows of earlier ones (${this.maxOwedWindows}); it waits for shards ${[...sources].join(', ')}`);
          continue;
        }
        this.handOversForced++;
        for (let i = 0; i < sourceList.length; i++) {
          const o = stored[i];
          if ((o === null || compareStreamIds(o, released) < 0) && !this.stuckSources.has(sourceList[i])) this.stuckSources.set(sourceList[i], released);
        }
        this.log?.error(
          { entry: entry.id, from: [...sources], waitedMs: waited },
          `${COMPONENT}: hand-over ${entry.id} applied without shards ${[...sources].join(', ')} storing past ${released} (waited ${waited} ms${stuck === behind && waited < this.handOverWaitLimitMs ? ': each was given up on before and has not stored since' : ', the bound'}): their notifications to these devices, once they run again, come after this shard's`,
        );
        this.hooks.onHandOverForced?.({ entry: entry.id, from: [...sources], waitedMs: waited });
        break;
      }
      if (!told) {
        told = true;
        this.hooks.onHandOverWait?.({ entry: entry.id, from: [...sources] });
      }
      if (Date.now() - warned > 5000) {
        warned = Date.now();
        this.log?.warn({ entry: entry.id, from: [...sources], waitedMs: warned - t0 }, `${COMPONENT}: hand-over ${entry.id} waits for shards ${[...sources].join(', ')} to store their offsets past ${released} (is a leader of each running?)`);
      }
      await sleep(pause);
      pause = Math.min(50, pause * 2);
    }
    this.handOverWaitMs += Date.now() - t0;
    return batch;
  }

  /**
   * Opens the owed window (owed-scripts.ts OWE) of each device, a call per device group, fenced by
   * this leader's token: 'refused' where a device holds the most windows of other hand-overs
   * (`maxOwedWindows`; none is opened then in its group: the arrival waits), 'failed' when it could not (the loop reads
   * the batch again).
   */
  private async openOwed(released: string, devices: readonly string[], offsets: string[]): Promise<'opened' | 'refused' | 'failed'> {
    const byGroup = this.byGroup(devices);
    try {
      // Written down before the windows open: a leader that dies before closing them leaves them to
      // the next one (loadOwed). Closing a window that was never opened changes nothing.
      await this.cmd.hset(this.keys.matcherOwed, released, JSON.stringify({ offsets, devices }));
      const r = await Promise.all([...byGroup].map(([g, ds]) => runScript(this.cmd, 'ambitOwe', 4 + ds.length, g.dstate, g.nseq, g.nlast, g.fence, ...ds.map((d) => g.born(d)), released, this.maxOwedWindows, ...ds, this.token)));
      // Windows a refusal left open in other groups close like any (ambitOweClose closes only this release's).
      if (!this.owedOpen.some((o) => o.released === released)) this.owedOpen.push({ released, offsets, byGroup });
      return r.some((n) => Number(n) < 0) ? 'refused' : 'opened';
    } catch (err) {
      this.log?.error({ err: String(err) }, `${COMPONENT}: could not open the owed window of a hand-over applied without waiting longer`);
      return 'failed';
    }
  }

  /** The owed windows an earlier leader of this shard opened and did not close (it closes them as its own). */
  private async loadOwed(): Promise<void> {
    const all = await this.cmd.hgetall(this.keys.matcherOwed);
    this.owedOpen = Object.entries(all).map(([released, json]) => {
      const { offsets, devices } = JSON.parse(json) as { offsets: string[]; devices: string[] };
      return { released, offsets, byGroup: this.byGroup(devices) };
    });
  }

  private byGroup(devices: readonly string[]): Map<GroupKeys, string[]> {
    const byGroup = new Map<GroupKeys, string[]>();
    for (const d of devices) {
      const g = this.keys.groupOf(d);
      let list = byGroup.get(g);
      if (list === undefined) byGroup.set(g, (list = []));
      list.push(d);
    }
    return byGroup;
  }

  /**
   * Closes the owed windows of the hand-overs this shard's leaders applied past the bound whose
   * sources have stored past them (those of a leader that died first included: `loadOwed`).
   */
  private async closeOwed(): Promise<void> {
    if (this.owedOpen.length === 0 || this.currentRole !== 'leader' || this.crashed || this.closingOwed) return;
    // One pass at a time: a stats tick may come while the last one's calls are in flight.
    this.closingOwed = true;
    try {
      for (const o of [...this.owedOpen]) {
        const stored = await this.cmd.mget(o.offsets);
        if (!stored.every((s) => s !== null && compareStreamIds(s, o.released) >= 0)) continue;
        const r = await Promise.all([...o.byGroup].map(([g, ds]) => runScript(this.cmd, 'ambitOweClose', g.dstate, g.fence, o.released, ...ds, this.token)));
        await this.cmd.hdel(this.keys.matcherOwed, o.released);
        this.owedOpen = this.owedOpen.filter((x) => x !== o);
        this.hooks.onOwedClosed?.({ released: o.released, closed: r.reduce((a: number, n) => a + Number(n), 0) });
      }
    } finally {
      this.closingOwed = false;
    }
  }

  /**
   * Whether the stream was trimmed past where this matcher reads (it fell further behind than the
   * gateways' cap keeps): the commands in between were never applied (subscription changes,
   * positions, hand-overs, publishes). Logged as an error once per read position and counted in
   * the stats (`trimmedPastReads`); a restart rebuilds from what Redis stores.
   */
  private async checkTrimmed(): Promise<void> {
    if (!this.readSinceStart || this.stopping) return;
    const at = this.lastId;
    const b = await streamBounds(this.cmd, this.keys);
    if (holdsAfter(b, at) || this.lastId !== at || this.trimmedReported === at) return;
    this.trimmedReported = at;
    this.trimmedPast++;
    this.log?.error(
      { readPosition: at, first: b.first },
      `${COMPONENT}: ${this.keys.in} was trimmed past this matcher's read position ${at}: the commands up to ${b.first ?? b.lastId} were never applied; raise AMBIT_COMMAND_STREAM_MAXLEN (a matcher run by the service rebuilds from Redis now)`,
    );
    this.hooks.onTrimmedPast?.(at);
  }

  /**
   * Says what this matcher still needs of its stream (its read position, and the start of its
   * snapshot file), held for a while if it stops saying so; the leader also trims the stream below
   * what every matcher of the partition (of every shard, sharded by space) and the stored offsets
   * still need (scripts.ts KEEP).
   */
  private async keepStream(final = false): Promise<void> {
    if (this.crashed || (this.stopping && !final)) return;
    const trim = !final && this.currentRole === 'leader' && this.reading;
    const args: (string | number)[] = [this.now === null ? '' : String(this.now()), trim ? '1' : '0', this.stuckReadMs];
    // What a replay may read again: a leader's (or a deposed leader's, batches still in flight)
    // from its last stored offset; a snapshot being written from its start.
    let low = this.lastId;
    if ((this.currentRole === 'leader' || this.finishing !== null) && compareStreamIds(this.committed, low) < 0) low = this.committed;
    for (const x of [this.snapshotLow, this.writingStart]) if (x !== null && compareStreamIds(x, low) < 0) low = x;
    // Before the engine is built the whole stream is kept ('0-0'): a rebuild from Redis reads the
    // stored offset and then every subscription, and must still find every command after that
    // offset; a snapshot loading needs what follows its start.
    const read = this.reading ? low : final ? '' : (this.snapshotStart ?? '0-0');
    args.push(`${this.matcherId}:read`, read, Math.max(30_000, 10 * this.statsMs));
    args.push(`${this.matcherId}:snap`, this.snapshotStart ?? '', this.snapshotHoldMs);
    const keys = (this.keepKeys ??= this.keepKeyList());
    const [below, removed, holder, length] = (await runScript(this.cmd, 'ambitKeep', keys.length, ...keys, ...args)) as [string, number, string?, number?];
    this.streamTrims += removed;
    if (!trim) return;
    this.streamHeldBy = holder ?? '';
    this.streamLength = length ?? 0;
    // Another matcher's record holds a long stream: a standby stuck or far behind (alive, since
    // it renews it) keeps trimming back to the gateways' cap. Said once a minute.
    const mine = this.streamHeldBy.startsWith(`${this.matcherId}:`);
    if (!mine && this.streamHeldBy !== '' && !this.streamHeldBy.endsWith(':offset') && this.streamLength > HELD_WARN_ENTRIES && Date.now() - this.heldWarnedAt > 60_000) {
      this.heldWarnedAt = Date.now();
      this.log?.warn({ heldBy: this.streamHeldBy, below, length: this.streamLength }, `${COMPONENT}: ${this.keys.in} keeps ${this.streamLength} entries because ${this.streamHeldBy} still needs them from ${below}: a matcher stuck or far behind holds trimming back (the gateways' cap, AMBIT_COMMAND_STREAM_MAXLEN, still bounds the stream)`);
    }
    this.hooks.onKeep?.({ below, removed });
  }

  /** KEEP's keys: the keep hash, the stream, then the offsets (and streams) that hold it, this partition's first. */
  private keepKeyList(): string[] {
    const keys = [this.keys.matcherKeep, this.keys.in, this.keys.matcherOffset, this.keys.in];
    if (this.keys.layout.geo !== undefined) for (let k = 0; k < this.keys.partitions; k++) if (k !== this.keys.partition) keys.push(this.keys.of(k).matcherOffset, this.keys.of(k).in);
    return keys;
  }

  /** Waits for the batch in flight; false when it failed (handled) or the matcher crashed. */
  private async settle(): Promise<boolean> {
    const f = this.finishing;
    if (f === null) return true;
    try {
      await f;
      if (this.finishing === f) this.finishing = null;
      return true;
    } catch (err) {
      await this.failed(err);
      return false;
    }
  }

  /**
   * A batch failed: the batches in flight settle (a batch after a failed one stores no
   * notification: its flush fails without sending), then the stream is read again from the stored
   * offset (fenced: this matcher stands down first). False when crashed.
   */
  private async failed(err: unknown): Promise<boolean> {
    if (this.finishing !== null) await this.finishing.catch(() => {});
    this.finishing = null;
    this.inBatch.clear();
    // The batch after the failed one sent nothing (the fan-out's flushes are chained); the replay does.
    this.fanout.resetChain();
    if (this.crashed) return false;
    if (isFenced(err)) {
      this.fenced++;
      this.lease.lose(`a write was refused: ${err instanceof Error ? err.message : String(err)}`);
      await this.rewindUntilDone(this.committed, this.lastId).catch(() => {});
      this.rewind(this.committed);
      return true;
    }
    this.log?.error({ err }, `${COMPONENT}: batch failed; replaying it from ${this.committed}`);
    await this.rewindUntilDone(this.committed, this.lastId).catch(() => {});
    this.rewind(this.committed);
    await sleep(1000);
    return true;
  }

  /**
   * Applies one read batch in stream order; consecutive publishes are matched as one engine batch,
   * and their notifications and answers are sent at once. Returns what finishes the batch (waits
   * for those writes, then stores the offset), or null for a standby, which applies everything but
   * the publishes (it gives them only to the pattern subscriptions) and stores nothing. The next
   * read starts after the batch either way.
   */
  private async process(entries: [Buffer, Buffer[]][]): Promise<(() => Promise<void>) | null> {
    this.inProcess = true;
    try {
      return await this.processEntries(entries);
    } finally {
      this.inProcess = false;
      const waiting = this.cutWanted;
      this.cutWanted = [];
      for (const w of waiting) w();
    }
  }

  private async processEntries(entries: [Buffer, Buffer[]][]): Promise<(() => Promise<void>) | null> {
    const leading = this.currentRole === 'leader';
    const batch = ++this.batchSeq;
    const last = entries[entries.length - 1][0].toString('latin1');
    if (compareStreamIds(last, this.appliedMax) > 0) this.appliedMax = last;
    const t0 = performance.now();
    const applied0 = this.applied;
    const flights: Promise<void>[] = [];
    let pubs: PubEntry[] = [];
    let publishes = 0;
    const parsed = entries.map(([idBuf, fields]) => this.parse(idBuf, fields));
    // A standby gives the patterns every publish too, in stream order among the other commands,
    // so that their history is there when it takes over (it stores nothing of what they release).
    // (With no pattern subscription no event can count yet: the dedupe records are not read.)
    const following = !leading && this.core.patterns !== null;
    const known = !following ? null : this.core.patternOwners === 0 ? NONE_KNOWN : await this.knownIds(parsed.filter((e): e is PubEntry => e !== null && e.t === 'pub' && compareStreamIds(e.id, this.patternsFedTo) > 0));
    for (const entry of parsed) {
      if (entry === null) continue;
      if (entry.t === 'pub') {
        if (leading) {
          pubs.push(entry);
          publishes++;
        } else if (known !== null) this.followPatterns(entry, known);
        continue;
      }
      if (pubs.length > 0) {
        flights.push((await this.matchPubs(pubs, batch)).done);
        pubs = [];
      }
      this.applyState(entry);
    }
    if (pubs.length > 0) flights.push((await this.matchPubs(pubs, batch)).done);
    if (this.dropsQueued) {
      // Purges after the batch's last publish: their drops go out before the offset moves past them.
      this.dropsQueued = false;
      if (leading) flights.push(this.fanout.flush());
    }
    const applyMs = performance.now() - t0;
    this.lastId = last;
    this.readSinceStart = true;
    if (this.deferred.length > 0) this.dropDeferred(last);
    if (!leading) {
      this.hooks.onBatch?.({ entries: entries.length, locations: this.applied - applied0, ms: applyMs });
      return null;
    }
    const applied = this.applied - applied0;
    this.hooks.onMatched?.({ last, publishes });
    return async () => {
      await Promise.all(flights);
      if (this.crashed) throw new Error(`${COMPONENT}: crashed`);
      await this.hooks.afterDeliver?.();
      if (this.crashed) throw new Error(`${COMPONENT}: crashed`);
      await runScript(this.cmd, 'ambitCommit', this.keys.matcherOffset, this.keys.matcherEpoch, this.token, last);
      this.committed = last;
      for (const id of this.patternReleased.keys()) if (compareStreamIds(id, last) <= 0) this.patternReleased.delete(id);
      // Its fresh ids are in Redis now (answered before the offset): lookups find them there.
      for (const [id, v] of this.inBatch) if (v.batch <= batch) this.inBatch.delete(id);
      this.hooks.onBatch?.({ entries: entries.length, locations: applied, ms: applyMs });
    };
  }

  /**
   * The hot path of a loc batch: positions were range-checked by the gateway; a bad one, or a
   * device id the engine refuses, is skipped and counted. The core keeps the position in its
   * device table and moves the engine's handle (and the patterns, where the device owns some).
   */
  private readonly move = (device: string, lat: number, lon: number): void => {
    if (!inRange(lat, lon)) {
      this.invalid++;
      return;
    }
    try {
      this.core.move(device, lat, lon);
    } catch {
      this.invalid++; // a device id the engine refuses
    }
  };

  /**
   * Matches publishes (the engine is awaited, so later commands see the state it matched) and
   * queues their notifications; the returned `done` settles once they are stored and the
   * publishers answered. One bad event fails only its own publish. An event whose id was matched
   * within the dedupe window (by another entry: a replay of the same entry is not a duplicate), or
   * earlier in this read batch, is a duplicate: not matched, answered with the first one's reach.
   */
  private async matchPubs(pubs: PubEntry[], batch: number): Promise<{ done: Promise<void> }> {
    const known = await this.knownIds(pubs);
    let settleFlat!: (r: readonly number[]) => void;
    const flatDone = new Promise<readonly number[]>((resolve) => (settleFlat = resolve));
    const plans = new Map<PubEntry, PublishPlan>();
    const all: Event[] = [];
    for (const p of pubs) {
      if (p.events === null) continue;
      const plan = planPublish(p.events, (id) => {
        const kn = known.get(id);
        if (kn !== undefined && kn.entry !== p.id) return kn.reached;
        return this.inBatch.get(id)?.reach;
      });
      for (const e of plan.fresh) {
        const at = all.length;
        all.push(e);
        if (this.dedupeWindowMs > 0) this.inBatch.set(e.id, { reach: flatDone.then((r) => r[at]), batch });
      }
      plans.set(p, plan);
    }
    const patterned = this.feedPatterns(plans);
    const results = new Map<PubEntry, Recipient[][]>();
    try {
      const flat = all.length === 0 ? [] : await this.core.match(all);
      let i = 0;
      for (const [p, plan] of plans) {
        results.set(p, flat.slice(i, i + plan.fresh.length));
        i += plan.fresh.length;
      }
    } catch {
      for (const [p, plan] of plans) {
        try {
          results.set(p, await this.core.match(plan.fresh));
        } catch (err) {
          p.error = errorReply(err);
          this.log?.warn({ err, entry: p.id }, `${COMPONENT}: publish ${p.id} refused by the engine`);
        }
      }
    }
    const k = this.keys;
    const flatReached: number[] = [];
    const fresh: { id: string; value: string }[] = [];
    let events = 0;
    let duplicates = 0;
    const answers: { p: PubEntry; plan: PublishPlan | undefined; freshReached: number[] }[] = [];
    for (const p of pubs) {
      const plan = plans.get(p);
      const matched = results.get(p);
      if (plan === undefined || matched === undefined || p.events === null) {
        if (plan !== undefined) for (let j = 0; j < plan.fresh.length; j++) flatReached.push(0);
        answers.push({ p, plan: undefined, freshReached: [] });
        // What the patterns released at this entry (its clock) is stored all the same.
        await this.deliverPatterns(p, patterned.get(p));
        continue;
      }
      // Duplicates keep their place with no recipients: the replay marker counts events by index.
      const recipients = plan.slots === null ? matched : plan.slots.map((s) => ('fresh' in s ? matched[s.fresh] : []));
      const reached = this.fanout.deliver({ id: p.id, ms: this.now === null ? streamIdMs(p.id) : this.now(), index: p.idx }, p.events, recipients);
      await this.deliverPatterns(p, patterned.get(p));
      const freshReached = plan.slots === null ? reached : freshOnly(plan.slots, reached);
      for (let j = 0; j < plan.fresh.length; j++) {
        flatReached.push(freshReached[j]);
        fresh.push({ id: plan.fresh[j].id, value: `${freshReached[j]} ${p.id}` });
      }
      if (p.own === undefined) {
        events += plan.fresh.length;
        duplicates += p.events.length - plan.fresh.length;
      } else {
        // Sharding by space: this shard counts only the events it owns (each is counted once).
        for (const j of p.own) {
          const slot = plan.slots === null ? null : plan.slots[j];
          if (slot === null || 'fresh' in slot) events++;
          else duplicates++;
        }
      }
      answers.push({ p, plan, freshReached });
    }
    settleFlat(flatReached);
    const replies: string[] = [];
    // Sharding by space: a publish is answered by every shard it visits, each naming itself.
    const shard = k.layout.geo === undefined ? {} : { s: k.partition };
    for (const { p, plan, freshReached } of answers) {
      if (plan === undefined) {
        replies.push(k.reply(p.gw), encodeReply({ c: p.corr, ...shard, error: p.error }));
        continue;
      }
      const settled = await settlePublish(plan, freshReached);
      const d: number[] = [];
      for (let j = 0; j < settled.length; j++) if (settled[j].duplicate) d.push(j);
      replies.push(k.reply(p.gw), encodeReply(d.length === 0 ? { c: p.corr, ...shard, r: settled.map((x) => x.reached) } : { c: p.corr, ...shard, r: settled.map((x) => x.reached), d }));
    }
    this.eventsMatched += events;
    this.duplicates += duplicates;
    // Sharded by space each shard adds its reach of the fresh events to their records, which the
    // publish script made (it deduplicates for all shards), naming the publish ("<reach> <entry>"):
    // a record made since by a later publish of the id (the first one's lapsed) is not added to.
    const geo = k.layout.geo !== undefined;
    const remembered = geo ? fresh.map((f) => ({ key: k.geoEventId(f.id), value: f.value })) : this.dedupeWindowMs > 0 ? fresh.map((f) => ({ key: k.eventId(f.id), value: f.value })) : [];
    const window = geo ? `geo:s${k.partition}` : String(this.dedupeWindowMs);
    const stored = this.fanout.flush();
    const done = (async () => {
      await stored;
      // Counted before the replies, so a publisher's stats() after its publish includes it.
      await runScript(
        this.cmd,
        k.layout.cluster ? 'ambitAnswerSharded' : 'ambitAnswer',
        2 + remembered.length,
        k.stats,
        k.matcherEpoch,
        ...remembered.map((f) => f.key),
        this.token,
        events,
        duplicates,
        window,
        ...remembered.map((f) => f.value),
        ...replies,
      );
    })();
    done.catch(() => {}); // awaited by process(); this keeps an early failure from being reported as unhandled
    return { done };
  }

  /**
   * Standing by: gives a publish the leader matched (or will) to the patterns, its events judged
   * fresh as the leader judged them (`StreamIdJudge`, by the dedupe records and stream times);
   * what it releases is kept for the entries the leader has not stored yet and stored only if this
   * matcher leads before it has.
   */
  private followPatterns(entry: PubEntry, known: ReadonlyMap<string, { entry: string }>): void {
    if (entry.events === null || compareStreamIds(entry.id, this.patternsFedTo) <= 0) return;
    this.standbyJudge ??= new StreamIdJudge(this.dedupeWindowMs);
    this.feedPatterns(new Map([[entry, this.standbyJudge.plan(entry.id, entry.events, known)]]));
  }

  /** Standing by: forgets what the patterns released for entries the leader has stored past. */
  private async pruneFollowed(): Promise<void> {
    if (this.currentRole === 'leader' || this.patternReleased.size === 0) return;
    const stored = await this.cmd.get(this.keys.matcherOffset);
    if (stored === null || (this.currentRole as MatcherRole) === 'leader') return;
    for (const id of this.patternReleased.keys()) if (compareStreamIds(id, stored) <= 0) this.patternReleased.delete(id);
  }

  /**
   * Hands the fresh events of publishes to the pattern subscriptions, entry by entry in stream
   * order, before their match is awaited (E3): an event without its own time takes the time Redis
   * accepted its entry, the same on every replay. With a lateness bound each entry also moves the
   * patterns' clock to that time. Each entry's promise gives the matches it released.
   */
  private feedPatterns(plans: ReadonlyMap<PubEntry, PublishPlan>): Map<PubEntry, Promise<PatternDelivery[]>> {
    const out = new Map<PubEntry, Promise<PatternDelivery[]>>();
    if (this.core.patterns === null) return out;
    for (const [p, plan] of plans) {
      // Given before (a replayed batch): what it released then is stored again (once, by the marker).
      if (compareStreamIds(p.id, this.patternsFedTo) <= 0) {
        out.set(p, this.patternReleased.get(p.id) ?? Promise.resolve([]));
        continue;
      }
      this.patternsFedTo = p.id;
      const ms = streamIdMs(p.id);
      const released: Promise<PatternDelivery[]>[] = [];
      try {
        if (this.patternsLatenessMs > 0) released.push(this.core.advancePatterns(ms)!);
        if (plan.fresh.length > 0) released.push(this.core.publishPatterns(plan.fresh, ms)!);
      } catch (err) {
        // Refused whole (an event the patterns' engine does not take): nothing of it changed.
        released.push(Promise.reject(err));
      }
      const got = Promise.all(released).then((ds) => ds.flat());
      got.catch(() => {}); // awaited by the caller
      out.set(p, got);
      // Until its batch is committed: a replay stores what it released again (even if this one
      // failed before storing it).
      this.patternReleased.set(p.id, got);
    }
    return out;
  }

  /**
   * Stores the pattern matches an entry released, right after its own notifications: each as the
   * entry's event number `events.length + k` (past its events'), so the deliver script's marker
   * per device keeps them in order and a replay of the entry stores each once.
   */
  private async deliverPatterns(p: PubEntry, released: Promise<PatternDelivery[]> | undefined): Promise<void> {
    if (released === undefined) return;
    let ds: PatternDelivery[];
    try {
      ds = await released;
    } catch (err) {
      // An event the patterns refused whole (logged and skipped, as a command the engine refuses),
      // or their element engine failed (the next publishes fail too, and say so).
      this.log?.warn({ err, entry: p.id }, `${COMPONENT}: pattern subscriptions skipped publish ${p.id}`);
      return;
    }
    if (ds.length === 0) return;
    // Numbered per device, past the entry's events: the deliver script's marker is per device,
    // so a device's matches keep their numbers whatever other devices' matches do.
    const base = p.events?.length ?? 0;
    const perDevice = new Map<string, number>();
    const index = ds.map((d) => {
      const k = perDevice.get(d.recipient.device) ?? 0;
      perDevice.set(d.recipient.device, k + 1);
      return base + k;
    });
    this.fanout.deliver({ id: p.id, ms: this.now === null ? streamIdMs(p.id) : this.now(), index }, ds.map((d) => d.event), ds.map((d) => [d.recipient]));
    this.patternMatches += ds.length;
  }

  /** The ids of these publishes' events matched within the dedupe window: reach and in-entry id. */
  private async knownIds(pubs: readonly PubEntry[]): Promise<Map<string, { reached: number; entry: string }>> {
    const known = new Map<string, { reached: number; entry: string }>();
    if (this.dedupeWindowMs === 0) return known;
    const ids = new Set<string>();
    for (const p of pubs) if (p.events !== null) for (const e of p.events) if (typeof e.id === 'string') ids.add(e.id);
    if (ids.size === 0) return known;
    const list = [...ids];
    const values = await this.cmd.mget(list.map((id) => this.keys.eventId(id)));
    for (let i = 0; i < list.length; i++) {
      const v = values[i];
      if (v === null) continue;
      const sp = v.indexOf(' ');
      const reached = Number(v.slice(0, sp));
      if (sp > 0 && Number.isFinite(reached)) known.set(list[i], { reached, entry: v.slice(sp + 1) });
    }
    return known;
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
      devices: this.core.deviceCount,
      memoryBytes: s.memoryBytes,
      offset: this.committed,
      locationsApplied: this.applied,
      epoch: this.epoch,
      extra: {
        ...(s.extra ?? {}),
        eventsMatched: this.eventsMatched,
        locationsApplied: this.applied,
        invalidUpdates: this.invalid,
        fencedWrites: this.fenced,
        duplicateEvents: this.duplicates,
        restoredFrom: this.restored.from,
        restoreMs: Math.round(this.restored.ms),
        trimmedPastReads: this.trimmedPast,
        streamTrims: this.streamTrims,
        streamLength: this.streamLength,
        streamHeldBy: this.streamHeldBy,
        ...(this.keys.layout.geo === undefined ? {} : { handOverWaitMs: this.handOverWaitMs, handOversForced: this.handOversForced, handOversRefused: this.handOversRefused, handOversIn: this.handOversIn, handOversOut: this.handOversOut }),
        ...(this.lastSnapshot === null ? {} : { snapshotAt: this.lastSnapshot.createdAt, snapshotBytes: this.lastSnapshot.bytes, snapshotMs: Math.round(this.lastSnapshot.ms) }),
        ...this.core.patternStats(this.patternMatches),
      },
    };
    // Fenced: a leader whose lease lapsed while it paused does not hide the new leader's record.
    const wrote = await runScript(this.cmd, 'ambitStats', this.keys.matcherStats, this.keys.matcherEpoch, this.token, JSON.stringify(record), this.statsMs * 3);
    if (wrote !== 1) return;
    this.hooks.onStatsWritten?.(record);
  }

  /** Sharding by space: devices this matcher's engine took over from other shards, and handed to them, since start. */
  get handOvers(): { in: number; out: number } {
    return { in: this.handOversIn, out: this.handOversOut };
  }

  /** Leading: what holds its stream's trimming (a keep record's field, or an offset key) and the stream's length, as last seen. */
  get streamHold(): { heldBy: string; length: number } {
    return { heldBy: this.streamHeldBy, length: this.streamLength };
  }

  /** Entries this matcher, leading, trimmed from its stream below what every matcher still needs. */
  get streamTrimmed(): number {
    return this.streamTrims;
  }

  /** Events matched since start. */
  get eventsMatchedCount(): number {
    return this.eventsMatched;
  }

  /** Devices with a position in the engine. */
  get devices(): number {
    return this.core.deviceCount;
  }

  private engineClosed = false;

  private async closeEngine(): Promise<void> {
    this.engineClosed = true;
    await this.core.close();
  }

  /** Finishes the current batch (its offset written), then closes the engine and connections. */
  stop(): Promise<void> {
    return (this.ended ??= this.shutdown());
  }

  /**
   * Stops as `stop()` does, for a rebuild from Redis (`RebuildingMatcher`): its state is not the
   * stream's (commands it never applied), so no snapshot is written and the file on disk is
   * removed, and the next start rebuilds from Redis.
   */
  stopForRebuild(): Promise<void> {
    this.discardSnapshot = true;
    return this.stop();
  }

  private async shutdown(): Promise<void> {
    this.stopping = true;
    if (this.statsTimer !== null) clearInterval(this.statsTimer);
    void this.lease.stop(false);
    // Wake the blocked XREAD; repeated because it may reach Redis before the XREAD it should end.
    // With Redis unreachable neither the UNBLOCK nor the XREAD ever answers: after a bounded
    // wait the blocking connection is dropped, which rejects the XREAD and ends the loop (the
    // batch in progress, if any, was already stored or will be replayed from the offset).
    let exited = false;
    void this.loopDone.then(() => (exited = true));
    const giveUp = Date.now() + 3000;
    while (!exited) {
      if (Date.now() > giveUp || !this.blocking.ready) {
        this.blocking.disconnect();
        await Promise.race([this.loopDone, sleep(1000)]);
        break;
      }
      await Promise.race([this.blocking.wake().catch(() => {}), sleep(200)]);
      await Promise.race([this.loopDone, sleep(50)]);
    }
    if (this.snapshotTimer !== null) clearInterval(this.snapshotTimer);
    const reachable = this.cmd.status === 'ready';
    if (reachable && this.currentRole === 'leader') {
      // The stats key goes first: a standby taking the lease writes its own.
      await Promise.race([this.cmd.del(this.keys.matcherStats).catch(() => {}), sleep(1000)]);
      // Hand over at once instead of after the lease's TTL.
      await Promise.race([this.lease.stop(true).catch(() => {}), sleep(1000)]);
    }
    // Nothing is applied any more: this snapshot is exact at its position. Written after the
    // hand-over, which it does not need. For a rebuild, the file goes instead (one being
    // written finishes first).
    if (this.snapshotPath !== null && this.discardSnapshot) {
      await this.snapshotChain.catch(() => {});
      rmSync(this.snapshotPath, { force: true });
      this.snapshotStart = null;
    } else if (this.snapshotPath !== null) await this.snapshotNow();
    // The read position is no longer needed; the snapshot's start is, for the restart.
    this.reading = false;
    if (reachable) await Promise.race([this.keepStream(true).catch((err: unknown) => this.log?.warn({ err }, `${COMPONENT}: the command stream's keep not written`)), sleep(1000)]);
    await this.closeEngine();
    if (reachable) await Promise.race([this.presence?.leave(), sleep(1000)]);
    else void this.presence?.leave(false);
    if (reachable) await Promise.race([Promise.all([closeConnection(this.cmd), this.blocking.close()]), sleep(2000)]);
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
    if (this.snapshotTimer !== null) clearInterval(this.snapshotTimer);
    void this.lease.stop(false);
    void this.presence?.leave(false);
    this.cmd.disconnect();
    this.blocking.disconnect();
    return (this.ended = this.loopDone.then(() => this.closeEngine()));
  }
}

// ---- helpers ----

/** The snapshot file of a matcher partition: its stream's name, made safe for a file name. */
export function snapshotFileName(keys: Keys): string {
  return `${keys.in.replace(/[^A-Za-z0-9._-]/g, '_')}.snapshot`;
}

function partitionOption(o: RedisMatcherOptions): number {
  const k = o.geo !== undefined && typeof o.geo === 'object' && o.geo !== null ? o.geo.shards + o.geo.wide : (o.partitions ?? 1);
  const v = o.partition ?? 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= k) throw new Error(`${COMPONENT}: partition must be an integer in [0, ${k - 1}], got ${JSON.stringify(v)}`);
  return v;
}

function errorReply(err: unknown): { code: ErrorCode; message: string } {
  if (err instanceof AmbitError) return { code: err.code, message: err.message };
  return { code: 'UNAVAILABLE', message: `${COMPONENT}: ${err instanceof Error ? err.message : String(err)}` };
}

/** The reach of a plan's fresh events, from the reach of all its events. */
function freshOnly(slots: readonly PublishSlot[], reached: readonly number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < slots.length; i++) if ('fresh' in slots[i]) out.push(reached[i]);
  return out;
}

/** A write Redis refused because this matcher's lease token is no longer the newest. */
/** A stored subscription's JSON parsed once, or the JSON itself where it does not parse (putStored reports it). */
function parsedStored(json: string): DeviceSubscription | string {
  try {
    return JSON.parse(json) as DeviceSubscription;
  } catch {
    return json;
  }
}

function isFenced(err: unknown): boolean {
  return err instanceof Error && err.message.includes('FENCED');
}
