/**
 * What the contract's rule groups share (test/support/contract.ts runs them): builders of
 * subscriptions and events, the constraint truth-table runner, reference operators, and the
 * per-engine context (a fresh matcher per test).
 */
import assert from 'node:assert/strict';
import type { Matcher, MatcherOptions } from '../../../src/engines/matcher.js';
import type { Constraint, Event, Filter, Op, Subscription, Value } from '../../../src/model/types.js';
import { sorted } from '../assertions.js';

export type MakeMatcher = (options?: MatcherOptions) => Matcher;

// ---- builders ----

let eventSeq = 0;

export function c(name: string, op: Op, value?: Value): Constraint {
  return value === undefined ? { name, op } : { name, op, value };
}

export function sub(id: string, owner: string, ...filters: Filter[]): Subscription {
  return { id, owner, filters };
}

export function ev(attributes: Record<string, Value>, lat = 0, lon = 0, radiusM?: number): Event {
  eventSeq++;
  return radiusM === undefined ? { id: `e${eventSeq}`, lat, lon, attributes } : { id: `e${eventSeq}`, lat, lon, radiusM, attributes };
}

export const fixed = (radiusM: number, lat: number, lon: number) => ({ radiusM, center: { lat, lon } });
export const anchored = (radiusM: number) => ({ radiusM });

export async function ids(m: Matcher, e: Event): Promise<string[]> {
  return sorted(await m.match(e));
}

// ---- constraint truth tables ----

export interface Case {
  label: string;
  constraint: Constraint;
  /** The attribute value under the constraint's name; undefined = the event lacks it. */
  attr: Value | undefined;
  /** Attributes of other names in the event. */
  others?: Record<string, Value>;
  expected: boolean;
}

export const show = (v: unknown): string => (typeof v === 'number' && Object.is(v, -0) ? '-0' : typeof v === 'string' ? JSON.stringify(v) : String(v));

export function caseLabel(op: Op, v: Value | undefined, a: Value | undefined): string {
  return `attr ${a === undefined ? '(absent)' : show(a)} ${op}${v === undefined ? '' : ` ${show(v)}`}`;
}

/**
 * One content-only subscription per case, each on its own name, and one event per case, all in
 * one matchBatch: each result must be exactly [its case's id] or [].
 */
export async function checkCases(m: Matcher, cases: readonly Case[]): Promise<void> {
  const subs = cases.map((k, i) => sub(`case${i}`, 'dev', { constraints: [{ ...k.constraint, name: `n${i}` }] }));
  for (const s of subs) m.add(s);
  const events = cases.map((k, i) => {
    const attrs: Record<string, Value> = { ...(k.others ?? {}) };
    if (k.attr !== undefined) attrs[`n${i}`] = k.attr;
    return ev(attrs, 12, 34);
  });
  const results = await m.matchBatch(events);
  assert.equal(results.length, cases.length, 'matchBatch returns one result per event');
  const wrong: string[] = [];
  for (let i = 0; i < cases.length; i++) {
    const want = cases[i].expected ? [`case${i}`] : [];
    const got = sorted(results[i]);
    if (JSON.stringify(got) !== JSON.stringify(want)) wrong.push(`${cases[i].label}: expected ${cases[i].expected}, got ${JSON.stringify(got)}`);
  }
  assert.deepEqual(wrong, [], `${wrong.length} of ${cases.length} cases wrong`);
  for (const s of subs) m.remove(s.id);
}

export const NUM_OPS: Op[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];
export const STR_OPS: Op[] = ['eq', 'ne', 'prefix', 'suffix', 'contains'];

export function jsCompare(op: Op, a: number | boolean, v: number | boolean): boolean {
  switch (op) {
    case 'eq': return a === v;
    case 'ne': return a !== v;
    case 'lt': return a < v;
    case 'le': return a <= v;
    case 'gt': return a > v;
    case 'ge': return a >= v;
    default: throw new Error(`not a comparison: ${op}`);
  }
}

/** The byte-level definition of C8-C11, independent of JavaScript string methods. */
export function utf8Op(op: Op, a: string, v: string): boolean {
  const A = Buffer.from(a, 'utf8');
  const V = Buffer.from(v, 'utf8');
  switch (op) {
    case 'eq': return A.equals(V);
    case 'ne': return !A.equals(V);
    case 'prefix': return A.length >= V.length && A.subarray(0, V.length).equals(V);
    case 'suffix': return A.length >= V.length && A.subarray(A.length - V.length).equals(V);
    case 'contains': return A.indexOf(V) !== -1;
    default: throw new Error(`not a string op: ${op}`);
  }
}

// ---- the suite ----

// ---- what every group gets ----

export interface ContractContext {
  make: MakeMatcher;
  /** Runs `fn` on a fresh matcher and closes it. */
  open: (fn: (m: Matcher) => Promise<void> | void, options?: MatcherOptions) => Promise<void>;
}

export function contractContext(make: MakeMatcher): ContractContext {
  return {
    make,
    open: async (fn, options) => {
      const m = make(options);
      try {
        await fn(m);
      } finally {
        await m.close();
      }
    },
  };
}
