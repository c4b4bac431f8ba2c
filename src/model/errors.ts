/**
 * Errors raised by the core. `code` maps one-to-one onto gRPC status codes at the service edge;
 * `field` is the path of the offending input (e.g. `subscription.filters[2].constraints[0].value`).
 */
export type ErrorCode = 'INVALID_ARGUMENT' | 'NOT_FOUND' | 'ALREADY_EXISTS' | 'RESOURCE_EXHAUSTED' | 'UNAVAILABLE' | 'DEADLINE_EXCEEDED' | 'FAILED_PRECONDITION';

export class AmbitError extends Error {
  readonly code: ErrorCode;
  readonly field: string | undefined;

  constructor(code: ErrorCode, message: string, field?: string) {
    super(field === undefined ? message : `${field}: ${message}`);
    this.name = 'AmbitError';
    this.code = code;
    this.field = field;
  }
}

/**
 * What a failed publish did with its events: 'queued' (stored, and will be delivered, but not
 * confirmed in time: no need to publish again) or 'not-stored' (nothing was stored: publish again).
 * A failure without one (a broken connection) leaves it unknown: publish again with the same ids,
 * which the deployment deduplicates.
 */
export type PublishOutcome = 'queued' | 'not-stored';

/** A publish that failed with a known outcome: 'queued' is DEADLINE_EXCEEDED, 'not-stored' UNAVAILABLE. */
export class PublishError extends AmbitError {
  constructor(
    readonly outcome: PublishOutcome,
    message: string,
  ) {
    super(outcome === 'queued' ? 'DEADLINE_EXCEEDED' : 'UNAVAILABLE', message);
    this.name = 'PublishError';
  }
}

/** Bad input: names the field and the rule, e.g. `event.lat: must be within [-90, 90], got 91`. */
export class ValidationError extends AmbitError {
  readonly rule: string;

  constructor(field: string, rule: string) {
    super('INVALID_ARGUMENT', rule, field);
    this.name = 'ValidationError';
    this.rule = rule;
  }
}

/** Formats a value for an error message without echoing huge or unprintable input back. */
export function show(v: unknown): string {
  if (typeof v === 'string') {
    const s = v.length > 40 ? `${v.slice(0, 40)}…(${v.length} chars)` : v;
    return JSON.stringify(s);
  }
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v);
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (Array.isArray(v)) return `array(${v.length})`;
  if (typeof v === 'object') return 'object';
  return String(v);
}
