/**
 * The HTTP/2 stream under a grpc-js server call, for writing notifications as gRPC messages
 * directly: a device session frames a whole batch (1-byte flag, 4-byte length, the message, per
 * notification) and writes it in one go, where grpc-js would take each message through its
 * Writable, its interceptor chain, a copy and a write of its own (most of a gateway's CPU per
 * notification, profiled). The stream is found through grpc-js's call objects (the pinned
 * version's shape: the call's `call.stream`); when it is not there, sessions write through grpc-js
 * as before, and test/service/raw-stream.test.ts fails so the change is seen.
 */
import type { ServerHttp2Stream } from 'node:http2';

/** What a session uses of the HTTP/2 stream. */
export type RawStream = Pick<ServerHttp2Stream, 'write' | 'once' | 'off' | 'on' | 'destroyed' | 'closed' | 'writableEnded' | 'headersSent' | 'writableLength'>;

/** The HTTP/2 stream of a grpc-js server call without interceptors; null when it cannot be found. */
export function rawStreamOf(call: unknown): RawStream | null {
  const s = (call as { call?: { stream?: unknown } } | null)?.call?.stream as Partial<ServerHttp2Stream> | undefined;
  if (s === undefined || s === null || typeof s !== 'object') return null;
  if (typeof s.write !== 'function' || typeof s.respond !== 'function' || typeof s.headersSent !== 'boolean') return null;
  return s as RawStream;
}

/** The gRPC length-prefixed messages of `frames`, in one buffer. */
export function grpcMessages(frames: readonly Uint8Array[]): Buffer {
  let total = 0;
  for (let i = 0; i < frames.length; i++) total += 5 + frames[i].length;
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < frames.length; i++) {
    const f = frames[i];
    out[at] = 0; // not compressed
    out.writeUInt32BE(f.length, at + 1);
    out.set(f, at + 5);
    at += 5 + f.length;
  }
  return out;
}
