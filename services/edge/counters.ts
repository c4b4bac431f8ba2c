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
}

export interface EdgeMetrics {
  readonly counters: Counters;
  /** Seconds from a publish's arrival to its reached counts. */
  readonly publishSeconds: { observe(seconds: number): void };
}
