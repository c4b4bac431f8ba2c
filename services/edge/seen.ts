/**
 * When devices were last seen, for the expiry of devices that went away (Hub.markSeen,
 * Hub.expireDevices). A gateway notes each device it hears from (a stream that opens or closes, a
 * unary call, an UpdateLocations batch) in a set, and writes the set to the hub once per flush
 * period, stamped with the flush's time: one call per period, not one per request. Devices with an
 * open stream here are written again once per refresh period, so a device that stays connected
 * and silent is never taken for gone. Seen times are exact to one flush period.
 */
import type { Logger } from 'pino';
import type { Hub } from '../hub/port.js';

export interface SeenOptions {
  /** How often the noted devices are written (ms). */
  flushMs: number;
  /** How often the devices with an open stream are written again (ms); far below any expiry. */
  refreshMs: number;
}

/** Devices written per markSeen call. */
const CHUNK = 10_000;

export class SeenTracker {
  private noted = new Set<string>();
  private lastRefresh: number;
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;

  /** `connected`: the devices with an open stream on this gateway, now. */
  constructor(
    private readonly hub: Pick<Hub, 'markSeen'>,
    private readonly connected: () => Iterable<string>,
    private readonly now: () => number,
    private readonly options: SeenOptions,
    private readonly log: Logger | null = null,
  ) {
    this.lastRefresh = now();
  }

  /** Notes that the device was heard from. */
  note(device: string): void {
    this.noted.add(device);
  }

  /** Notes each device of a batch. */
  noteAll(devices: Iterable<string>): void {
    for (const d of devices) this.noted.add(d);
  }

  /** Writes the flush timer's periods from now on. */
  start(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => void this.flush().catch((err: unknown) => this.log?.warn({ err }, 'last-seen times not written; they go with the next flush')), this.options.flushMs);
    this.timer.unref();
  }

  /**
   * Writes the noted devices (and, once per refresh period, every connected one) as seen now.
   * Devices of a write that fails are noted again for the next.
   */
  flush(): Promise<void> {
    return (this.flushing ??= this.write().finally(() => (this.flushing = null)));
  }

  private async write(): Promise<void> {
    const at = this.now();
    const batch = this.noted;
    this.noted = new Set();
    if (at - this.lastRefresh >= this.options.refreshMs) {
      this.lastRefresh = at;
      for (const d of this.connected()) batch.add(d);
    }
    if (batch.size === 0) return;
    const all = [...batch];
    try {
      for (let i = 0; i < all.length; i += CHUNK) await this.hub.markSeen(all.slice(i, i + CHUNK), at);
    } catch (err) {
      for (const d of all) this.noted.add(d);
      throw err;
    }
  }

  /** Stops the timer and writes what is noted. */
  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }
}

/**
 * The sweep of devices unseen for `expiryMs`: every `everyMs`, the hub purges them in rounds of
 * `round` until a round comes back short. Returns the devices expired by one sweep.
 */
export class DeviceExpiry {
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<string[]> | null = null;

  constructor(
    private readonly hub: Pick<Hub, 'expireDevices'>,
    private readonly now: () => number,
    private readonly options: { expiryMs: number; everyMs: number; round?: number; beforeSweep?: () => Promise<void> },
    private readonly log: Logger | null = null,
  ) {}

  start(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => void this.sweep().catch((err: unknown) => this.log?.warn({ err }, 'expiry sweep failed; the next one tries again')), this.options.everyMs);
    this.timer.unref();
  }

  sweep(): Promise<string[]> {
    return (this.sweeping ??= this.run().finally(() => (this.sweeping = null)));
  }

  private async run(): Promise<string[]> {
    const round = this.options.round ?? 1000;
    // This process's own sightings first (a device back just now is not taken for gone).
    await this.options.beforeSweep?.().catch((err: unknown) => this.log?.warn({ err }, 'last-seen times not written before the sweep'));
    const before = this.now() - this.options.expiryMs;
    const gone: string[] = [];
    for (;;) {
      const r = await this.hub.expireDevices(before, round);
      gone.push(...r);
      if (r.length < round) break;
    }
    if (gone.length > 0) this.log?.info({ expired: gone.length, unseenSinceMs: before }, `${gone.length} devices unseen since ${new Date(before).toISOString()} expired (their subscriptions, positions and backlogs purged)`);
    return gone;
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
