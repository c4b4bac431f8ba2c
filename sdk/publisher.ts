/**
 * Publishing events: one at a time (`publish`, replies once the event is matched and its
 * notifications stored), a finite set over one client stream (`bulkPublish`, ≤ 1000 events a
 * message), or a steady feed over one long-lived stream (`stream()`): a unary call costs grpc-js
 * a new HTTP/2 stream and headers each time, which at hundreds of events a second dominates both
 * CPU and the latency tail; a message on an open stream does not.
 */
import * as grpc from '@grpc/grpc-js';
import type { BulkPublishResponse, PublishResponse } from '../api/gen/ambit/v1/publisher_pb.js';
import { PublisherService } from '../api/gen/ambit/v1/publisher_pb.js';
import { randomUUID } from 'node:crypto';
import { type BackoffOptions, backoffDelay, resolveBackoff } from './backoff.js';
import { AmbitError, StatusCode, invalid, withPublishOutcome } from './errors.js';
import { type ClientOptions, ServiceClient, type TokenSource, clientStream, metadataFor, unary } from './transport.js';
import { type EventInput, toWireEvent } from './types.js';

/** The most events the server takes in one BulkPublish message. */
export const MAX_EVENTS_PER_MESSAGE = 1000;

export interface PublishResult {
  eventId: string;
  /** Subscriptions the event matched (for a duplicate: those the first event with its id matched). */
  reached: number;
  /**
   * The server had an event with this id from within its dedupe window, so nothing was delivered
   * again: an earlier attempt of this call that failed on the way back (`attempts` > 1), or an
   * earlier publish of yours with the same id.
   */
  duplicate: boolean;
  /** Calls it took (1 unless a failure was retried). */
  attempts: number;
}

export interface BulkPublishResult {
  /** Events taken, duplicates included. */
  accepted: number;
  reached: number;
  /** Events whose id the server had from within its dedupe window (not delivered again). */
  duplicates: number;
}

export interface PublisherOptions extends ClientOptions {
  /**
   * How many times `publish` tries again after a failure that left the event not stored or
   * unknown (default 3; 0 never). A retry sends the same event id, so it is delivered at most once.
   */
  publishRetries?: number;
  /** Delays between those tries (default: 250 ms doubling to 30 s, with jitter). */
  publishBackoff?: Partial<BackoffOptions>;
  /** Told before each retry, with the failure and the attempt that failed (1-based). */
  onRetry?: (err: AmbitError, attempt: number) => void;
}


export class AmbitPublisher extends ServiceClient {
  private readonly retries: number;
  private readonly backoff: BackoffOptions;
  private readonly onRetry: PublisherOptions['onRetry'];

  /** `token` needs the `publish` scope. Connects lazily, on the first call. */
  constructor(address: string, token: TokenSource, options: PublisherOptions = {}) {
    const { publishRetries, publishBackoff, onRetry, ...client } = options;
    super(PublisherService, address, token, client);
    const retries = publishRetries ?? 3;
    if (!Number.isInteger(retries) || retries < 0 || retries > 100) throw invalid('publishRetries', `must be an integer in [0, 100], got ${String(retries)}`);
    this.retries = retries;
    this.backoff = resolveBackoff(publishBackoff);
    this.onRetry = onRetry;
  }

  /**
   * Publishes one event and resolves once it is matched and its notifications stored. An event
   * without an id gets one here, so that a retry is recognised: after a failure that left it not
   * stored or unknown (a broken connection, UNAVAILABLE) the call is retried up to `publishRetries`
   * times, and a retry of an event the server had already stored comes back as a duplicate
   * instead of being delivered twice. A failure with outcome 'queued' (stored, not confirmed in
   * time) is not retried: the event will be delivered. The error says which (`publishOutcome`).
   */
  async publish(event: EventInput): Promise<PublishResult> {
    const wire = toWireEvent('event', event);
    if (wire.id === '') wire.id = randomUUID();
    const req = { event: wire };
    for (let attempt = 1; ; attempt++) {
      try {
        const res = await unary<PublishResponse>(this.client, 'publish', req, this.token, this.deadlineMs);
        return { eventId: res.eventId, reached: Number(res.reached), duplicate: res.duplicate, attempts: attempt };
      } catch (e) {
        const err = withPublishOutcome(AmbitError.from(e));
        const again = err.publishOutcome === 'unknown' || (err.publishOutcome === 'not-stored' && err.code === StatusCode.UNAVAILABLE);
        if (!again || attempt > this.retries || this.closed) throw err;
        this.onRetry?.(err, attempt);
        await new Promise((resolve) => setTimeout(resolve, backoffDelay(this.backoff, attempt - 1)));
      }
    }
  }

  /**
   * Publishes every event of `events` (an array, any iterable or an async iterable) over one
   * stream, `chunkSize` (≤ 1000) per message, with backpressure. Resolves with the totals once the
   * server has published them all; a bad event fails the call naming its field (events[i] of its
   * message).
   */
  async bulkPublish(events: Iterable<EventInput> | AsyncIterable<EventInput>, options: { chunkSize?: number } = {}): Promise<BulkPublishResult> {
    const chunkSize = options.chunkSize ?? MAX_EVENTS_PER_MESSAGE;
    if (!Number.isInteger(chunkSize) || chunkSize < 1 || chunkSize > MAX_EVENTS_PER_MESSAGE) {
      throw invalid('chunkSize', `must be an integer in [1, ${MAX_EVENTS_PER_MESSAGE}], got ${String(chunkSize)}`);
    }
    async function* chunks() {
      let chunk: ReturnType<typeof toWireEvent>[] = [];
      let i = 0;
      for await (const e of events as AsyncIterable<EventInput>) {
        chunk.push(toWireEvent(`events[${i++}]`, e));
        if (chunk.length === chunkSize) {
          yield { events: chunk };
          chunk = [];
        }
      }
      if (chunk.length > 0) yield { events: chunk };
    }
    let res: BulkPublishResponse;
    try {
      res = await clientStream<BulkPublishResponse>(this.client, 'bulkPublish', this.token, chunks());
    } catch (err) {
      throw withPublishOutcome(AmbitError.from(err));
    }
    return { accepted: Number(res.accepted), reached: Number(res.reached), duplicates: Number(res.duplicates) };
  }

  /**
   * Opens a long-lived BulkPublish stream for a steady feed of events; see PublishStream. The
   * server publishes each message as it arrives; totals come when the stream is ended.
   */
  async stream(): Promise<PublishStream> {
    const md = await metadataFor(this.token);
    return new PublishStream(this.client, md);
  }

}

type BulkCall = grpc.ClientWritableStream<unknown>;

/**
 * Fire-and-forget publishing over one BulkPublish stream. `publish()` checks and queues an event;
 * every event queued in one turn of the event loop goes out as one message (≤ 1000 events), and
 * while HTTP/2 flow control holds the stream back the queue grows (see `pending`). There is no
 * per-event reply: `end()` resolves with the totals; if the server fails the stream (a bad event
 * names its field as events[i] of its message), `publish()` throws and `end()` rejects with that.
 */
export class PublishStream {
  private readonly call: BulkCall;
  private queue: ReturnType<typeof toWireEvent>[] = [];
  private scheduled = false;
  private blocked = false;
  private ended = false;
  private halfClosed = false;
  private failure: AmbitError | null = null;
  private readonly result: Promise<BulkPublishResult>;
  private sent = 0;

  constructor(client: grpc.Client, md: grpc.Metadata) {
    let call!: BulkCall;
    this.result = new Promise<BulkPublishResult>((resolve, reject) => {
      type Start = (md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res?: BulkPublishResponse) => void) => BulkCall;
      call = (client as unknown as Record<string, Start>).bulkPublish.call(client, md, (err, res) => {
        if (err !== null) {
          this.failure = withPublishOutcome(AmbitError.from(err));
          this.queue = [];
          reject(this.failure);
        } else resolve({ accepted: Number(res!.accepted), reached: Number(res!.reached), duplicates: Number(res!.duplicates) });
      });
    });
    this.result.catch(() => {});
    this.call = call;
    this.call.on('drain', () => {
      this.blocked = false;
      this.flush();
    });
  }

  /** Events queued, not yet handed to the stream. */
  get pending(): number {
    return this.queue.length;
  }

  /** Events handed to the stream so far. */
  get published(): number {
    return this.sent;
  }

  publish(event: EventInput): void {
    if (this.failure !== null) throw this.failure;
    if (this.ended) throw new AmbitError(grpc.status.FAILED_PRECONDITION, 'sdk: the publish stream was ended');
    this.queue.push(toWireEvent('event', event));
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  private flush(): void {
    while (this.queue.length > 0 && !this.blocked && this.failure === null) {
      const events = this.queue.length <= MAX_EVENTS_PER_MESSAGE ? this.queue : this.queue.slice(0, MAX_EVENTS_PER_MESSAGE);
      this.queue = this.queue.length <= MAX_EVENTS_PER_MESSAGE ? [] : this.queue.slice(MAX_EVENTS_PER_MESSAGE);
      this.sent += events.length;
      if (!this.call.write({ events })) this.blocked = true;
    }
    if (this.ended && !this.halfClosed && this.queue.length === 0 && !this.blocked && this.failure === null) {
      this.halfClosed = true;
      this.call.end();
    }
  }

  /** Sends what is queued, half-closes and resolves with the server's totals. */
  end(): Promise<BulkPublishResult> {
    if (!this.ended) {
      this.ended = true;
      if (this.failure === null) this.flush();
    }
    return this.result;
  }

  /** Abandons the stream (CANCELLED); queued events are dropped. */
  cancel(): void {
    this.ended = true;
    this.queue = [];
    this.call.cancel();
  }
}
