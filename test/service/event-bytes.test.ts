/**
 * The directly written event bytes (services/edge/event-bytes.ts) against protobuf-es: byte for
 * byte what `toBinary(EventSchema, fromEvent(e))` writes, at the edges (zeros and negative zeros,
 * integer-like and `__proto__` names, tenants, times, lone surrogates, long strings) and over a
 * seeded sweep; and its UTF-8 length against Buffer's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { toBinary } from '@bufbuild/protobuf';
import { EventSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { fromEvent } from '../../services/edge/convert.js';
import { encodeApiEvent, utf8Length } from '../../services/edge/event-bytes.js';
import type { Event, Value } from '../../src/model/types.js';
import { Prng } from '../../src/workload/prng.js';

const event = (attributes: Record<string, Value>, more: Partial<Event> = {}): Event => ({ id: 'e1', lat: 45.46, lon: 9.19, attributes, ...more });

function same(e: Event, what: string): void {
  assert.deepEqual(Buffer.from(encodeApiEvent(e)), Buffer.from(toBinary(EventSchema, fromEvent(e))), what);
}

describe('event bytes', () => {
  it('are byte for byte what protobuf-es writes, at the edges', () => {
    const long = 'ü'.repeat(9000); // a three-byte length
    const cases: [string, Event][] = [
      ['plain', event({ kind: 'food', price: 5, open: true })],
      ['no attributes, a point', event({})],
      ['zeros are left out, values of zero are not', event({ n: 0, z: -0, f: false, s: '' }, { lat: 0, lon: -0, radiusM: 0 })],
      ['negative zero radius and position', event({ a: 1 }, { lat: -0, lon: 0, radiusM: -0 })],
      ['an empty id', event({ a: 1 }, { id: '' })],
      ['integer-like names come first', event({ b: 1, 10: 'x', 2: true, a: 'y' })],
      ['an attribute named __proto__', event(JSON.parse('{"__proto__": "p", "b": false}') as Record<string, Value>)],
      ['non-ASCII everywhere', event({ città: 'Milano ☕', emoji: '🚗' }, { id: 'évènement', tags: ['#café', '#日本'] })],
      ['lone surrogates', event({ ['\ud800x']: 'y\udc00', k: '\udbff' }, { id: '\ud83d', tags: ['\ude00'] })],
      ['long strings', event({ [long]: long }, { id: long, radiusM: 250, tags: [long] })],
      ['a tenant: id prefix and reserved tag left out', event({ a: 1 }, { id: 'acme/e7', tags: ['#x', 'tenant:acme', '#y'] })],
      ['a tenant whose prefix the id lacks', event({ a: 1 }, { id: 'other/e7', tags: ['tenant:acme'] })],
      ['two reserved tags: the first names the tenant', event({}, { id: 'b/e', tags: ['tenant:a', 'tenant:b'] })],
      ['time: whole seconds', event({ a: 1 }, { timeMs: 1_700_000_000_000 })],
      ['time: under a second', event({ a: 1 }, { timeMs: 999 })],
      ['time: zero', event({ a: 1 }, { timeMs: 0 })],
      ['time: late in the safe range', event({ a: 1 }, { timeMs: 9_007_199_254_740_991 })],
      ['time before 1970 takes the general encoder', event({ a: 1 }, { timeMs: -1500 })],
      ['a fractional time takes the general encoder', event({ a: 1 }, { timeMs: 1234.5 })],
      ['extreme doubles', event({ big: Number.MAX_VALUE, tiny: Number.MIN_VALUE, neg: -1e-300 }, { lat: -90, lon: 180, radiusM: 1e7 })],
      ['many attributes', event(Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i % 3 === 0 ? i : i % 3 === 1 ? `v${i}` : i % 2 === 0])))],
    ];
    for (const [what, e] of cases) same(e, what);
  });

  it('match protobuf-es over a seeded sweep', () => {
    const rng = new Prng(20261127);
    const alphabet = ['a', 'Z', '0', '7', '-', 'é', '中', '🙂', ' ', '\ud800', '\udc00'];
    const word = (max: number) => {
      let s = '';
      for (let i = rng.int(0, max); i > 0; i--) s += alphabet[rng.int(0, alphabet.length - 1)];
      return s;
    };
    for (let k = 0; k < 1000; k++) {
      const attributes: Record<string, Value> = {};
      for (let i = rng.int(0, 8); i > 0; i--) {
        const t = rng.int(0, 3);
        const name = rng.chance(0.1) ? String(rng.int(0, 99)) : word(20) || 'k';
        attributes[name] = t === 0 ? (rng.float() - 0.5) * 10 ** rng.int(-3, 12) : t === 1 ? word(rng.chance(0.05) ? 200 : 20) : t === 2 ? rng.chance(0.5) : 0;
      }
      const tenant = rng.chance(0.2) ? word(5) : null;
      const tags = rng.chance(0.5) ? Array.from({ length: rng.int(0, 4) }, () => `#${word(10)}`) : undefined;
      if (tenant !== null) (tags ?? []).splice(rng.int(0, tags?.length ?? 0), 0, `tenant:${tenant}`);
      const e = event(attributes, {
        id: tenant !== null && rng.chance(0.7) ? `${tenant}/${word(10)}` : word(30),
        lat: rng.chance(0.1) ? 0 : (rng.float() - 0.5) * 180,
        lon: rng.chance(0.1) ? 0 : (rng.float() - 0.5) * 360,
        radiusM: rng.chance(0.3) ? undefined : rng.chance(0.3) ? 0 : rng.float() * 100_000,
        tags,
        timeMs: rng.chance(0.5) ? undefined : rng.chance(0.1) ? rng.int(0, 999) : rng.int(0, 2 ** 31) * 1000 + rng.int(0, 999),
      });
      same(e, `case ${k}`);
    }
  });

  it('utf8Length is Buffer.byteLength', () => {
    const rng = new Prng(7);
    const units = [0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0xe000, 0xffff];
    for (let k = 0; k < 2000; k++) {
      let s = '';
      for (let i = rng.int(0, 12); i > 0; i--) s += String.fromCharCode(units[rng.int(0, units.length - 1)]);
      assert.equal(utf8Length(s), Buffer.byteLength(s), JSON.stringify(s));
    }
  });
});
