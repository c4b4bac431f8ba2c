/**
 * Every Redis key and channel Ambit uses, in one place. All of them start with the deployment's
 * prefix so several deployments can share one Redis.
 *
 * Two layouts. On a plain Redis (`single`) the names are as below. On a Redis Cluster (`cluster`)
 * every Lua script must touch one hash slot, so each name carries a hash tag after the prefix:
 * the matcher's keys (its command stream and everything a script writes beside it) share the tag
 * `{m0}`, and each device's notification keys share the tag of its device group `{d<g>}`, so the
 * notification streams, delivery states and doorbells spread over the cluster's slots by device.
 * With matcher partitions (devices split over K matchers, each with its own stream and state),
 * partition k's matcher keys are `{p}p<k>:…` on a plain Redis and carry the tag `{m<k>}` on a
 * cluster; the device groups are shared, and each group has a fence per partition.
 *
 *   matcher scope (cluster tag {m0})
 *   {p}subs:{device}    HASH  subscription id → "<in-entry id> <DeviceSubscription JSON>"
 *   {p}subdevs          SET   devices with at least one subscription (the matcher's snapshot list)
 *   {p}pos              HASH  device → 16 bytes: lat, lon as float64 LE
 *   {p}seen             ZSET  device → when a gateway last saw it (ms; expiry purges the oldest)
 *   {p}revoked          HASH  "id:<token id>" | "sub:<subject>" → "<kept until s> <issued up to s | ->"
 *   {p}revocations      CHANNEL "changed" when revocations are added (cluster: a shard channel)
 *   {p}in               STREAM every gateway → matcher command, in one total order
 *   {p}stats            HASH  events, duplicates, locations (single: notifications and dropped too)
 *   {p}config           HASH  the matcher's retention (maxPerDevice, maxAgeMs)
 *   {p}layout           STRING the layout (kind, device groups, matcher partitions), checked by every process;
 *                             one key per deployment, outside the matcher scope
 *   {p}matcher:offset   STRING last `in` entry whose effects are stored
 *   {p}matcher:stats    STRING the matcher's engine figures as JSON; its TTL is the liveness signal
 *   {p}matcher:lease    STRING "<token> <matcher id>" of the leader, with a TTL (lease.ts)
 *   {p}matcher:epoch    STRING the newest leader's token (INCR)
 *   {p}matcher:instance STRING a random id set by the first matcher (NX): a matcher's snapshot file
 *                             (services/matcher/snapshot.ts) names it, so a snapshot of a stream that
 *                             was deleted or flushed since is refused
 *   {p}eid:{event id}   STRING "<reached> <in-entry id>" of a matched event, for the dedupe window (PX)
 *   {p}ev:{entry}:{i}   STRING the JSON of the i-th event of in-entry {entry}, stored once for all its
 *                             recipients' notifications (which name it), for twice the max age (PX)
 *   {p}reply:{gateway}  CHANNEL publish replies for one gateway (cluster: a shard channel)
 *
 *   sharded by space (layout.geo): shard k's stream, stats, offset, lease, epoch, instance and
 *   homed devices ({base}subdevs) are {p}s<k>:… ({p}{g}s<k>:… on a cluster); a device's
 *   subscriptions, its position, stored events and reply channels are shared by all shards, and
 *   beside them (all in the slot of {g} on a cluster):
 *   {p}meta:{device}    HASH  subscription id → "<largest anchored radius> a|w" (w: a fixed area or none)
 *   {p}home             HASH  device → the shard it lives on
 *   {p}unhomed          SET   devices with subscriptions and no home yet (no position): listings
 *   {p}wide             HASH  device → how many of its subscriptions are wide
 *   {p}reach            HASH  geographic shard → the largest anchored radius it ever held; wide shard
 *                             → 'w' once it held a device; 'v' → the hash's version
 *   {p}seq              STRING the last command id given ("<ms>-<q>"), for every shard's stream
 *   {p}map              STRING the shard map's moved cells (JSON: version, cells, and while a move
 *                             is under way the map before it); the reach hash holds its version
 *                             ('map') and 'moving'
 *   {p}stats            HASH  published, locations (single: shared with the device group's)
 *
 *   device-group scope (cluster tag {d<g>}; single: one group whose keys are the names above)
 *   {p}n:{device}       STREAM the device's notifications, ids "<ms>-<ordinal>"
 *   {p}dstate           HASH  device → its delivery state, 56 bytes (lua-parts.ts STATE: last id, length,
 *                             TTL time, the (in-entry, event index) marker of its last notification;
 *                             120 bytes with an owed window, sharded by space: owed-scripts.ts OWE)
 *   {p}nseq, {p}nlast   HASH  the same for devices notified by versions before {p}dstate (read only)
 *   {p}acked            HASH  device → last acknowledged delivery id
 *   {p}born:{device}    STRING the id of the device's last purge command, for 90 days (its inbox's
 *                             state id is "<instance>.<born>" after a purge, "<instance>" before)
 *   {p}stats            HASH  notifications, dropped (the group's own in a cluster)
 *   {p}config           HASH  a copy of the matcher's retention, written by the leader (cluster)
 *   {p}fence            STRING the newest leader's token, raised by a new leader before it writes
 *                             (cluster; single: the epoch key itself)
 *   {p}wake:{device}    CHANNEL each notification stored for the device, whole (scripts.ts;
 *                             cluster: a shard channel)
 */

import { devicePart } from '../hub/port.js';

/**
 * Where a deployment's keys live: a plain Redis, or a Redis Cluster with `groups` device groups;
 * and how many matcher partitions split its devices (each with its own command stream, matchers,
 * lease and state: `partitions` > 1 names the matcher keys `{p}p<k>:…`, on a cluster `{p}{m<k>}…`).
 */
export interface Layout {
  cluster: boolean;
  /** Device groups (cluster only; 1 on a plain Redis). */
  groups: number;
  /** Matcher partitions (default 1); with `geo`, its shards + wide shards. */
  partitions?: number;
  /** Sharding by space (geo.ts): the partitions are geographic shards and wide shards. */
  geo?: GeoSpec;
}

/**
 * A deployment sharded by space: `shards` geographic shards (0 … shards−1) on the shard map of
 * `cellDeg`, `guardM` and `layout` (services/matcher/shard-map.ts), and `wide` shards
 * (shards … shards+wide−1) for the devices that hold a subscription with a fixed or no area, split
 * by device id. Every stream and state key of all of them, and the devices' subscriptions,
 * positions and homes, share one hash slot (tag `{g}`), so one script orders a publish or a
 * hand-over across shards; notifications stay in the device groups.
 */
export interface GeoSpec {
  shards: number;
  wide: number;
  cellDeg: number;
  guardM: number;
  layout: 'sectors' | 'stripes';
}

export const SINGLE: Layout = { cluster: false, groups: 1 };
export const MAX_MATCHER_PARTITIONS = 256;
/** Device groups of a cluster deployment unless configured: enough to spread over 64 masters. */
export const DEFAULT_CLUSTER_GROUPS = 64;
export const MAX_CLUSTER_GROUPS = 4096;

/** The keys of one device group: a device's notifications and delivery state. */
export class GroupKeys {
  readonly dstate: string;
  readonly nseq: string;
  readonly nlast: string;
  readonly acked: string;
  readonly stats: string;
  readonly config: string;
  readonly fence: string;
  readonly wakePrefix: string;
  private readonly notesPrefix: string;

  constructor(
    readonly index: number,
    base: string,
    fence: string,
  ) {
    this.dstate = `${base}dstate`;
    this.nseq = `${base}nseq`;
    this.nlast = `${base}nlast`;
    this.acked = `${base}acked`;
    this.stats = `${base}stats`;
    this.config = `${base}config`;
    this.fence = fence;
    this.wakePrefix = `${base}wake:`;
    this.notesPrefix = `${base}n:`;
  }

  notes(device: string): string {
    return this.notesPrefix + device;
  }

  /** The id of the device's last purge command (part of the state id its inbox reports). */
  born(device: string): string {
    return `${this.notesPrefix.slice(0, -2)}born:${device}`;
  }

  wake(device: string): string {
    return this.wakePrefix + device;
  }
}

export class Keys {
  readonly subDevices: string;
  readonly pos: string;
  /** Device → when a gateway last saw it (ms): a sorted set, beside the device's subscriptions. */
  readonly seen: string;
  /** Revoked tokens: "id:<token id>" | "sub:<subject>" → "<until s> <issued up to s | ->" (partition 0's in a partitioned deployment). */
  readonly revoked: string;
  /** The channel that tells gateways the revocations changed. */
  readonly revocations: string;
  readonly in: string;
  readonly stats: string;
  readonly config: string;
  readonly layoutKey: string;
  /** Every live gateway and matcher of the deployment and the protocol it speaks (presence.ts). */
  readonly procs: string;
  readonly matcherOffset: string;
  readonly matcherStats: string;
  readonly matcherLease: string;
  readonly matcherEpoch: string;
  readonly matcherInstance: string;
  /**
   * What each matcher of the partition still needs of `in`: field "<matcher id>:read" (its read
   * position) or ":snap" (its snapshot file's start) → "<stream id> <Redis ms it is held until>".
   */
  readonly matcherKeep: string;
  /** Owed windows this shard's leaders opened and have not closed yet (sharded by space): released id → JSON {offsets, devices}. */
  readonly matcherOwed: string;
  /** Every device group; one on a plain Redis. */
  readonly groups: readonly GroupKeys[];
  private readonly base: string;

  /** The matcher partition these keys are of (0 of 1 unless partitioned). */
  readonly partition: number;
  readonly partitions: number;
  /**
   * Where the keys every partition shares live (a device's subscriptions and position, stored
   * events, reply channels): the partition's own base, except with sharding by space.
   */
  readonly shared: string;
  /** Sharding by space: shard k's keys are `${shardPrefix}${k}:…`; '' otherwise. */
  readonly shardPrefix: string;
  /** Sharding by space (shared by all shards; '' otherwise): the device → home shard hash, … */
  readonly home: string;
  /** … device → how many of its subscriptions have a fixed or no area, … */
  readonly wide: string;
  /** … shard → the largest anchored radius it ever held, and 'v', the version of that hash, … */
  readonly reach: string;
  /** … the last command id given ("<ms>-<seq>"): every shard's stream takes its ids from it, … */
  readonly seq: string;
  /** … counters of the whole deployment (published events, location updates), … */
  readonly geoStats: string;
  /** … and the shard map's moved cells (JSON, services/hub/geo-router.ts `StoredMap`; absent: none). */
  readonly map: string;

  /** A rate limit's shared token bucket (services/edge/rate-limits.ts); on a cluster all of them in one slot. */
  quota(name: string): string {
    return `${this.prefix}${this.layout.cluster ? '{quota}' : ''}quota:${name}`;
  }

  constructor(
    readonly prefix: string,
    readonly layout: Layout = SINGLE,
    partition = 0,
  ) {
    const partitions = layout.partitions ?? 1;
    if (!Number.isInteger(partitions) || partitions < 1 || partitions > MAX_MATCHER_PARTITIONS) throw new Error(`redis keys: matcher partitions must be an integer in [1, ${MAX_MATCHER_PARTITIONS}], got ${partitions}`);
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions) throw new Error(`redis keys: partition must be an integer in [0, ${partitions - 1}], got ${partition}`);
    this.partition = partition;
    this.partitions = partitions;
    if (layout.cluster && /[{}]/.test(prefix)) throw new Error(`redis keys: a cluster deployment's prefix must not contain { or }, got ${JSON.stringify(prefix)}`);
    if (!Number.isInteger(layout.groups) || layout.groups < 1 || layout.groups > MAX_CLUSTER_GROUPS || (!layout.cluster && layout.groups !== 1)) {
      throw new Error(`redis keys: device groups must be 1 on a plain Redis and in [1, ${MAX_CLUSTER_GROUPS}] on a cluster, got ${layout.groups}`);
    }
    const geo = layout.geo;
    if (geo !== undefined && geo.shards + geo.wide !== partitions) throw new Error(`redis keys: a deployment sharded by space has shards + wide shards partitions, got ${partitions} for ${geo.shards} + ${geo.wide}`);
    const shared = geo === undefined ? '' : layout.cluster ? `${prefix}{g}` : prefix;
    this.shardPrefix = geo === undefined ? '' : `${shared}s`;
    const base = (this.base = geo !== undefined ? `${this.shardPrefix}${partition}:` : layout.cluster ? `${prefix}{m${partition}}` : partitions > 1 ? `${prefix}p${partition}:` : prefix);
    this.shared = geo === undefined ? base : shared;
    this.home = geo === undefined ? '' : `${shared}home`;
    this.wide = geo === undefined ? '' : `${shared}wide`;
    this.reach = geo === undefined ? '' : `${shared}reach`;
    this.seq = geo === undefined ? '' : `${shared}seq`;
    this.geoStats = geo === undefined ? '' : `${shared}stats`;
    this.map = geo === undefined ? '' : `${shared}map`;
    // With sharding by space, a shard's subdevs are the devices homed there (with or without subscriptions).
    this.subDevices = `${base}subdevs`;
    this.pos = `${this.shared}pos`;
    this.seen = `${this.shared}seen`;
    this.revoked = `${this.shared}revoked`;
    this.revocations = `${this.shared}revocations`;
    this.in = `${base}in`;
    this.stats = `${base}stats`;
    this.config = `${base}config`;
    this.layoutKey = `${prefix}layout`;
    this.procs = `${prefix}procs`;
    this.matcherOffset = `${base}matcher:offset`;
    this.matcherStats = `${base}matcher:stats`;
    this.matcherLease = `${base}matcher:lease`;
    this.matcherEpoch = `${base}matcher:epoch`;
    this.matcherInstance = `${base}matcher:instance`;
    this.matcherKeep = `${base}matcher:keep`;
    this.matcherOwed = `${base}matcher:owed`;
    const groups: GroupKeys[] = [];
    // A group's fence is this partition's: each partition's leader raises and checks its own.
    const fence = partitions > 1 ? `:${partition}` : '';
    if (layout.cluster) for (let g = 0; g < layout.groups; g++) groups.push(new GroupKeys(g, `${prefix}{d${g}}`, `${prefix}{d${g}}fence${fence}`));
    else groups.push(new GroupKeys(0, prefix, this.matcherEpoch));
    this.groups = groups;
  }

  /** The device group a device's notifications live in. */
  groupOf(device: string): GroupKeys {
    return this.groups.length === 1 ? this.groups[0] : this.groups[devicePart(device, this.groups.length)];
  }

  subs(device: string): string {
    return `${this.shared}subs:${device}`;
  }

  /** Sharding by space: subscription id → "<anchored radius> a|w" (w: a fixed or no area). */
  meta(device: string): string {
    return `${this.shared}meta:${device}`;
  }

  /** The keys of another partition (shard) of this deployment. */
  of(partition: number): Keys {
    return partition === this.partition ? this : new Keys(this.prefix, this.layout, partition);
  }

  notes(device: string): string {
    return this.groupOf(device).notes(device);
  }

  wake(device: string): string {
    return this.groupOf(device).wake(device);
  }

  /** The device whose doorbell channel this is, or null for another channel. */
  deviceOfWake(channel: string): string | null {
    if (!this.layout.cluster) {
      const w = this.groups[0].wakePrefix;
      return channel.startsWith(w) ? channel.slice(w.length) : null;
    }
    const open = this.prefix.length;
    if (!channel.startsWith(this.prefix) || channel.charCodeAt(open) !== 0x7b || channel.charCodeAt(open + 1) !== 0x64) return null; // "{d"
    const close = channel.indexOf('}', open);
    const g = Number(channel.slice(open + 2, close));
    if (close < 0 || !Number.isInteger(g) || g < 0 || g >= this.groups.length) return null;
    const w = this.groups[g].wakePrefix;
    if (!channel.startsWith(w)) return null;
    const device = channel.slice(w.length);
    return this.groupOf(device).index === g ? device : null;
  }

  /** The stored event a notification refers to ("<in-entry id>:<event index>"). */
  event(ref: string): string {
    return `${this.shared}ev:${ref}`;
  }

  eventId(id: string): string {
    return `${this.base}eid:${id}`;
  }

  /** Sharding by space: an event id of the whole deployment's dedupe window ("<entry id>[ <reach>]"). */
  geoEventId(id: string): string {
    return `${this.shared}eid:${id}`;
  }

  reply(gatewayId: string): string {
    return `${this.shared}reply:${gatewayId}`;
  }
}

export const DEFAULT_PREFIX = 'ambit:';


/** The Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, or of the whole key). */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  let from = 0;
  let to = bytes.length;
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) {
      from = open + 1;
      to = close;
    }
  }
  let crc = 0;
  for (let i = from; i < to; i++) {
    crc ^= bytes[i] << 8;
    for (let b = 0; b < 8; b++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
