/**
 * Assertions shared by the contract, validation and differential suites: error shape (V1) and
 * "nothing changed" snapshots (L4).
 */
import assert from 'node:assert/strict';
import { AmbitError, type ErrorCode, ValidationError } from '../../src/model/errors.js';
import type { Matcher } from '../../src/engines/matcher.js';
import type { Event } from '../../src/model/types.js';

/** Checks an error's code, field and `<field>: <rule>` message (V1). */
export function checkError(err: unknown, field: string, code: ErrorCode = 'INVALID_ARGUMENT', what = ''): void {
  const ctx = what === '' ? '' : ` (${what})`;
  assert.ok(err !== undefined, `expected an error naming ${field}${ctx}, but nothing was thrown`);
  assert.ok(err instanceof AmbitError, `expected an AmbitError naming ${field}${ctx}, got ${String(err)}`);
  assert.equal(err.code, code, `code for ${field}${ctx}: ${err.message}`);
  assert.equal(err.field, field, `field${ctx}: ${err.message}`);
  assert.ok(err.message.startsWith(`${field}: `), `message must start with the field${ctx}: ${err.message}`);
  if (code === 'INVALID_ARGUMENT') {
    assert.ok(err instanceof ValidationError, `INVALID_ARGUMENT must be a ValidationError${ctx}`);
    assert.ok(err.rule.length > 0, `the rule must be stated${ctx}`);
    assert.equal(err.message, `${field}: ${err.rule}`, `message format${ctx}`);
  }
}

/** Runs `fn`, expecting it to throw synchronously an error naming `field` (a ValidationError for INVALID_ARGUMENT). */
export function throwsAt(fn: () => unknown, field: string, code: ErrorCode = 'INVALID_ARGUMENT', what = ''): ValidationError {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  checkError(err, field, code, what);
  return err as ValidationError;
}

/** Calls `fn`, expecting a rejected promise (not a synchronous throw) naming `field`. */
export async function rejectsAt(fn: () => Promise<unknown>, field: string, code: ErrorCode = 'INVALID_ARGUMENT', what = ''): Promise<AmbitError> {
  let p: Promise<unknown>;
  try {
    p = fn();
  } catch (e) {
    assert.fail(`expected a rejected promise naming ${field}${what === '' ? '' : ` (${what})`}, but it threw synchronously: ${String(e)}`);
  }
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  checkError(err, field, code, what);
  return err as AmbitError;
}

export interface Snapshot {
  counts: { subscriptions: number; filters: number; constraints: number; devices: number };
  has: Record<string, boolean>;
  get: Record<string, unknown>;
  matches: string[][];
}

export function sorted(ids: readonly string[]): string[] {
  return [...ids].sort();
}

/** What a caller can observe: counts, presence and stored form of `ids`, and the probe events' matches. */
export async function snapshot(m: Matcher, ids: readonly string[], probes: readonly Event[] = []): Promise<Snapshot> {
  const s = m.stats();
  const has: Record<string, boolean> = {};
  const get: Record<string, unknown> = {};
  for (const id of ids) {
    has[id] = m.has(id);
    const g = m.get(id);
    get[id] = g === undefined ? undefined : JSON.parse(JSON.stringify(g));
  }
  const matches: string[][] = [];
  for (const e of probes) matches.push(sorted(await m.match(e)));
  return { counts: { subscriptions: s.subscriptions, filters: s.filters, constraints: s.constraints, devices: s.devices }, has, get, matches };
}
