/**
 * The one error type of the SDK: a gRPC status code, the server's message and the offending field
 * (the server's `RequestStatus.field` on a device stream, or the `ambit-field` trailer of a call).
 * No transport is imported here: the device runs in browsers too (a WebSocket transport).
 */

/** gRPC status codes (google.rpc.Code), e.g. `StatusCode.INVALID_ARGUMENT === 3`. */
export const StatusCode = Object.freeze({
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const);

const NAMES: Record<number, string> = Object.fromEntries(Object.entries(StatusCode).map(([k, v]) => [v, k]));

export function statusName(code: number): string {
  return NAMES[code] ?? `CODE_${code}`;
}

/** What AmbitError.from reads of a failed call (a grpc-js ServiceError or status object). */
interface CallFailure {
  code?: number;
  details?: string;
  message?: string;
  metadata?: { get(key: string): unknown[] };
}

export class AmbitError extends Error {
  /** gRPC status code (3 INVALID_ARGUMENT, 5 NOT_FOUND, 6 ALREADY_EXISTS, 14 UNAVAILABLE, ...). */
  readonly code: number;
  /** The status code's name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** The server's (or the SDK's) message, without the code. */
  readonly details: string;
  /** Path of the offending input, e.g. "subscribe.subscription.filters[0].area.radius_m"; '' when none. */
  readonly field: string;
  /**
   * A failed publish: what became of its events. 'queued': stored and will be delivered (not
   * confirmed in time; publishing again is not needed). 'not-stored': nothing was stored. 'unknown':
   * the connection failed or the deadline passed first; publish again with the same event ids
   * (the server deduplicates them). '' for anything but a publish.
   */
  publishOutcome: PublishOutcome | '' = '';
  /**
   * A failed client stream (UpdateLocations, BulkPublish): the index (from 0) of the message the
   * server refused whole, or null when the failure was not one message's (the `ambit-message`
   * trailer).
   */
  streamMessage: number | null = null;
  /**
   * A failed client stream: the updates or events the server applied before the failure (those of
   * the messages before the refused one), or null when the server did not say (`ambit-applied`).
   */
  applied: number | null = null;
  /**
   * RESOURCE_EXHAUSTED by a rate limit: the milliseconds the server asks to wait before trying
   * again (the `ambit-retry-after-ms` trailer, or a device stream reply's `retry_after_ms`); null otherwise.
   */
  retryAfterMs: number | null = null;

  constructor(code: number, details: string, field = '', options?: { cause?: unknown }) {
    super(`${statusName(code)}: ${details}`, options);
    this.name = 'AmbitError';
    this.code = code;
    this.codeName = statusName(code);
    this.details = details;
    this.field = field;
  }

  /** From a grpc-js call error (or status object); anything else becomes UNKNOWN. */
  static from(err: unknown): AmbitError {
    if (err instanceof AmbitError) return err;
    if (typeof err === 'object' && err !== null && typeof (err as { code?: unknown }).code === 'number') {
      const e = err as CallFailure;
      const field = e.metadata?.get('ambit-field')[0];
      const out = new AmbitError(e.code!, e.details ?? e.message ?? '', typeof field === 'string' ? fieldFromTrailer(field) : '', { cause: err });
      const outcome = e.metadata?.get('ambit-publish')[0];
      if (outcome === 'queued' || outcome === 'not-stored') out.publishOutcome = outcome;
      const count = (key: string): number | null => {
        const v = e.metadata?.get(key)[0];
        return typeof v === 'string' && /^\d{1,15}$/.test(v) ? Number(v) : null;
      };
      out.streamMessage = count('ambit-message');
      out.applied = count('ambit-applied');
      out.retryAfterMs = count('ambit-retry-after-ms');
      return out;
    }
    return new AmbitError(StatusCode.UNKNOWN, err instanceof Error ? err.message : String(err), '', { cause: err });
  }
}

export type PublishOutcome = 'queued' | 'not-stored' | 'unknown';

/** Codes after which a publish may or may not have been stored when the server did not say. */
const UNSURE = new Set<number>([StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED, StatusCode.UNKNOWN, StatusCode.INTERNAL, StatusCode.ABORTED, StatusCode.CANCELLED]);

/** Sets a failed publish's outcome: the server's, else unknown after a transport failure, else not stored (refused). */
export function withPublishOutcome(err: AmbitError): AmbitError {
  if (err.publishOutcome === '') err.publishOutcome = UNSURE.has(err.code) ? 'unknown' : 'not-stored';
  return err;
}

/** A local check failed before anything was sent: INVALID_ARGUMENT naming the field. */
export function invalid(field: string, rule: string): AmbitError {
  return new AmbitError(StatusCode.INVALID_ARGUMENT, `${field}: ${rule}`, field);
}

/**
 * The `ambit-field` trailer carries non-ASCII characters as `\uXXXX` (metadata must be ASCII);
 * this restores them. A `\u` preceded by an odd number of backslashes is text, not an escape.
 */
export function fieldFromTrailer(v: string): string {
  return v.replace(/(\\*)\\u([0-9a-f]{4})/g, (all: string, slashes: string, hex: string) =>
    slashes.length % 2 === 0 ? slashes + String.fromCharCode(parseInt(hex, 16)) : all,
  );
}
