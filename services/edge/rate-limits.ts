/**
 * Rate limits at the gateway (docs/service.md "Rate limits"): token buckets per device for its
 * own location updates and subscription changes, and per publisher (the token's subject) for
 * events. A refused request is RESOURCE_EXHAUSTED with how long to wait. Device buckets live in
 * the gateway process that serves the device; publisher buckets are shared by every gateway of a
 * Redis deployment (the hub's `takeQuota`, one script call in Redis) and kept per process otherwise.
 *
 * A bucket holds up to `capacity` tokens and refills at the rate; a request of n takes n. One
 * larger than the capacity (a 1000-event message under a 100/s limit) is taken only from a full
 * bucket and leaves it in debt, so it waits its turn instead of never passing.
 */
import * as grpc from '@grpc/grpc-js';
import { ApiError } from './convert.js';

export interface RateLimits {
  /** A device's own location updates per second (device stream and UpdateLocation); 0: unlimited. */
  locationsPerS: number;
  /** A device's subscribe, replace and unsubscribe requests per minute (a minute's worth may come at once); 0: unlimited. */
  subscriptionChangesPerMin: number;
  /** A publisher's events per second, Publish and BulkPublish together; 0: unlimited. */
  eventsPerS: number;
  /** Bursts: the per-second buckets hold this many seconds of their rate (at least one request). */
  burstS: number;
}

export const NO_RATE_LIMITS: Readonly<RateLimits> = Object.freeze({ locationsPerS: 0, subscriptionChangesPerMin: 0, eventsPerS: 0, burstS: 1 });

/** What a refusal says: RESOURCE_EXHAUSTED, the limit, and the wait (also in `retryAfterMs`). */
export class RateLimitedError extends ApiError {
  constructor(
    what: string,
    readonly retryAfterMs: number,
  ) {
    super(grpc.status.RESOURCE_EXHAUSTED, `rate limit: ${what}; retry after ${retryAfterMs} ms`);
    this.name = 'RateLimitedError';
  }
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Token buckets by key in this process. */
export class LocalBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private sweepAt = 1024;

  constructor(
    /** Tokens per millisecond. */
    readonly perMs: number,
    readonly capacity: number,
    private readonly now: () => number,
  ) {}

  /** Takes `n` tokens of `key`'s bucket: 0 when granted, else the milliseconds until they would be. */
  take(key: string, n: number): number {
    const now = this.now();
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.sweepAt) this.sweep(now);
      b = { tokens: this.capacity, at: now };
      this.buckets.set(key, b);
    }
    const tokens = Math.min(this.capacity, b.tokens + Math.max(0, now - b.at) * this.perMs);
    b.at = Math.max(b.at, now);
    const need = Math.min(n, this.capacity);
    if (tokens >= need) {
      b.tokens = tokens - n;
      return 0;
    }
    b.tokens = tokens;
    return Math.max(1, Math.ceil((need - tokens) / this.perMs));
  }

  /** Keys held (tests, stats). */
  get size(): number {
    return this.buckets.size;
  }

  /** Forgets full buckets (the same as none); the next sweep waits until the map has doubled. */
  private sweep(now: number): void {
    for (const [k, b] of this.buckets) if (b.tokens + Math.max(0, now - b.at) * this.perMs >= this.capacity) this.buckets.delete(k);
    this.sweepAt = Math.max(1024, 2 * this.buckets.size);
  }
}

/** A shared bucket store: the hub's (Redis: one script call), taking `n` of `key` at the rate; resolves 0 or the wait in ms. */
export type SharedQuota = (key: string, n: number, perS: number, capacity: number) => Promise<number>;

/** Counts of refusals, for metrics. */
export interface RateLimitCounts {
  locations: number;
  subscriptionChanges: number;
  events: number;
}

/** The gateway's limits: local buckets, and the publishers' shared through `shared` when given. */
export class RateLimiter {
  private readonly locations: LocalBuckets | null;
  private readonly changes: LocalBuckets | null;
  private readonly events: LocalBuckets | null;
  private readonly eventCapacity: number;
  constructor(
    readonly limits: RateLimits,
    now: () => number,
    private readonly shared: SharedQuota | null = null,
    /** Where refusals are counted (the gateway's counters, read by the metrics). */
    readonly refused: RateLimitCounts = { locations: 0, subscriptionChanges: 0, events: 0 },
  ) {
    const perSecond = (rate: number) => Math.max(1, Math.ceil(rate * limits.burstS));
    this.locations = limits.locationsPerS > 0 ? new LocalBuckets(limits.locationsPerS / 1000, perSecond(limits.locationsPerS), now) : null;
    this.changes = limits.subscriptionChangesPerMin > 0 ? new LocalBuckets(limits.subscriptionChangesPerMin / 60_000, Math.max(1, Math.floor(limits.subscriptionChangesPerMin)), now) : null;
    this.eventCapacity = perSecond(limits.eventsPerS);
    this.events = limits.eventsPerS > 0 && shared === null ? new LocalBuckets(limits.eventsPerS / 1000, this.eventCapacity, now) : null;
  }

  /** A device's own `n` location updates (default one): 0, or the wait in ms (counted as refused). */
  location(device: string, n = 1): number {
    if (this.locations === null) return 0;
    const wait = this.locations.take(device, n);
    if (wait > 0) this.refused.locations++;
    return wait;
  }

  /** A device's subscription change: 0, or the wait in ms. */
  subscriptionChange(device: string): number {
    if (this.changes === null) return 0;
    const wait = this.changes.take(device, 1);
    if (wait > 0) this.refused.subscriptionChanges++;
    return wait;
  }

  /** A publisher's `n` events; throws RateLimitedError when refused. */
  async publish(subject: string, n: number): Promise<void> {
    if (this.limits.eventsPerS <= 0 || n === 0) return;
    const wait = this.events !== null ? this.events.take(subject, n) : await this.shared!(`events:${subject}`, n, this.limits.eventsPerS, this.eventCapacity);
    if (wait > 0) {
      this.refused.events++;
      throw new RateLimitedError(`publisher ${JSON.stringify(subject)} may publish ${this.limits.eventsPerS} events/s (bursts of ${this.eventCapacity})`, wait);
    }
  }

  /** The errors of the device limits, for callers that throw. */
  locationError(wait: number): RateLimitedError {
    return new RateLimitedError(`a device may send ${this.limits.locationsPerS} location updates/s`, wait);
  }

  subscriptionChangeError(wait: number): RateLimitedError {
    return new RateLimitedError(`a device may change its subscriptions ${this.limits.subscriptionChangesPerMin} times a minute`, wait);
  }
}
