/**
 * A device's connection to Ambit: one long-lived Connect stream carrying location updates (the
 * hot path: coalesced, latest wins), subscription requests answered by in-order replies, and
 * notifications the application reads as an async iterator and the SDK acknowledges.
 *
 * When the stream ends for a reason worth retrying (UNAVAILABLE, a newer stream of the same device
 * (ABORTED), a network failure, ...), the SDK reconnects with exponential backoff and jitter,
 * resumes delivery after the last notification the application has processed, and re-sends the
 * latest location. Subscriptions are server state and survive the stream; should the server say
 * it lost this device's state (welcome state_lost, or a new state_id), the SDK subscribes again to
 * what the server had confirmed. Notifications are delivered at least once by the server; the SDK
 * drops repeats by delivery id, which increases per device, so the application sees each one once,
 * in order.
 *
 * One file because the stream's life (connect, welcome, reconnect), the requests waiting for it,
 * the acknowledgements and the coalesced location all change together on every stream event.
 */
import type { ConnectResponse, Reply, Welcome } from '../api/gen/ambit/v1/device_pb.js';
import type { Notification as WireNotification } from '../api/gen/ambit/v1/types_pb.js';
import { type BackoffOptions, backoffDelay, resolveBackoff } from './backoff.js';
import { type ChannelStream, type ConnectRequestInit, type DeviceChannel, type TokenSource, checkAddress, isWebSocketAddress, resolveToken } from './channel.js';
import { AmbitError, StatusCode, invalid } from './errors.js';
import type { ClientOptions } from './transport.js';
import { type WebSocketConstructor, WebSocketDeviceChannel } from './websocket-channel.js';
import {
  type Notification,
  type Subscription,
  checkLatLon,
  compareDeliveryIds,
  fromWireNotification,
  fromWireSubscription,
  isDeliveryId,
  toWireSubscription,
} from './types.js';

export type DeviceState = 'connecting' | 'connected' | 'reconnecting' | 'closed';

export interface DeviceOptions extends ClientOptions {
  /**
   * The WebSocket implementation for a ws:// or wss:// address where there is no global one (Node
   * before 22): e.g. the ws package's WebSocket. Default: globalThis.WebSocket.
   */
  webSocket?: WebSocketConstructor;
  /**
   * Resume delivery after this delivery id (e.g. one persisted from `device.resumeToken`). Default:
   * after the last notification the server knows was acknowledged.
   */
  resumeToken?: string;
  /**
   * true (default): a notification is acknowledged once the consumer has taken it and comes back
   * for the next one (or leaves its `for await` loop). false: call `device.ack(n)` yourself.
   */
  autoAck?: boolean;
  /**
   * How long an acknowledgement may wait to go out together with later ones (default 0: at the end
   * of the event-loop turn). A device receiving many notifications sends one ack message per delay
   * instead of one per notification (less uplink traffic and battery, less server CPU); a
   * reconnect may then deliver again what arrived within the last delay. `close()` sends it at once.
   */
  ackDelayMs?: number;
  backoff?: Partial<BackoffOptions>;
  /** How long `AmbitDevice.connect` waits for the first connection (default 15 000 ms). */
  connectTimeoutMs?: number;
  /** Notifications buffered before the SDK stops reading the stream (default 10 000). */
  maxBufferedNotifications?: number;
  /** How long `close()` waits for the server to answer outstanding requests (default 5 000 ms). */
  closeTimeoutMs?: number;
  /** Clock in ms (default Date.now): how long a connection stayed up, for `backoff.resetAfterMs`. */
  now?: () => number;
}

export interface DeviceEventMap {
  /** A stream is open (welcome received). `reconnect` is false for the first one. */
  /**
   * `stateLost`: the server no longer had this device's state (an embedded server restarted, or a
   * Redis deployment lost its data); the SDK has subscribed again to every subscription it had
   * made (`stats.resubscribed`), and delivery starts afresh.
   */
  connected: { deviceId: string; resumeToken: string; missed: number; reconnect: boolean; stateLost: boolean };
  /** An open stream ended. */
  disconnected: { error: AmbitError; willReconnect: boolean };
  /** The next attempt starts after `delayMs`; `error` is why the last stream or attempt ended. */
  reconnecting: { attempt: number; delayMs: number; error: AmbitError };
  /** The device is closed: by `close()` (error null) or by an error not worth retrying. */
  closed: { error: AmbitError | null };
  /** The server rejected something that was not a request (an ack or location): an SDK bug, reported rather than thrown. */
  warning: { error: AmbitError };
}

export interface DeviceCounters {
  /** updateLocation() calls. */
  locationUpdates: number;
  /** Location messages written to the stream. */
  locationsSent: number;
  /** Updates replaced by a newer one before they were sent. */
  locationsCoalesced: number;
  /** Notifications handed to the application (after dedupe). */
  notifications: number;
  /** Repeated deliveries dropped. */
  duplicates: number;
  acksSent: number;
  /** Subscriptions made again after the server lost the device's state. */
  resubscribed: number;
  /** Streams opened after the first one. */
  reconnects: number;
}

type Kind = 'subscribe' | 'replace' | 'unsubscribe';

interface Pending {
  requestId: string;
  kind: Kind;
  message: unknown;
  resolve: () => void;
  reject: (err: AmbitError) => void;
}

interface Waiter {
  resolve: (r: IteratorResult<Notification>) => void;
  reject: (err: unknown) => void;
}

type Timer = ReturnType<typeof setTimeout>;

/** Runs `fn` after this turn's I/O (setImmediate where there is one, as in Node; else a zero timeout). */
const soon: (fn: () => void) => void = typeof setImmediate === 'function' ? (fn) => void setImmediate(fn) : (fn) => void setTimeout(fn, 0);

/** A timer that does not keep a Node process alive (browsers have no such notion). */
function unrefTimer(t: Timer): Timer {
  (t as { unref?: () => void }).unref?.();
  return t;
}

// Not retried: the same request would fail the same way.
const FATAL = new Set<number>([
  StatusCode.INVALID_ARGUMENT,
  StatusCode.FAILED_PRECONDITION,
  StatusCode.PERMISSION_DENIED,
  StatusCode.UNIMPLEMENTED,
  StatusCode.NOT_FOUND,
  StatusCode.ALREADY_EXISTS,
  StatusCode.OUT_OF_RANGE,
]);

export { encodeLocation } from './channel.js';

export class AmbitDevice {
  readonly address: string;
  private readonly token: TokenSource;
  private readonly backoff: BackoffOptions;
  private readonly autoAck: boolean;
  private readonly maxBuffered: number;
  private readonly closeTimeoutMs: number;
  private readonly deadlineMs: number;
  private readonly now: () => number;
  private readonly channel: DeviceChannel;
  private readonly listeners = new Map<keyof DeviceEventMap, Set<(e: never) => void>>();
  private readonly counters: DeviceCounters = { locationUpdates: 0, locationsSent: 0, locationsCoalesced: 0, notifications: 0, duplicates: 0, acksSent: 0, resubscribed: 0, reconnects: 0 };

  private _state: DeviceState = 'connecting';
  private _deviceId = '';
  private stream: ChannelStream | null = null;
  /** Increments per stream; events of an older stream are ignored. */
  private gen = 0;
  private welcomed = false;
  private everConnected = false;
  private connectedAt = 0;
  private attempt = 0;
  private timer: Timer | null = null;
  private lastError: AmbitError | null = null;
  private fatal: AmbitError | null = null;
  private fatalReported = false;
  private closing: Promise<void> | null = null;
  private closeDone: (() => void) | null = null;
  private readyResolve!: () => void;
  private readyReject!: (err: AmbitError) => void;
  private readonly readyPromise: Promise<void>;

  // requests
  private nextRequestId = 1;
  /** The subscriptions the server has confirmed, by id: made again should it lose them. */
  private readonly held = new Map<string, Subscription>();
  /** Subscriptions to make again after a state loss, until the server confirms each (kept across reconnects). */
  private readonly remake = new Map<string, Subscription>();
  /** Increments at every state loss: notifications of an older state are not acknowledged. */
  private stateGen = 0;
  private readonly genOf = new WeakMap<Notification, number>();
  /** The store of this device's state at the last welcome ('' before one). */
  private stateId = '';
  private readonly queue: Pending[] = [];
  private readonly inflight: Pending[] = [];

  // location (coalesced)
  private lat = 0;
  private lon = 0;
  private hasLocation = false;
  private locationDirty = false;
  private locationScheduled = false;
  private locationInFlight = false;

  // notifications
  private buffer: Notification[] = [];
  private head = 0;
  private readonly waiters: Waiter[] = [];
  private paused = false;
  /** Highest delivery id handed to the application: anything not above it is a repeat. */
  private highestSeen = '';
  /** The highest id delivered before the server last lost this device's state ('' if it never did). */
  private lostUpTo = '';
  /** Highest delivery id the application has processed: the resume point. */
  private acked = '';
  /** Highest id the server has sent on the current stream (or its resume point): acks may not pass it. */
  private streamLast = '';
  private ackSent = '';
  private ackScheduled = false;
  private readonly ackDelayMs: number;
  /** Auto-ack: taken by the consumer, acknowledged when it asks for the next one. */
  private taken: Notification | null = null;

  /** Starts connecting at once; see `AmbitDevice.connect` to wait for the first connection. */
  constructor(address: string, token: TokenSource, options: DeviceOptions = {}) {
    this.address = checkAddress(address);
    this.token = token;
    this.backoff = resolveBackoff(options.backoff);
    this.autoAck = options.autoAck ?? true;
    this.ackDelayMs = nonNegativeInt('ackDelayMs', options.ackDelayMs ?? 0);
    if (this.ackDelayMs > 2 ** 31 - 1) throw invalid('ackDelayMs', `must be at most ${2 ** 31 - 1} ms, got ${this.ackDelayMs}`);
    this.maxBuffered = positiveInt('maxBufferedNotifications', options.maxBufferedNotifications ?? 10_000);
    this.closeTimeoutMs = positiveInt('closeTimeoutMs', options.closeTimeoutMs ?? 5_000);
    this.deadlineMs = positiveInt('deadlineMs', options.deadlineMs ?? 30_000);
    this.now = options.now ?? Date.now;
    if (options.resumeToken !== undefined && options.resumeToken !== '') {
      if (!isDeliveryId(options.resumeToken)) throw invalid('resumeToken', `must be a delivery id ("<ms>-<seq>"), got ${JSON.stringify(options.resumeToken)}`);
      this.acked = options.resumeToken;
    }
    this.readyPromise = new Promise<void>((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.readyPromise.catch(() => {});
    this.channel = this.channelFor(this.address, options, this.backoff);
    void this.open();
  }

  /**
   * The transport of `address`: WebSocket for a ws:// or wss:// URL. This class speaks WebSocket
   * only (it runs in browsers and React Native); the Node entry's AmbitDevice (sdk/index.ts) adds
   * gRPC for "host:port" addresses.
   */
  protected channelFor(address: string, options: DeviceOptions, _backoff: BackoffOptions): DeviceChannel {
    if (isWebSocketAddress(address)) return new WebSocketDeviceChannel(address, options.webSocket);
    throw new AmbitError(StatusCode.INVALID_ARGUMENT, `sdk: this build speaks WebSocket only: the address must be a ws:// or wss:// URL, got ${JSON.stringify(address)}`, 'address');
  }

  /** Connects and resolves once the first stream is open; rejects (and closes) on an error not worth retrying or after `connectTimeoutMs`. */
  static async connect<T extends AmbitDevice>(this: new (address: string, token: TokenSource, options?: DeviceOptions) => T, address: string, token: TokenSource, options: DeviceOptions = {}): Promise<T> {
    const d = new this(address, token, options);
    try {
      await d.ready(options.connectTimeoutMs ?? 15_000);
    } catch (err) {
      await d.close();
      throw err;
    }
    return d;
  }

  get state(): DeviceState {
    return this._state;
  }

  /** The device id the server knows this token by ('' before the first connection). */
  get deviceId(): string {
    return this._deviceId;
  }

  /** The last processed delivery id: persist it and pass it back as `resumeToken` to resume there. */
  get resumeToken(): string {
    return this.acked;
  }

  get stats(): Readonly<DeviceCounters> {
    return { ...this.counters };
  }

  /** Resolves once a stream is open (immediately when one is). */
  ready(timeoutMs?: number): Promise<void> {
    if (timeoutMs === undefined) return this.readyPromise;
    let timer: Timer;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const why = this.lastError === null ? '' : ` (last error: ${this.lastError.message})`;
        reject(new AmbitError(StatusCode.DEADLINE_EXCEEDED, `sdk: no connection to ${this.address} within ${timeoutMs} ms${why}`, '', { cause: this.lastError ?? undefined }));
      }, timeoutMs);
    });
    return Promise.race([this.readyPromise, timeout]).finally(() => clearTimeout(timer));
  }

  /** Listens for a connection event; returns a function that stops listening. */
  on<K extends keyof DeviceEventMap>(name: K, listener: (e: DeviceEventMap[K]) => void): () => void {
    let set = this.listeners.get(name);
    if (set === undefined) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(listener as (e: never) => void);
    return () => set.delete(listener as (e: never) => void);
  }

  // ---- requests ----

  /** Adds a subscription; rejects with ALREADY_EXISTS (field subscribe.subscription.id) if the device has one with that id. */
  subscribe(sub: Subscription): Promise<void> {
    return this.request('subscribe', (requestId) => ({ message: { case: 'subscribe', value: { requestId, subscription: toWireSubscription('subscribe.subscription', sub) } } })).then(() => this.confirmed(sub.id, sub));
  }

  /** Replaces a subscription in one step; NOT_FOUND if there is none with that id. */
  replace(sub: Subscription): Promise<void> {
    return this.request('replace', (requestId) => ({ message: { case: 'replace', value: { requestId, subscription: toWireSubscription('replace.subscription', sub) } } })).then(
      () => this.confirmed(sub.id, sub),
      (err: AmbitError) => this.refused(sub.id, err),
    );
  }

  /** Removes a subscription; NOT_FOUND if there is none with that id. */
  unsubscribe(subscriptionId: string): Promise<void> {
    return this.request('unsubscribe', (requestId) => ({ message: { case: 'unsubscribe', value: { requestId, subscriptionId } } })).then(
      () => this.confirmed(subscriptionId, null),
      (err: AmbitError) => this.refused(subscriptionId, err),
    );
  }

  /** The server now holds `sub` under `id` (null: none): what a state loss makes again. */
  private confirmed(id: string, sub: Subscription | null): void {
    if (sub === null) this.held.delete(id);
    else this.held.set(id, sub);
    this.remake.delete(id);
  }

  /** NOT_FOUND: the server holds none under `id` (removed by an operator or another client). */
  private refused(id: string, err: AmbitError): never {
    if (err.code === StatusCode.NOT_FOUND) {
      this.held.delete(id);
      this.remake.delete(id);
    }
    throw err;
  }

  /** The device's subscriptions (a unary call beside the stream; gRPC only). */
  async listSubscriptions(): Promise<Subscription[]> {
    const res = await this.channel.listSubscriptions(await resolveToken(this.token), this.deadlineMs);
    return res.subscriptions.map(fromWireSubscription);
  }

  private request(kind: Kind, build: (requestId: string) => unknown): Promise<void> {
    if (this._state === 'closed') return Promise.reject(this.closedError());
    const requestId = String(this.nextRequestId++);
    let message: unknown;
    try {
      message = build(requestId);
    } catch (err) {
      return Promise.reject(AmbitError.from(err));
    }
    return new Promise<void>((resolve, reject) => {
      const p: Pending = { requestId, kind, message, resolve, reject };
      if (this.welcomed && this.stream !== null) {
        this.inflight.push(p);
        this.stream.write(message as ConnectRequestInit);
      } else this.queue.push(p);
    });
  }

  // ---- location ----

  /**
   * Reports the device's position. Never blocks: the newest position replaces any not yet sent,
   * and at most one is in flight (one per event-loop turn); while disconnected only the last one
   * is kept, and it is sent again on every reconnect. Throws INVALID_ARGUMENT for a position out
   * of range.
   */
  updateLocation(lat: number, lon: number): void {
    if (this._state === 'closed') throw this.closedError();
    checkLatLon('location', lat, lon);
    this.counters.locationUpdates++;
    if (this.locationDirty) this.counters.locationsCoalesced++;
    this.lat = lat;
    this.lon = lon;
    this.hasLocation = true;
    this.locationDirty = true;
    this.scheduleLocation();
  }

  /** The last position given to updateLocation, or null. */
  get location(): { lat: number; lon: number } | null {
    return this.hasLocation ? { lat: this.lat, lon: this.lon } : null;
  }

  private scheduleLocation(): void {
    if (this.locationScheduled) return;
    this.locationScheduled = true;
    soon(this.locationTick);
  }

  private readonly locationTick = (): void => {
    this.locationScheduled = false;
    this.flushLocation();
  };

  private flushLocation(): void {
    const s = this.stream;
    if (!this.locationDirty || !this.welcomed || this.locationInFlight || s === null) return;
    this.locationDirty = false;
    this.locationInFlight = true;
    this.counters.locationsSent++;
    const gen = this.gen;
    // The callback fires once the transport has handed the message on: the next one waits for it.
    s.writeLocation(this.lat, this.lon, () => {
      if (gen !== this.gen) return;
      this.locationInFlight = false;
      if (this.locationDirty) this.scheduleLocation();
    });
  }

  // ---- notifications ----

  /**
   * The device's notifications, each once and in delivery order, across reconnects. One consumer
   * at a time. Ends after `close()`; throws the error that closed the device otherwise.
   */
  notifications(): AsyncIterableIterator<Notification> {
    const it: AsyncIterableIterator<Notification> = {
      next: () => this.take(),
      return: () => {
        this.ackTaken();
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }

  /** Acknowledges every notification up to and including this one (explicit-ack mode, or early). */
  ack(n: Notification | string): void {
    const id = typeof n === 'string' ? n : n.deliveryId;
    if (!isDeliveryId(id)) throw invalid('deliveryId', `must be a delivery id ("<ms>-<seq>"), got ${JSON.stringify(id)}`);
    // One delivered before the server lost this device's state: nothing left there to acknowledge
    // (its id means nothing to the new log). A notification object knows its state; an id string
    // is taken for an old one when it is not above the last id of the lost state.
    if (typeof n !== 'string' && (this.genOf.get(n) ?? 0) !== this.stateGen) return;
    if (typeof n === 'string' && this.lostUpTo !== '' && compareDeliveryIds(id, this.lostUpTo) <= 0) return;
    if (compareDeliveryIds(id, this.highestSeen) > 0) throw invalid('deliveryId', `${id} was not delivered yet (last delivered ${this.highestSeen || 'none'})`);
    if (compareDeliveryIds(id, this.acked) <= 0) return;
    this.acked = id;
    this.scheduleAck();
  }

  private ackTaken(): void {
    if (this.taken !== null) {
      const n = this.taken;
      this.taken = null;
      this.ack(n);
    }
  }

  private take(): Promise<IteratorResult<Notification>> {
    if (this.autoAck) this.ackTaken();
    if (this.head < this.buffer.length) {
      const n = this.buffer[this.head++];
      if (this.head === this.buffer.length) {
        this.buffer = [];
        this.head = 0;
      } else if (this.head > 1024 && this.head * 2 > this.buffer.length) {
        this.buffer = this.buffer.slice(this.head);
        this.head = 0;
      }
      if (this.paused && this.buffer.length - this.head <= this.maxBuffered / 2) {
        this.paused = false;
        this.stream?.resume();
      }
      if (this.autoAck) this.taken = n;
      return Promise.resolve({ value: n, done: false });
    }
    if (this._state === 'closed') {
      if (this.fatal !== null && !this.fatalReported) {
        this.fatalReported = true;
        return Promise.reject(this.fatal);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private scheduleAck(): void {
    if (this.ackScheduled) return;
    this.ackScheduled = true;
    const send = (): void => {
      this.ackScheduled = false;
      this.flushAck();
    };
    if (this.ackDelayMs === 0) soon(send);
    // Unreferenced: a pending ack does not keep the process alive (close() sends it).
    else unrefTimer(setTimeout(send, this.ackDelayMs));
  }

  /** Acks are cumulative: one message carries the highest processed id this stream has delivered. */
  private flushAck(): void {
    if (!this.welcomed || this.stream === null) return;
    const target = compareDeliveryIds(this.acked, this.streamLast) <= 0 ? this.acked : this.streamLast;
    if (compareDeliveryIds(target, this.ackSent) <= 0) return;
    this.ackSent = target;
    this.counters.acksSent++;
    this.stream.write({ message: { case: 'ack', value: { deliveryId: target } } });
  }

  // ---- the stream ----

  private async open(): Promise<void> {
    if (this._state === 'closed') return;
    const gen = ++this.gen;
    let token: string;
    try {
      token = await resolveToken(this.token);
    } catch (err) {
      if (gen === this.gen) this.ended(gen, AmbitError.from(err));
      return;
    }
    if (gen !== this.gen || this.isClosed()) return;
    this.welcomed = false;
    this.locationInFlight = false;
    this.paused = false;
    let s: ChannelStream;
    try {
      s = this.channel.connect(token, {
        message: (m: ConnectResponse) => {
          if (gen === this.gen) this.onMessage(m);
        },
        ended: (err: AmbitError) => {
          if (gen === this.gen) this.ended(gen, err);
        },
      });
    } catch (err) {
      // A transport that cannot even start (a malformed URL): as a failed attempt.
      if (gen === this.gen) this.ended(gen, AmbitError.from(err));
      return;
    }
    if (gen !== this.gen) return;
    this.stream = s;
    s.write({ message: { case: 'hello', value: { resumeToken: this.acked } } });
  }

  private onMessage(m: ConnectResponse): void {
    switch (m.message.case) {
      case 'notification':
        return this.onNotification(m.message.value);
      case 'reply':
        return this.onReply(m.message.value);
      case 'welcome':
        return this.onWelcome(m.message.value);
      default:
        return;
    }
  }

  /**
   * Makes `sub` again on the current stream (after a state loss), until the server confirms it:
   * a stream that ends first sends it on the next one; a rate limit sends it again once its wait
   * is over (a device with more subscriptions than a minute's allowance gets them all back).
   */
  private remakeOne(id: string, sub: Subscription): void {
    const s = this.stream;
    if (s === null || !this.welcomed) return; // the next welcome sends it
    const gen = this.gen;
    const requestId = String(this.nextRequestId++);
    const message = { message: { case: 'subscribe', value: { requestId, subscription: toWireSubscription('subscribe.subscription', sub) } } };
    const settled = () => {
      if (this.remake.get(id) === sub) this.remake.delete(id);
    };
    this.inflight.push({
      requestId,
      kind: 'subscribe',
      message,
      resolve: settled,
      reject: (error) => {
        // The stream ended first: the next welcome sends it again.
        if (error.code === StatusCode.UNAVAILABLE || error.code === StatusCode.ABORTED) return;
        if (error.code === StatusCode.RESOURCE_EXHAUSTED) {
          unrefTimer(
            setTimeout(() => {
              if (gen === this.gen && this.remake.get(id) === sub) this.remakeOne(id, sub);
            }, Math.max(1, error.retryAfterMs ?? 1000)),
          );
          return;
        }
        settled();
        // ALREADY_EXISTS: made meanwhile by another client of the device.
        if (error.code !== StatusCode.ALREADY_EXISTS) this.emit('warning', { error });
      },
    });
    s.write(message);
  }

  private onWelcome(w: Welcome): void {
    const reconnect = this.everConnected;
    this.welcomed = true;
    this.everConnected = true;
    this.connectedAt = this.now();
    this.lastError = null;
    if (reconnect) this.counters.reconnects++;
    this._state = 'connected';
    this._deviceId = w.deviceId;
    this.streamLast = w.resumeToken;
    this.ackSent = w.resumeToken;
    // The server lost this device's state: its delivery ids start again, and the subscriptions
    // it had confirmed are made again, ahead of what waited for the stream.
    const lost = w.stateLost || (this.stateId !== '' && w.stateId !== '' && w.stateId !== this.stateId);
    if (w.stateId !== '') this.stateId = w.stateId;
    if (lost) {
      if (compareDeliveryIds(this.highestSeen, this.lostUpTo) > 0) this.lostUpTo = this.highestSeen;
      this.highestSeen = this.acked = w.resumeToken;
      this.stateGen++;
      this.taken = null;
      for (const [id, sub] of this.held) this.remake.set(id, sub);
      this.counters.resubscribed += this.held.size;
    }
    // A fresh SDK resumes where the server's acks are.
    if (compareDeliveryIds(w.resumeToken, this.acked) > 0) this.acked = w.resumeToken;
    // What waited for the stream goes first, in order; then listeners hear of it.
    const s = this.stream!;
    // Made again until confirmed: a stream that ends before the reply sends them on the next one.
    for (const [id, sub] of this.remake) this.remakeOne(id, sub);
    for (const p of this.queue.splice(0)) {
      this.inflight.push(p);
      s.write(p.message as ConnectRequestInit);
    }
    if (this.hasLocation) {
      this.locationDirty = true;
      this.flushLocation();
    }
    this.flushAck();
    this.readyResolve();
    this.emit('connected', { deviceId: w.deviceId, resumeToken: w.resumeToken, missed: Number(w.missed), reconnect, stateLost: lost });
  }

  private onReply(r: Reply): void {
    const code = r.status?.code ?? 0;
    const error = (): AmbitError => {
      const e = new AmbitError(code, r.status?.message ?? '', r.status?.field ?? '');
      if ((r.status?.retryAfterMs ?? 0) > 0) e.retryAfterMs = r.status!.retryAfterMs;
      return e;
    };
    const i = r.requestId === '' ? -1 : this.inflight.findIndex((p) => p.requestId === r.requestId);
    if (i < 0) {
      // A reply to no request: a refused location (out of range, or past the device's rate).
      if (code !== 0) this.emit('warning', { error: error() });
      return;
    }
    const [p] = this.inflight.splice(i, 1);
    if (code === 0) p.resolve();
    else p.reject(error());
  }

  private onNotification(wire: WireNotification): void {
    const id = wire.deliveryId;
    if (compareDeliveryIds(id, this.streamLast) > 0) this.streamLast = id;
    if (compareDeliveryIds(id, this.highestSeen) <= 0) {
      // A repeat after a reconnect: the application has it already (buffered or processed).
      this.counters.duplicates++;
      this.scheduleAck();
      return;
    }
    this.highestSeen = id;
    this.counters.notifications++;
    const n = fromWireNotification(wire);
    if (this.stateGen !== 0) this.genOf.set(n, this.stateGen);
    const w = this.waiters.shift();
    if (w !== undefined) {
      if (this.autoAck) this.taken = n;
      w.resolve({ value: n, done: false });
      return;
    }
    this.buffer.push(n);
    if (!this.paused && this.buffer.length - this.head >= this.maxBuffered && this.stream !== null) {
      // The application is not keeping up: stop reading; HTTP/2 flow control leaves the backlog on the server.
      this.paused = true;
      this.stream.pause();
    }
  }

  /** A stream (or an attempt) ended. */
  private ended(gen: number, err: AmbitError): void {
    if (gen !== this.gen) return;
    const wasOpen = this.welcomed;
    this.stream = null;
    this.welcomed = false;
    this.locationInFlight = false;
    this.paused = false;
    this.lastError = err;
    for (const p of this.inflight.splice(0)) {
      p.reject(
        new AmbitError(StatusCode.UNAVAILABLE, `sdk: the stream ended before the reply to ${p.kind} request ${p.requestId}; it may or may not have been applied (${err.message})`, '', { cause: err }),
      );
    }
    if (this._state === 'closed') {
      this.closeDone?.();
      return;
    }
    if (wasOpen && this.now() - this.connectedAt >= this.backoff.resetAfterMs) this.attempt = 0;
    // An expired token may be renewed by a token function; a fixed token would fail again.
    const retry = !FATAL.has(err.code) && (err.code !== StatusCode.UNAUTHENTICATED || (typeof this.token === 'function' && this.everConnected));
    if (wasOpen) this.emit('disconnected', { error: err, willReconnect: retry });
    if (!retry) return this.fail(err);
    const delayMs = backoffDelay(this.backoff, this.attempt++);
    this._state = this.everConnected ? 'reconnecting' : 'connecting';
    this.emit('reconnecting', { attempt: this.attempt, delayMs, error: err });
    if (this.isClosed()) return; // a listener closed the device
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.open();
    }, delayMs);
  }

  /** Closed by an error not worth retrying. */
  private fail(err: AmbitError): void {
    this._state = 'closed';
    this.fatal = err;
    this.closing = Promise.resolve();
    for (const p of this.queue.splice(0)) p.reject(err);
    this.readyReject(err);
    const waiters = this.waiters.splice(0);
    if (waiters.length > 0) {
      this.fatalReported = true;
      waiters[0].reject(err);
      for (const w of waiters.slice(1)) w.resolve({ value: undefined, done: true });
    }
    this.channel.close();
    this.emit('closed', { error: err });
  }

  /**
   * Ends the device: sends the pending ack and location, half-closes the stream so the server
   * answers outstanding requests, waits for it (up to closeTimeoutMs), and ends notifications().
   * Requests not yet sent are rejected with CANCELLED.
   */
  close(): Promise<void> {
    if (this.closing !== null) return this.closing;
    this._state = 'closed';
    this.closing = (async () => {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      const cancelled = this.closedError();
      for (const p of this.queue.splice(0)) p.reject(cancelled);
      this.readyReject(cancelled);
      const s = this.stream;
      if (s !== null) {
        const done = new Promise<void>((resolve) => (this.closeDone = resolve));
        if (this.welcomed) {
          if (this.autoAck) this.ackTaken();
          this.flushAck();
          this.locationInFlight = false;
          this.flushLocation();
          s.end();
        } else s.cancel();
        const t = setTimeout(() => s.cancel(), this.closeTimeoutMs);
        let last: Timer | undefined;
        await Promise.race([done, new Promise<void>((resolve) => (last = setTimeout(resolve, this.closeTimeoutMs + 1000)))]);
        clearTimeout(t);
        clearTimeout(last);
      } else this.gen++;
      for (const w of this.waiters.splice(0)) w.resolve({ value: undefined, done: true });
      this.buffer = [];
      this.head = 0;
      this.channel.close();
      this.emit('closed', { error: null });
    })();
    return this.closing;
  }

  private isClosed(): boolean {
    return this._state === 'closed';
  }

  private closedError(): AmbitError {
    return this.fatal ?? new AmbitError(StatusCode.CANCELLED, 'sdk: the device is closed');
  }

  private emit<K extends keyof DeviceEventMap>(name: K, e: DeviceEventMap[K]): void {
    const set = this.listeners.get(name);
    if (set === undefined) return;
    for (const fn of [...set]) {
      try {
        (fn as (e: DeviceEventMap[K]) => void)(e);
      } catch (err) {
        // A listener's bug must not break the connection; surface it where it would have gone.
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }
}

function nonNegativeInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 0) throw invalid(name, `must be an integer >= 0, got ${String(v)}`);
  return v;
}

function positiveInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw invalid(name, `must be an integer >= 1, got ${String(v)}`);
  return v;
}
