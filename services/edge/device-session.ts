/**
 * One device's `DeviceService.Connect` stream: hello/welcome, location updates (the hot path: a
 * range check and two writes), subscription requests answered in order, acks, and notifications
 * pulled from the hub as fast as HTTP/2 flow control lets them drain. The newest stream of a
 * device supersedes the one before it; a stream lives no longer than its token.
 */
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { type Limits, checkId, checkLat, checkLon, inRange } from '../../src/model/limits.js';
import { type ConnectRequest, ConnectRequestSchema, type ConnectResponse, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { isMalformed } from '../../api/rpc.js';
import type { Principal } from './auth.js';
import { ApiError, type StatusInfo, requestStatus, toSubscription } from './convert.js';
import { type Delivery, type DeviceSubscription, type DrainableInbox, type Hub, type Inbox, type LocationWriter, compareDeliveryIds, parseDeliveryId } from '../hub/port.js';
import type { Logger } from 'pino';
import type { Counters } from './counters.js';
import type { SeenTracker } from './seen.js';
import type { ExpiryClock, Expiring } from './expiry.js';
import type { DeviceStream, StreamListener } from './device-stream.js';
import type { RateLimiter } from './rate-limits.js';
import type { TenantCounts } from './counters.js';

/** What a session needs from the gateway that holds it. */
export interface SessionHost {
  readonly hub: Hub;
  readonly limits: Limits;
  readonly counters: Counters;
  readonly log: Logger;
  /** Notifications pulled from the hub per read. */
  readonly sendBatch: number;
  /** The open session of each device. */
  readonly sessions: Map<string, DeviceSession>;
  /** Counts or logs a failed request and says how to answer it. */
  reject(err: unknown, what: string): StatusInfo;
  /** Ends streams whose token expired. */
  readonly expiry: ExpiryClock;
  /** Clock (ms since the epoch), for token expiry. */
  now(): number;
  /** Notes the devices whose streams open and close (when they were last seen); null: not recorded. */
  readonly seen: SeenTracker | null;
  /** The rate limits of a principal (a device's locations and subscription changes; its tenant's own, if set). */
  limiterOf(p: Principal): RateLimiter;
  /** A subscription in the principal's tenant (the tenant's tag on its filters; as given with tenants off). */
  tenantSubscription(sub: DeviceSubscription, p: Principal, field: string): DeviceSubscription;
}

type Phase = 'hello' | 'opening' | 'open' | 'closed';

/** Where a session's request chain starts (shared: most streams never queue anything). */
const SETTLED: Promise<void> = Promise.resolve();
export class DeviceSession implements Expiring, StreamListener {
  /** The last position the device sent on this stream (NaN before one): the dashboard's map. */
  lastLat = Number.NaN;
  lastLon = Number.NaN;
  private phase: Phase = 'hello';
  private writer: LocationWriter | null = null;
  private inbox: Inbox | null = null;
  /** The last delivery id written to this stream (acks may not go past it). */
  private lastSent = '';
  /** Requests apply in order, each after the one before it answered. */
  private chain: Promise<void> = SETTLED;
  /** Nothing is queued on the chain. */
  private idle = true;
  /** The last ack on its way to the hub (a half-close waits for it). */
  private acking: Promise<void> = SETTLED;
  private drainWaiter: (() => void) | null = null;
  private readsPaused = false;
  /** Until when (ms) locations past the rate are dropped without another reply saying so. */
  private limitedUntil = 0;
  /** The device's tenant's counts (tenants on), else null. */
  private readonly tenantCounts: TenantCounts | null;
  /** The device's rate limits. */
  private readonly limiter: RateLimiter;

  constructor(
    private readonly host: SessionHost,
    private readonly stream: DeviceStream,
    readonly device: string,
    readonly principal: Principal,
  ) {
    this.tenantCounts = host.counters.tenants?.of(principal.tenant ?? '') ?? null;
    this.limiter = host.limiterOf(principal);
  }

  /** Registers the session (superseding an older stream of the device) and starts reading. */
  start(): void {
    const { sessions, counters } = this.host;
    // The newest stream of a device wins: a phone that reconnected leaves a half-open one behind.
    const previous = sessions.get(this.device);
    sessions.set(this.device, this);
    this.host.seen?.note(this.device);
    previous?.close({ code: grpc.status.ABORTED, message: 'superseded by a newer stream of this device', field: '', expected: true });
    counters.connectedDevices = sessions.size;
    this.armExpiry();
    this.stream.attach(this);
  }

  /** The client half-closed: answer what it asked, store its last ack, then end the stream. */
  onHalfClose(): void {
    void Promise.all([this.chain, this.acking]).then(() => {
      if (this.phase === 'closed') return;
      this.finish();
      this.stream.end();
    });
  }

  onGone(): void {
    this.finish();
  }

  /** Ends the stream with `status` (superseded, token expired, server draining). */
  close(status: StatusInfo): void {
    if (this.phase === 'closed') return;
    this.finish();
    this.stream.fail(status);
  }

  /**
   * A stream ends UNAUTHENTICATED when its token expires and the client reconnects with a fresh
   * one (resuming where it left off). One clock serves every stream of the host (expiry.ts).
   */
  private armExpiry(): void {
    this.host.expiry.add(this, this.principal.expiresAt);
  }

  /** The token expired (the host's expiry clock calls it). */
  expire(): void {
    this.close({ code: grpc.status.UNAUTHENTICATED, message: 'token has expired; reconnect with a fresh token', field: '', expected: true });
  }

  private finish(): void {
    if (this.phase === 'closed') return;
    this.phase = 'closed';
    this.host.expiry.remove(this, this.principal.expiresAt);
    const { sessions, counters, log } = this.host;
    if (sessions.get(this.device) === this) sessions.delete(this.device);
    this.host.seen?.note(this.device);
    counters.connectedDevices = sessions.size;
    this.inbox?.close();
    this.drainWaiter?.();
    if (this.readsPaused) {
      this.readsPaused = false;
      counters.streamsHeldBack--;
    }
    if (this.writer !== null) void this.writer.close().catch((err: unknown) => log.warn({ err }, 'location flush failed on stream end'));
  }

  /**
   * The stream's location writer, made at its first location (a stream that sends none, or none
   * yet, holds none); null until the stream is open.
   */
  private openWriter(): LocationWriter | null {
    if (this.writer === null && this.phase === 'open') this.writer = this.host.hub.locationWriter(this.device);
    return this.writer;
  }

  private write(m: ConnectResponse): boolean {
    return this.phase === 'closed' ? true : this.stream.send(m);
  }

  private reply(requestId: string, s: StatusInfo | null): void {
    if (this.write(create(ConnectResponseSchema, { message: { case: 'reply', value: { requestId, status: requestStatus(s) } } })) || this.readsPaused) return;
    // The client is not reading its replies: stop reading its requests until it does, so HTTP/2
    // flow control holds it back instead of this process buffering a reply per request.
    this.readsPaused = true;
    this.host.counters.streamsHeldBack++;
    this.stream.pause();
    const w = (): void => {
      // Registered with every emitter that may drain (grpc-js: the call and its HTTP/2 stream): the others let go.
      this.stream.offDrain(w);
      this.releaseReads();
    };
    this.stream.onceDrain(w);
  }

  private releaseReads(): void {
    if (!this.readsPaused) return;
    this.readsPaused = false;
    this.host.counters.streamsHeldBack--;
    if (this.phase !== 'closed') this.stream.resume();
  }

  /** failStream as a callback, made once a stream needs one (an idle stream holds none). */
  private get fail(): (err: unknown) => void {
    return (this.failFn ??= (err: unknown) => this.failStream(err));
  }
  private failFn: ((err: unknown) => void) | null = null;

  private failStream(err: unknown): void {
    const s = this.host.reject(err, 'Connect');
    this.finish();
    this.stream.fail(s);
  }

  /**
   * Delivery from an inbox that can be drained without waiting (the embedded and node-local
   * hubs): writes what it has, then registers to be called when it has more, or when HTTP/2
   * drains. An idle stream holds one registered callback, no pending promise or suspended call.
   */
  private readonly pump = (): void => {
    const box = this.inbox as DrainableInbox;
    try {
      for (;;) {
        if (this.phase !== 'open') return;
        const batch = box.take(this.host.sendBatch);
        if (batch.length === 0) return box.notify(this.pump);
        if (!this.sendBatch(batch)) {
          // HTTP/2 flow control: stop taking until the client reads; the backlog stays in the hub.
          this.host.counters.sendQueue++;
          this.stream.onceDrain(this.waitDrain());
          return;
        }
      }
    } catch (err) {
      this.failStream(err);
    }
  };

  /** Writes a batch of notifications in one go; false: HTTP/2 flow control holds it back. */
  private sendBatch(batch: readonly Delivery[]): boolean {
    // Encoded and written first: a batch that fails to encode is not counted, nor acknowledgeable.
    const more = this.stream.sendNotifications(batch);
    this.lastSent = batch[batch.length - 1].deliveryId;
    this.host.counters.notificationsSent += batch.length;
    if (this.tenantCounts !== null) this.tenantCounts.notificationsSent += batch.length;
    return more;
  }

  /** Registers for the end of HTTP/2 back-pressure (or the stream's end): then pumps again. */
  private waitDrain(): () => void {
    const w = (): void => this.drained(w);
    this.drainWaiter = w;
    return w;
  }

  private drained(w: () => void): void {
    if (this.drainWaiter !== w) return;
    this.drainWaiter = null;
    this.stream.offDrain(w);
    this.host.counters.sendQueue--;
    this.pump();
  }

  /** Delivery from an inbox that is pulled (Redis). */
  private async deliver(box: Inbox): Promise<void> {
    const counters = this.host.counters;
    while (this.phase === 'open') {
      const batch = await box.pull(this.host.sendBatch);
      if (batch.length === 0 || this.phase !== 'open') return;
      if (!this.sendBatch(batch)) {
        // HTTP/2 flow control: stop pulling until the client reads; the backlog stays in the hub.
        counters.sendQueue++;
        await new Promise<void>((resolve) => {
          this.drainWaiter = resolve;
          this.stream.onceDrain(resolve);
        });
        this.drainWaiter = null;
        counters.sendQueue--;
      }
    }
  }

  private async hello(resumeToken: string): Promise<void> {
    if (resumeToken !== '' && parseDeliveryId(resumeToken) === null) {
      throw new ApiError(grpc.status.INVALID_ARGUMENT, `must be a delivery id ("<ms>-<seq>"), got ${JSON.stringify(resumeToken.slice(0, 40))}`, 'hello.resume_token');
    }
    const box = await this.host.hub.openInbox(this.device, resumeToken === '' ? null : resumeToken);
    if (this.phase !== 'opening') {
      box.close();
      return;
    }
    this.inbox = box;
    this.phase = 'open';
    this.lastSent = box.resumeToken;
    this.write(create(ConnectResponseSchema, { message: { case: 'welcome', value: { deviceId: this.device, resumeToken: box.resumeToken, missed: BigInt(box.missed), stateLost: box.stateLost, stateId: box.stateId } } }));
    if (isDrainable(box)) this.pump();
    else this.deliver(box).catch(this.fail);
  }

  private async request(kind: 'subscribe' | 'replace' | 'unsubscribe', requestId: string, run: () => Promise<void>): Promise<void> {
    // Queued behind a hello that failed, or behind the stream's end: the client was told the
    // stream failed, so the request must not take effect.
    if (this.phase === 'closed') return;
    try {
      await run();
      this.reply(requestId, null);
    } catch (err) {
      const s = this.host.reject(err, `Connect.${kind}`);
      if (!s.expected) return this.failStream(err);
      if (s.field === '') return void this.reply(requestId, s);
      // Name the field from the stream message down: "subscribe.subscription.filters[0]...".
      const rule = s.message.startsWith(`${s.field}: `) ? s.message.slice(s.field.length + 2) : s.message;
      this.reply(requestId, { ...s, field: `${kind}.${s.field}`, message: `${kind}.${s.field}: ${rule}` });
    }
  }

  /** Queues `next` (the chain with one more step) as the chain. */
  private enqueue(next: Promise<void>): void {
    this.chain = next;
    this.idle = false;
    const settled = (): void => {
      if (this.chain === next) this.idle = true;
    };
    next.then(settled, settled);
  }

  private async ack(id: string): Promise<void> {
    this.ackNow(id);
  }

  /** Checks an ack against what this stream sent and moves the inbox's ack point. */
  private ackNow(id: string): void {
    if (this.phase === 'closed') return;
    const refuse = (message: string) => this.reply('', this.host.reject(new ApiError(grpc.status.INVALID_ARGUMENT, message, 'ack.delivery_id'), 'Connect.ack'));
    if (parseDeliveryId(id) === null) return refuse(`must be a delivery id, got ${JSON.stringify(id.slice(0, 40))}`);
    if (this.lastSent === '' || compareDeliveryIds(id, this.lastSent) > 0) {
      return refuse(`acknowledges ${id}, which was not delivered on this stream (last ${this.lastSent || 'none'})`);
    }
    const stored = this.inbox?.ack(id);
    if (stored !== undefined) this.acking = stored.catch(this.fail);
  }

  /**
   * A location past the device's rate: dropped (the newest wins anyway), and said once per wait
   * with a reply without request id, RESOURCE_EXHAUSTED with the wait, so a flood of locations is
   * not answered by a flood of replies.
   */
  private locationLimited(wait: number): void {
    const now = this.host.now();
    if (now < this.limitedUntil) return;
    this.limitedUntil = now + wait;
    this.reply('', this.host.reject(this.limiter.locationError(wait), 'Connect.location'));
  }

  /** A subscription change past the device's rate: answered RESOURCE_EXHAUSTED in its turn; true when refused. */
  private changeLimited(kind: 'subscribe' | 'replace' | 'unsubscribe', requestId: string): boolean {
    const wait = this.limiter.subscriptionChange(this.device);
    if (wait === 0) return false;
    const err = this.limiter.subscriptionChangeError(wait);
    this.enqueue(this.chain.then(() => this.request(kind, requestId, async () => Promise.reject(err))));
    return true;
  }

  onLocation(lat: number, lon: number): void {
    if (this.phase === 'open' || this.phase === 'opening') this.location(lat, lon);
    else if (this.phase === 'hello') this.onMessage(create(ConnectRequestSchema, { message: { case: 'location', value: { lat, lon } } }));
  }

  /** A location request once the stream is past its hello. The hot path: no allocation, no promise. */
  private location(lat: number, lon: number): void {
    if (inRange(lat, lon)) {
      const wait = this.limiter.location(this.device);
      if (wait > 0) return this.locationLimited(wait);
      const writer = this.writer ?? this.openWriter();
      this.lastLat = lat;
      this.lastLon = lon;
      if (writer !== null) writer.update(lat, lon);
      else this.enqueue(this.chain.then(() => this.openWriter()?.update(lat, lon)));
      this.host.counters.locationUpdatesStream++;
      if (this.tenantCounts !== null) this.tenantCounts.locationUpdates++;
    } else {
      this.reply('', this.host.reject(latLonError(lat, lon), 'Connect.location'));
    }
  }

  onMessage(req: ConnectRequest): void {
    if (this.phase === 'closed') return;
    if (isMalformed(req)) return this.failStream(new ApiError(grpc.status.INVALID_ARGUMENT, req.reason, 'request'));
    const m = req.message;
    if (this.phase === 'hello') {
      if (m.case !== 'hello') return this.failStream(new ApiError(grpc.status.FAILED_PRECONDITION, 'the first message of a stream must be hello', 'hello'));
      this.phase = 'opening';
      // Requests sent right behind hello queue on the chain behind it.
      this.enqueue(this.chain.then(() => this.hello(m.value.resumeToken)).catch(this.fail));
      return;
    }
    const { hub, limits } = this.host;
    const device = this.device;
    switch (m.case) {
      case 'location':
        return this.location(m.value.lat, m.value.lon);
      case 'subscribe': {
        const { requestId, subscription } = m.value;
        if (this.changeLimited('subscribe', requestId)) return;
        this.enqueue(this.chain.then(() => this.request('subscribe', requestId, async () => hub.addSubscription(device, this.host.tenantSubscription(toSubscription('subscription', device, subscription, limits), this.principal, 'subscription')))));
        return;
      }
      case 'replace': {
        const { requestId, subscription } = m.value;
        if (this.changeLimited('replace', requestId)) return;
        this.enqueue(this.chain.then(() => this.request('replace', requestId, async () => hub.replaceSubscription(device, this.host.tenantSubscription(toSubscription('subscription', device, subscription, limits), this.principal, 'subscription')))));
        return;
      }
      case 'unsubscribe': {
        const { requestId, subscriptionId } = m.value;
        if (this.changeLimited('unsubscribe', requestId)) return;
        this.enqueue(this.chain.then(() => this.request('unsubscribe', requestId, async () => hub.removeSubscription(device, checkId('subscription_id', subscriptionId, limits)))));
        return;
      }
      case 'ack': {
        const id = m.value.deliveryId;
        // Nothing queued ahead of it (the usual case): applied now, without a promise per ack.
        if (this.idle && this.phase === 'open') this.ackNow(id);
        else this.enqueue(this.chain.then(() => this.ack(id)).catch(this.fail));
        return;
      }
      case 'hello':
        return this.failStream(new ApiError(grpc.status.FAILED_PRECONDITION, 'hello was already sent on this stream', 'hello'));
      default:
        return this.failStream(new ApiError(grpc.status.INVALID_ARGUMENT, 'message must be set (an unknown or empty oneof)', 'message'));
    }
  }
}

function isDrainable(box: Inbox): box is DrainableInbox {
  return typeof (box as Partial<DrainableInbox>).take === 'function' && typeof (box as Partial<DrainableInbox>).notify === 'function';
}

/** Why a position is refused: the model's checks, so the stream says what the unary calls say. */
function latLonError(lat: number, lon: number): unknown {
  try {
    checkLat('location.lat', lat);
    checkLon('location.lon', lon);
  } catch (err) {
    return err;
  }
  return new ApiError(grpc.status.INTERNAL, `position (${lat}, ${lon}) was refused but passes its checks`, 'location');
}
