/**
 * What an AmbitDevice needs of its transport: a Connect stream it opens with a token, writes
 * requests to, ends or cancels, and hears responses and its end from; and the device's unary
 * calls. Two transports implement it: gRPC over HTTP/2 (`grpc-channel.ts`, Node) and WebSocket
 * (`websocket-channel.ts`, browsers, React Native and Node), chosen by the address's scheme.
 * Nothing here imports a transport, so a browser bundle of the device carries no grpc-js.
 */
import type { ConnectResponse, ListSubscriptionsResponse } from '../api/gen/ambit/v1/device_pb.js';
import { AmbitError, StatusCode } from './errors.js';

/** A `ConnectRequest` as `create(ConnectRequestSchema, ...)` takes it. */
export type ConnectRequestInit = { message: { case: string; value: unknown } };

export interface StreamHandlers {
  /** A response, in stream order. */
  message(m: ConnectResponse): void;
  /** The stream ended: an OK end is reported as UNAVAILABLE (a device stream does not end by itself). Called once. */
  ended(err: AmbitError): void;
}

export interface ChannelStream {
  /** Writes a request; `sent` once the transport has taken it (the next location waits for it). */
  write(m: ConnectRequestInit, sent?: () => void): void;
  /** Writes a location update, encoded without message objects (the hot path). */
  writeLocation(lat: number, lon: number, sent?: () => void): void;
  /** Half-closes: the server answers what came before, then ends the stream. */
  end(): void;
  /** Drops the stream now. */
  cancel(): void;
  /** Stops reading responses (the transport's flow control holds the server back), where it can. */
  pause(): void;
  resume(): void;
}

export interface DeviceChannel {
  /** What the transport is, for messages ("gRPC", "WebSocket"). */
  readonly kind: string;
  connect(token: string, handlers: StreamHandlers): ChannelStream;
  listSubscriptions(token: string, deadlineMs: number): Promise<ListSubscriptionsResponse>;
  close(): void;
}

/**
 * The ConnectRequest of a location, encoded by hand (field 2, LatLon{1: double, 2: double}): one
 * 20-byte array and no message objects.
 */
export function encodeLocation(lat: number, lon: number, out: Uint8Array = new Uint8Array(20), at = 0): Uint8Array {
  const v = new DataView(out.buffer, out.byteOffset + at, 20);
  v.setUint8(0, 0x12);
  v.setUint8(1, 18);
  v.setUint8(2, 0x09);
  v.setFloat64(3, lat, true);
  v.setUint8(11, 0x11);
  v.setFloat64(12, lon, true);
  return out;
}

/** A bearer token, or a function returning a fresh one (called for every call and reconnect). */
export type TokenSource = string | (() => string | Promise<string>);

/** The token to send now. */
export async function resolveToken(token: TokenSource): Promise<string> {
  const t = typeof token === 'string' ? token : await token();
  if (typeof t !== 'string' || t === '') throw new AmbitError(StatusCode.UNAUTHENTICATED, 'sdk: the token source gave no token');
  return t;
}

export function checkAddress(address: string): string {
  if (typeof address !== 'string' || address.trim() === '') throw new AmbitError(StatusCode.INVALID_ARGUMENT, `sdk: address must be "host:port" (gRPC) or a ws:// or wss:// URL, got ${JSON.stringify(address)}`, 'address');
  return address.trim();
}

/** True for an address the WebSocket transport serves (ws:// or wss://). */
export function isWebSocketAddress(address: string): boolean {
  return /^wss?:\/\//i.test(address);
}
