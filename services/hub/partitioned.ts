/**
 * A hub split by device: K hubs, each holding the subscriptions, positions and engine (and, on an
 * embedded node, the notification logs) of the devices whose id hashes to it (`shardOf`), and one
 * Hub in front of them. Two uses: an embedded node's hub partitions (AMBIT_PARTITIONS=K, the parts
 * LinkedHubs to threads) and a Redis deployment's matcher partitions (AMBIT_MATCHER_PARTITIONS=K,
 * the parts one RedisHub per partition's command stream). Everything about one device goes to its partition; a publish goes to every
 * partition, each matches the events against its own devices, and the reached counts add up. On
 * a node the partitions are threads (services/process/partitions.ts) and the parts here are
 * LinkedHubs to them, so matching, grouping and storing use K cores and no thread sees every
 * notification.
 *
 * Order: what one gateway sends to a partition arrives in the order sent (one link each), so a
 * publish sees the moves and subscriptions this gateway made before it, as with one hub.
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import { shardOf } from './fanout-shard.js';
import { EventCache, type Link } from './link.js';
import { LinkedHub } from './linked.js';
import type { DeviceInfo, DevicePage, DeviceQuery, DeviceSubscription, Hub, HubStats, Inbox, LocationWriter, PublishResult, PurgeResult, Revocation, ShardStatus } from './port.js';

/**
 * Figures that are settings, per-item averages or counts every part makes whole (each partition
 * sees every duplicate event): the largest, not the sum, of the parts.
 */
const NOT_SUMMED = /Us$|Per|^cpuBelowFilters$|^duplicateEvents$|^eventsMatched$|^matcherEpoch$/;

/**
 * The figures of several partitions as one: counts and sizes add up; every partition sees every
 * event, so events published (and matched) is the largest count of any; settings and averages are
 * the largest.
 */
export function sumHubStats(all: readonly HubStats[]): HubStats {
  const s: HubStats = { ...all[0], extra: { ...all[0].extra } };
  for (let k = 1; k < all.length; k++) {
    const t = all[k];
    s.subscriptions += t.subscriptions;
    s.filters += t.filters;
    s.devices += t.devices;
    s.notifications += t.notifications;
    s.locationUpdates += t.locationUpdates;
    s.notificationsDropped += t.notificationsDropped;
    s.engineMemoryBytes += t.engineMemoryBytes;
    s.eventsPublished = Math.max(s.eventsPublished, t.eventsPublished);
    for (const [key, v] of Object.entries(t.extra)) {
      const had = s.extra[key];
      // Alive only when every partition's matcher is.
      if (key === 'matcherAlive') s.extra[key] = had === true && v === true;
      if (typeof v !== 'number' || typeof had !== 'number') continue;
      s.extra[key] = NOT_SUMMED.test(key) ? Math.max(had, v) : had + v;
    }
  }
  return s;
}

export class PartitionedHub implements Hub {
  readonly mode: 'embedded' | 'redis';
  readonly forwardsEvents: boolean;

  /** `parts`: one hub per partition, all embedded (a node's partitions) or all Redis (matcher partitions). */
  constructor(private readonly parts: readonly Hub[]) {
    if (parts.length === 0) throw new Error('hub: a partitioned hub needs at least one partition');
    this.mode = parts[0].mode;
    if (parts.some((p) => p.mode !== this.mode)) throw new Error('hub: the partitions of a hub must be of one mode');
    this.forwardsEvents = parts.every((p) => p.forwardsEvents === true);
    // Shared buckets live in one place: the first partition's (its Redis, in Redis mode).
    const first = parts[0];
    if (first.takeQuota !== undefined) this.takeQuota = (key, n, perS, capacity) => first.takeQuota!(key, n, perS, capacity);
  }

  takeQuota?: Hub['takeQuota'];

  get partitions(): number {
    return this.parts.length;
  }

  /** The partition holding `device`. */
  of(device: string): Hub {
    return this.parts[shardOf(device, this.parts.length)];
  }

  addSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.of(device).addSubscription(device, sub);
  }

  replaceSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.of(device).replaceSubscription(device, sub);
  }

  removeSubscription(device: string, subscriptionId: string): Promise<void> {
    return this.of(device).removeSubscription(device, subscriptionId);
  }

  listSubscriptions(device: string): Promise<DeviceSubscription[]> {
    return this.of(device).listSubscriptions(device);
  }

  deviceInfo(device: string): Promise<DeviceInfo> {
    return this.of(device).deviceInfo(device);
  }

  async updateLocations(updates: readonly PositionUpdate[]): Promise<void> {
    const n = this.parts.length;
    const by: PositionUpdate[][] = Array.from({ length: n }, () => []);
    for (const u of updates) by[shardOf(u.device, n)].push(u);
    await Promise.all(by.map((us, k) => (us.length === 0 ? undefined : this.parts[k].updateLocations(us))));
  }

  locationWriter(device: string): LocationWriter {
    return this.of(device).locationWriter(device);
  }

  async publish(events: readonly Event[]): Promise<PublishResult[]> {
    const each = await Promise.all(this.parts.map((p) => p.publish(events)));
    // A duplicate in any partition is one: that partition had the event from an earlier publish
    // (all of them did, unless that publish failed halfway, when the others deliver their part now).
    const out: PublishResult[] = each[0].map((r) => (r.duplicate === true ? { eventId: r.eventId, reached: r.reached, duplicate: true } : { eventId: r.eventId, reached: r.reached }));
    for (let k = 1; k < each.length; k++) {
      const rs = each[k];
      for (let i = 0; i < out.length; i++) {
        out[i].reached += rs[i].reached;
        if (rs[i].duplicate === true) out[i].duplicate = true;
      }
    }
    return out;
  }

  openInbox(device: string, resumeAfter: string | null): Promise<Inbox> {
    return this.of(device).openInbox(device, resumeAfter);
  }

  /**
   * The node's figures: counts and sizes add up over the partitions; every partition sees every
   * event, so events published is the largest count of any (they agree once all have applied).
   */
  async stats(): Promise<HubStats> {
    const all = await Promise.all(this.parts.map((p) => p.stats()));
    const s = sumHubStats(all);
    s.extra.partitions = all.length;
    return s;
  }

  /** Partition after partition; the token is "<partition>.<that partition's token>". */
  async listDevices(q: DeviceQuery): Promise<DevicePage> {
    let k = 0;
    let after = '';
    if (q.after !== '') {
      const dot = q.after.indexOf('.');
      k = dot > 0 ? Number(q.after.slice(0, dot)) : NaN;
      if (!Number.isInteger(k) || k < 0 || k >= this.parts.length || String(k) !== q.after.slice(0, dot)) throw new AmbitError('INVALID_ARGUMENT', 'is not a page token this listing gave', 'page_token');
      after = q.after.slice(dot + 1);
    }
    const devices: DevicePage['devices'] = [];
    for (; k < this.parts.length; k++, after = '') {
      const page = await this.parts[k].listDevices({ prefix: q.prefix, after, limit: q.limit - devices.length });
      devices.push(...page.devices);
      if (page.next !== '') return { devices, next: `${k}.${page.next}` };
      if (devices.length === q.limit) return { devices, next: k + 1 < this.parts.length ? `${k + 1}.` : '' };
    }
    return { devices, next: '' };
  }

  purgeDevice(device: string): Promise<PurgeResult> {
    return this.of(device).purgeDevice(device);
  }

  async markSeen(devices: readonly string[], ms: number): Promise<void> {
    const n = this.parts.length;
    const by: string[][] = Array.from({ length: n }, () => []);
    for (const d of devices) by[shardOf(d, n)].push(d);
    await Promise.all(by.map((ds, k) => (ds.length === 0 ? undefined : this.parts[k].markSeen(ds, ms))));
  }

  async expireDevices(beforeMs: number, max: number): Promise<string[]> {
    const gone: string[] = [];
    for (const p of this.parts) {
      if (gone.length >= max) break;
      gone.push(...(await p.expireDevices(beforeMs, max - gone.length)));
    }
    return gone;
  }

  /** Redis matcher partitions: each one's status, in order. */
  async shardStatus(): Promise<ShardStatus[]> {
    const each = await Promise.all(this.parts.map((p) => p.shardStatus?.() ?? Promise.resolve([])));
    return each.flat();
  }

  /** Revocations are the deployment's, not a partition's: the first partition keeps them for all. */
  revokeTokens(revocations: readonly Revocation[]): Promise<void> {
    return this.parts[0].revokeTokens(revocations);
  }

  watchRevocations(listener: (all: readonly Revocation[]) => void): () => void {
    return this.parts[0].watchRevocations(listener);
  }

  async close(): Promise<void> {
    await Promise.all(this.parts.map((p) => p.close()));
  }
}

/**
 * A gateway's hub on a node with hub partitions: a LinkedHub on the link to each, sharing one
 * cache of received events, so an event pushed by several partitions is decoded once.
 */
export function linkedPartitions(links: readonly Link[]): PartitionedHub {
  const events = new EventCache();
  return new PartitionedHub(links.map((l, k) => new LinkedHub(l, { name: `hub partition ${k}`, events })));
}
