/**
 * What a device session (device-session.ts) writes to and hears from: one `DeviceService.Connect`
 * stream, whichever transport carries it. Two do: `H2DeviceStream` (h2-device-stream.ts), the
 * gateway's own gRPC framing on the node:http2 stream (the default), and `GrpcJsDeviceStream`
 * below, a grpc-js server call (when the server's HTTP/2 streams cannot be taken over, or with
 * AMBIT_DEVICE_STREAMS=grpc-js to compare).
 */
import type * as grpc from '@grpc/grpc-js';
import type { ConnectRequest, ConnectResponse } from '../../api/gen/ambit/v1/device_pb.js';
import { type StatusInfo, toServiceError } from './convert.js';
import type { Delivery } from '../hub/port.js';
import { grpcNotifications, notificationFrame } from './notification-frame.js';
import { type RawStream, rawStreamOf } from './raw-stream.js';

/** What a transport tells the session it carries. */
export interface StreamListener {
  /** A request arrived (decoded, or `Malformed`), in stream order. */
  onMessage(req: ConnectRequest): void;
  /**
   * A `location` request, read without building it (a stream's most frequent message): the same
   * as onMessage with `{ message: { case: 'location', value: { lat, lon } } }`.
   */
  onLocation(lat: number, lon: number): void;
  /** The client half-closed, after its last message. */
  onHalfClose(): void;
  /** The stream ended: cancelled, reset, failed or closed after its status. */
  onGone(): void;
}

/** What a session uses of its stream. */
export interface DeviceStream {
  /** Starts delivering requests and events to `listener` (once). */
  attach(listener: StreamListener): void;
  /** Writes a response (a message, or its bytes already encoded); false: HTTP/2 flow control holds it back, `onceDrain` says when it moves. */
  send(m: ConnectResponse | Uint8Array): boolean;
  /** Writes notifications in order, behind every response before them; false as for send. */
  sendNotifications(batch: readonly Delivery[]): boolean;
  /** Calls `fn` once when what was written drained or the stream ended. */
  onceDrain(fn: () => void): void;
  offDrain(fn: () => void): void;
  /** Stops delivering requests (HTTP/2 flow control then holds the client back) until resume. */
  pause(): void;
  resume(): void;
  /** Ends the stream with OK. */
  end(): void;
  /** Ends the stream with `status` (its field goes as `ambit-field` trailer metadata). */
  fail(status: StatusInfo): void;
}

/** Write errors on the HTTP/2 stream end the call through grpc-js's own events; nothing to do here. */
const IGNORE = (): void => {};

type Call = grpc.ServerDuplexStream<ConnectRequest, ConnectResponse>;
/** Where a call's shared listeners find their stream (an idle stream holds no closures for them). */
const LISTENER = Symbol('ambit.streamListener');
type ListenedCall = Call & { [LISTENER]?: StreamListener };

/**
 * A device stream carried by a grpc-js call. Notifications go to the HTTP/2 stream under the call
 * a batch per write (raw-stream.ts) when `rawWrites` and nothing of ours waits in grpc-js's
 * buffer, so responses keep their order; otherwise each through grpc-js.
 */
export class GrpcJsDeviceStream implements DeviceStream {
  /** The HTTP/2 stream under the call (null: write through grpc-js; undefined: not looked up yet, at the first batch). */
  private raw: RawStream | null | undefined;

  constructor(
    private readonly call: Call,
    rawWrites: boolean,
  ) {
    this.raw = rawWrites ? undefined : null;
  }

  attach(listener: StreamListener): void {
    const call = this.call as ListenedCall;
    call[LISTENER] = listener;
    call.on('data', GrpcJsDeviceStream.onData);
    call.on('end', GrpcJsDeviceStream.onEnd);
    call.on('cancelled', GrpcJsDeviceStream.onGone);
    call.on('error', GrpcJsDeviceStream.onGone);
    call.on('close', GrpcJsDeviceStream.onGone);
  }

  private static onData(this: ListenedCall, req: ConnectRequest): void {
    this[LISTENER]?.onMessage(req);
  }

  private static onEnd(this: ListenedCall): void {
    this[LISTENER]?.onHalfClose();
  }

  private static onGone(this: ListenedCall): void {
    this[LISTENER]?.onGone();
  }

  send(m: ConnectResponse | Uint8Array): boolean {
    // The gRPC bridge (api/rpc.ts) sends bytes as they are.
    return this.call.write(m as ConnectResponse);
  }

  sendNotifications(batch: readonly Delivery[]): boolean {
    const raw = this.raw === undefined ? this.findRaw() : this.raw;
    if (raw !== null && this.call.writableLength === 0 && raw.headersSent && !raw.writableEnded && !raw.destroyed && !raw.closed) {
      return raw.write(grpcNotifications(batch), IGNORE);
    }
    let ok = true;
    for (let i = 0; i < batch.length; i++) ok = this.call.write(notificationFrame(batch[i]) as unknown as ConnectResponse);
    return ok;
  }

  private findRaw(): RawStream | null {
    const raw = rawStreamOf(this.call);
    raw?.on('error', IGNORE); // a failed write ends the call through grpc-js's events
    this.raw = raw;
    return raw;
  }

  onceDrain(fn: () => void): void {
    this.call.once('drain', fn);
    if (this.raw) this.raw.once('drain', fn);
  }

  offDrain(fn: () => void): void {
    this.call.off('drain', fn);
    if (this.raw) this.raw.off('drain', fn);
  }

  pause(): void {
    this.call.pause();
  }

  resume(): void {
    this.call.resume();
  }

  end(): void {
    this.call.end();
  }

  fail(status: StatusInfo): void {
    this.call.emit('error', toServiceError(status));
  }
}
