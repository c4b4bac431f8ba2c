/**
 * The wire between gateway processes and the process that holds the embedded hub on the same
 * node (`AMBIT_GATEWAYS=N` without Redis): messages of a structured-clone channel (node:cluster's
 * IPC pipe with V8 serialization, or a MessagePort), each one a batch of everything one side had
 * to say within one event-loop turn. V8 serialization keeps shared objects shared within a
 * message, so an event that reaches many devices of one gateway crosses once per batch.
 *
 * `LinkedHub` (linked.ts) is the gateway side, `HubServer` (hub-server.ts) the hub side.
 */
import type { MessagePort } from 'node:worker_threads';
import { AmbitError, type ErrorCode, ValidationError } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import type { DeviceSubscription } from './port.js';

/** Gateway → hub. `i`: the request's number, answered by a `Reply` with the same `i`. */
export type Request =
  | { o: 'add' | 'replace'; i: number; d: string; s: DeviceSubscription }
  | { o: 'remove'; i: number; d: string; id: string }
  | { o: 'list' | 'info'; i: number; d: string }
  | { o: 'locs'; i: number; u: PositionUpdate[] }
  | { o: 'pub'; i: number; e: Event[] }
  | { o: 'open'; i: number; d: string; r: string | null }
  /** Pull up to `n` notifications of inbox `b` (answered when there are some, or [] once closed). */
  | { o: 'pull'; i: number; b: number; n: number }
  | { o: 'stats'; i: number }
  // One-way: no reply.
  | { o: 'ack'; b: number; id: string }
  | { o: 'shut'; b: number }
  /** Opens location writer `w` for device `d`. */
  | { o: 'w'; w: number; d: string }
  /** The newest position of each listed writer: `c[2k], c[2k+1]` are writer `w[k]`'s lat, lon. */
  | { o: 'wu'; w: Int32Array; c: Float64Array }
  | { o: 'wx'; w: number };

export interface WireError {
  /** AmbitError code, or '' for any other error. */
  c: ErrorCode | '';
  /** The message without the `field: ` prefix AmbitError adds. */
  m: string;
  f?: string;
  /** A ValidationError's rule. */
  r?: string;
}

/** Hub → gateway. */
export type Reply = { i: number; v: unknown } | { i: number; e: WireError };

/** One end of a message channel. */
export interface Link {
  post(batch: unknown[]): void;
  /** `onBatch` for each message; `onClose` once the other end is gone. */
  listen(onBatch: (batch: unknown[]) => void, onClose: () => void): void;
}

interface ProcessLike {
  send?(message: unknown): boolean;
  connected?: boolean;
  on(event: 'message', fn: (m: unknown) => void): unknown;
  on(event: 'disconnect', fn: () => void): unknown;
}

/** Batches are arrays; anything else on the channel (the supervisor's own messages) is not ours. */
const isBatch = (m: unknown): m is unknown[] => Array.isArray(m);

/** A child process's channel to its parent, or a cluster worker as its primary sees it. */
export function processLink(p: ProcessLike): Link {
  if (typeof p.send !== 'function') throw new Error('hub link: this process has no channel to a parent process');
  const send = p.send.bind(p);
  return {
    post: (batch) => {
      if (p.connected === false) return;
      try {
        send(batch);
      } catch {
        // The channel closed meanwhile: 'disconnect' follows and ends the link.
      }
    },
    listen: (onBatch, onClose) => {
      p.on('message', (m) => {
        if (isBatch(m)) onBatch(m);
      });
      p.on('disconnect', onClose);
    },
  };
}

/** One end of a worker_threads MessagePort pair (tests; a hub and gateways in threads). */
export function portLink(port: MessagePort): Link {
  return {
    post: (batch) => port.postMessage(batch),
    listen: (onBatch, onClose) => {
      port.on('message', (m: unknown) => {
        if (isBatch(m)) onBatch(m);
      });
      port.on('close', onClose);
    },
  };
}

/**
 * What one side sends, gathered until the end of the event-loop turn and posted as one message.
 * `beforeFlush` lets the owner add what it coalesces (location updates) at the end of the batch.
 */
export class Outbox {
  private batch: unknown[] = [];
  private scheduled = false;
  closed = false;

  constructor(
    private readonly link: Link,
    private readonly beforeFlush: () => void = () => {},
  ) {}

  push(m: unknown): void {
    if (this.closed) return;
    this.batch.push(m);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  /** Schedules a flush with nothing queued yet (coalesced updates wait for it). */
  wake(): void {
    if (!this.scheduled && !this.closed) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.closed) return;
    this.beforeFlush();
    const b = this.batch;
    if (b.length === 0) return;
    this.batch = [];
    this.link.post(b);
  };
}

export function toWire(err: unknown): WireError {
  if (err instanceof ValidationError) return { c: err.code, m: err.rule, f: err.field, r: err.rule };
  if (err instanceof AmbitError) {
    const f = err.field;
    return { c: err.code, m: f === undefined ? err.message : err.message.slice(f.length + 2), ...(f === undefined ? {} : { f }) };
  }
  return { c: '', m: err instanceof Error ? err.message : String(err) };
}

export function fromWire(e: WireError): Error {
  if (e.r !== undefined && e.f !== undefined) return new ValidationError(e.f, e.r);
  if (e.c !== '') return new AmbitError(e.c, e.m, e.f);
  return new Error(`hub: ${e.m}`);
}
