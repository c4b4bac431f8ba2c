/**
 * What the edge measures: plain numbers bumped on the hot paths (an increment, not a metrics
 * library call) and a publish latency observer. The process's Prometheus registry
 * (services/process/metrics.ts) reads them at scrape time.
 */

/** Counters the gateway and its device sessions bump directly. */
export class Counters {
  locationUpdatesStream = 0;
  locationUpdatesUnary = 0;
  eventsPublished = 0;
  subscriptionsReached = 0;
  notificationsSent = 0;
  connectedDevices = 0;
  /** Notifications written to device streams and not yet drained by HTTP/2 flow control. */
  sendQueue = 0;
  /** Device streams whose requests are not read because their replies are not being read. */
  streamsHeldBack = 0;
  rejectedRequests = 0;
  /** Requests refused by a rate limit (rate-limits.ts), by limit. */
  readonly rateLimited = { locations: 0, subscriptionChanges: 0, events: 0 };
  /** With tenants on: what each tenant did through this process (the metrics' tenant label); null: off. */
  tenants: TenantCounters | null = null;
}

/** One tenant's counts on this process. */
export interface TenantCounts {
  eventsPublished: number;
  notificationsSent: number;
  locationUpdates: number;
}

/**
 * Counts per tenant ('' the default tenant). Bounded: past `max` tenants, the others count
 * together under OTHER_TENANTS, so a deployment of many tenants keeps a bounded set of series.
 */
export class TenantCounters {
  readonly byTenant = new Map<string, TenantCounts>();

  constructor(readonly max = 1000) {}

  of(tenant: string): TenantCounts {
    let c = this.byTenant.get(tenant);
    if (c === undefined) {
      const key = this.byTenant.size >= this.max ? OTHER_TENANTS : tenant;
      c = this.byTenant.get(key);
      if (c === undefined) {
        c = { eventsPublished: 0, notificationsSent: 0, locationUpdates: 0 };
        this.byTenant.set(key, c);
      }
    }
    return c;
  }
}

/** The label of the tenants past TenantCounters.max (not a tenant name: names have no '~'). */
export const OTHER_TENANTS = '~other';

export interface EdgeMetrics {
  readonly counters: Counters;
  /** Seconds from a publish's arrival to its reached counts. */
  readonly publishSeconds: { observe(seconds: number): void };
}
