/**
 * What the matcher role does, whichever hub it sits behind: owns the engine, keeps each device's
 * subscriptions in the API's own form, and turns an engine match (global subscription keys) into
 * recipients (device → its matched subscription ids). No I/O; the hubs store and deliver.
 */
import { AmbitError, show } from '../../src/model/errors.js';
import type { Matcher, MatcherStats } from '../../src/engines/matcher.js';
import type { DeviceHandle } from '../../src/engines/matcher.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import { DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE, type DeviceSubscription, splitSubscriptionKey, subscriptionKey } from '../hub/port.js';

export interface Recipient {
  device: string;
  subscriptionIds: string[];
}

/** A device's last position plus the engine handle that moves it (two writes per update). */
interface Position {
  lat: number;
  lon: number;
  handle: DeviceHandle | null;
}

export class MatchCore {
  private readonly subs = new Map<string, Map<string, DeviceSubscription>>();
  private readonly positions = new Map<string, Position>();
  private subscriptionCount = 0;
  locationUpdates = 0;

  /** `maxPerDevice`: subscriptions one device may hold (RESOURCE_EXHAUSTED beyond). */
  constructor(
    readonly engine: Matcher,
    readonly maxPerDevice = DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE,
  ) {}

  /** Adds or replaces (mode) one device subscription; the engine validates again, as a guard. */
  put(device: string, sub: DeviceSubscription, mode: 'add' | 'replace' | 'upsert'): void {
    let mine = this.subs.get(device);
    const exists = mine?.has(sub.id) ?? false;
    if (mode === 'add' && exists) throw new AmbitError('ALREADY_EXISTS', `device already has subscription ${show(sub.id)}`, 'subscription.id');
    if (mode === 'replace' && !exists) throw new AmbitError('NOT_FOUND', `device has no subscription ${show(sub.id)}`, 'subscription.id');
    if (!exists && mode !== 'upsert' && (mine?.size ?? 0) >= this.maxPerDevice) {
      throw new AmbitError('RESOURCE_EXHAUSTED', `device already has ${this.maxPerDevice} subscriptions, the most allowed`, 'subscription');
    }
    const engineSub = { id: subscriptionKey(device, sub.id), owner: device, filters: sub.filters };
    if (exists) this.engine.replace(engineSub);
    else this.engine.add(engineSub);
    if (mine === undefined) {
      mine = new Map();
      this.subs.set(device, mine);
    }
    if (!exists) this.subscriptionCount++;
    mine.set(sub.id, sub);
  }

  /** False when the device has no such subscription. */
  remove(device: string, subscriptionId: string): boolean {
    const mine = this.subs.get(device);
    if (mine === undefined || !mine.has(subscriptionId)) return false;
    this.engine.remove(subscriptionKey(device, subscriptionId));
    mine.delete(subscriptionId);
    this.subscriptionCount--;
    if (mine.size === 0) this.subs.delete(device);
    return true;
  }

  list(device: string): DeviceSubscription[] {
    const mine = this.subs.get(device);
    return mine === undefined ? [] : [...mine.values()];
  }

  has(device: string, subscriptionId: string): boolean {
    return this.subs.get(device)?.has(subscriptionId) ?? false;
  }

  /** Every (device, subscription), for snapshots. */
  *all(): Generator<[string, DeviceSubscription]> {
    for (const [device, mine] of this.subs) for (const s of mine.values()) yield [device, s];
  }

  /** Positions are range-checked by the caller. */
  move(device: string, lat: number, lon: number): void {
    this.place(this.record(device), lat, lon);
  }

  /**
   * The hot path of one device's stream: its record is resolved on the first update, so each
   * update after that is two writes and the engine handle's, with no lookup by id.
   */
  writer(device: string): (lat: number, lon: number) => void {
    let p: Position | null = null;
    return (lat, lon) => this.place((p ??= this.record(device)), lat, lon);
  }

  private record(device: string): Position {
    let p = this.positions.get(device);
    if (p === undefined) {
      p = { lat: 0, lon: 0, handle: this.engine.openDevice(device) };
      this.positions.set(device, p);
    }
    return p;
  }

  private place(p: Position, lat: number, lon: number): void {
    p.lat = lat;
    p.lon = lon;
    p.handle!.update(lat, lon);
    this.locationUpdates++;
  }

  moveMany(updates: readonly PositionUpdate[]): void {
    for (let i = 0; i < updates.length; i++) this.move(updates[i].device, updates[i].lat, updates[i].lon);
  }

  position(device: string): { lat: number; lon: number } | null {
    const p = this.positions.get(device);
    return p === undefined ? null : { lat: p.lat, lon: p.lon };
  }

  get deviceCount(): number {
    return this.positions.size;
  }

  get subscriptions(): number {
    return this.subscriptionCount;
  }

  /** Recipients of each event, grouped by device, subscription ids in engine order. */
  async match(events: readonly Event[]): Promise<Recipient[][]> {
    if (events.length === 0) return [];
    const results = events.length === 1 ? [await this.engine.match(events[0])] : await this.engine.matchBatch(events);
    return results.map(group);
  }

  stats(): MatcherStats {
    return this.engine.stats();
  }

  async close(): Promise<void> {
    for (const p of this.positions.values()) p.handle?.release();
    this.positions.clear();
    await this.engine.close();
  }
}

function group(keys: readonly string[]): Recipient[] {
  if (keys.length === 0) return [];
  const byDevice = new Map<string, string[]>();
  for (const key of keys) {
    const [device, id] = splitSubscriptionKey(key);
    const ids = byDevice.get(device);
    if (ids === undefined) byDevice.set(device, [id]);
    else ids.push(id);
  }
  const out: Recipient[] = [];
  for (const [device, subscriptionIds] of byDevice) out.push({ device, subscriptionIds: subscriptionIds.sort() });
  return out;
}
