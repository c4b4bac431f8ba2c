/**
 * A hub's reader of published events checks each event against the engine's limits as it decodes
 * it and keeps its normal form with it (link.ts `readEvent` with limits, model `keepCheckedEvent`),
 * so the engine does not check it again. The kept form must be exactly what the engine's own check
 * gives for the event as read, kept exactly when that check accepts it; an engine with stricter
 * limits than the reader's checks the event itself.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FastMatcher } from '../../src/engines/fast.js';
import { DEFAULT_LIMITS, type Limits, type NEvent, checkedEvent, quickEvent, resolveLimits, validateEvent, validateEvents } from '../../src/model/limits.js';
import type { Event, Value } from '../../src/model/types.js';
import { FrameReader, FrameWriter, HUB_EVENT_LIMITS, readEvent, writeEvent } from '../../services/hub/link.js';
import { Rng } from '../support/rng.js';
import { NUMBER_EDGES, STRING_EDGES } from '../support/values.js';

const ODD_NUMBERS = [NaN, Infinity, -Infinity, 91, -91, 181, -181, 90, -90, 180, -180, -0, 1e7, 1_000_000, 1_000_000.5, ...NUMBER_EDGES];
const ODD_STRINGS = ['', 'x'.repeat(64), 'x'.repeat(65), 'é'.repeat(32), 'é'.repeat(33), '\ud800', 'a\udc00b', '😀'.repeat(16), '😀'.repeat(17), 'x'.repeat(1024), 'x'.repeat(1025), 'é'.repeat(513), 'y'.repeat(129), ...STRING_EDGES];

/** Events the link's writer can encode (numbers, strings, booleans), with edge values mutated in. */
function randomEvent(rng: Rng): Event {
  const num = () => (rng.chance(0.3) ? rng.pick(ODD_NUMBERS) : rng.next() * 100);
  const str = () => (rng.chance(0.3) ? rng.pick(ODD_STRINGS) : `v${rng.int(20)}`);
  const attributes: Record<string, Value> = {};
  const n = rng.chance(0.05) ? 60 + rng.int(10) : rng.int(6);
  for (let i = 0; i < n; i++) {
    const name = rng.chance(0.8) ? `a${rng.int(80)}` : rng.chance(0.1) ? '__proto__' : rng.pick(ODD_STRINGS);
    const v: Value = rng.chance(0.4) ? num() : rng.chance(0.6) ? str() : rng.chance(0.5);
    if (name === '__proto__') Object.defineProperty(attributes, name, { value: v, enumerable: true, writable: true, configurable: true });
    else attributes[name] = v;
  }
  const e: Event = {
    id: rng.chance(0.2) ? rng.pick(ODD_STRINGS) : `e${rng.int(1000)}`,
    lat: rng.chance(0.1) ? rng.pick(ODD_NUMBERS) : -90 + rng.next() * 180,
    lon: rng.chance(0.1) ? rng.pick(ODD_NUMBERS) : -180 + rng.next() * 360,
    attributes,
  };
  if (rng.chance(0.3)) e.radiusM = rng.chance(0.3) ? rng.pick(ODD_NUMBERS) : rng.next() * 5000;
  if (rng.chance(0.3)) {
    const k = rng.chance(0.1) ? 33 + rng.int(4) : 1 + rng.int(4);
    e.tags = Array.from({ length: k }, () => (rng.chance(0.7) ? rng.pick(['a', '#B', 'c d', 'Zürich', 'x']) : rng.pick(ODD_STRINGS)));
  }
  if (rng.chance(0.2)) e.timeMs = rng.next() * 1e12;
  return e;
}

function read(e: Event, limits: Limits | null): Event {
  const w = new FrameWriter();
  writeEvent(w, e);
  const r = new FrameReader(w.take());
  const back = readEvent(r, true, limits);
  assert.equal(r.more, false, 'the whole record is read');
  return back;
}

/** A normal form with its attributes as a map: the reader lists them in the frame's order, Object.keys in its own (integer-like names first). */
function comparable(n: NEvent): unknown {
  const attrs = new Map<string, Value>();
  n.names.forEach((name, i) => attrs.set(name, n.values[i]));
  return { id: n.id, lat: n.lat, lon: n.lon, radiusM: n.radiusM, negZero: Object.is(n.radiusM, -0), attrs, tags: n.tags, count: n.names.length };
}

describe('hub link: events checked as they are read', () => {
  for (const [label, limits] of [['the hub engine limits', HUB_EVENT_LIMITS], ['tight limits', resolveLimits({ maxIdBytes: 3, maxNameBytes: 2, maxStringBytes: 4, maxAttributesPerEvent: 2, maxEventRadiusM: 100, maxTagsPerEvent: 2, maxTagBytes: 3 })]] as const) {
    it(`${label}: 20000 seeded events, the kept form is the engine check's, kept exactly when it accepts`, () => {
      const rng = new Rng(label.length + 101);
      let kept = 0;
      let refused = 0;
      for (let i = 0; i < 20_000; i++) {
        const back = read(randomEvent(rng), limits);
        const own = quickEvent(back, limits);
        const k = checkedEvent(back, limits);
        if (own === null) {
          assert.equal(k, null, `kept an event the engine's check refuses: ${JSON.stringify(back)}`);
          refused++;
        } else {
          assert.notEqual(k, null, `not kept though the engine's check accepts it: ${JSON.stringify(back)}`);
          assert.deepEqual(comparable(k!), comparable(own));
          assert.deepEqual(validateEvent(back, limits), k, 'validateEvent takes the kept form');
          kept++;
        }
      }
      assert.ok(kept > (limits === HUB_EVENT_LIMITS ? 2000 : 200) && refused > 2000, `both kinds exercised (${kept} kept, ${refused} refused)`);
    });
  }

  it('an event read without limits keeps nothing, and a plain object is checked as ever', () => {
    const e: Event = { id: 'e', lat: 1, lon: 2, attributes: { a: 1 } };
    assert.equal(checkedEvent(read(e, null), HUB_EVENT_LIMITS), null);
    assert.equal(checkedEvent(e, DEFAULT_LIMITS), null);
    assert.equal(checkedEvent(null, DEFAULT_LIMITS), null);
    assert.equal(checkedEvent('e', DEFAULT_LIMITS), null);
  });

  it('a frame that names an attribute twice keeps nothing; the engine checks the event as read', () => {
    const w = new FrameWriter();
    w.str('e');
    w.f64(45);
    w.f64(9);
    w.f64(NaN);
    w.u32(2);
    for (const v of [1, 2]) {
      w.str('a');
      w.u8(0);
      w.f64(v);
    }
    w.u32(0);
    w.f64(NaN);
    w.u32(0);
    const back = readEvent(new FrameReader(w.take()), true, HUB_EVENT_LIMITS);
    assert.equal(checkedEvent(back, HUB_EVENT_LIMITS), null);
    assert.deepEqual(back.attributes, { a: 2 });
    const n = validateEvent(back, HUB_EVENT_LIMITS);
    assert.deepEqual([n.names, n.values], [['a'], [2]]);
  });

  it('an engine with stricter limits than the reader checks the event itself and names the field', async () => {
    // 200 bytes: within the hub's engine limits (1024), past the model's default (128).
    const e: Event = { id: 'i'.repeat(200), lat: 45, lon: 9, attributes: { a: 1 } };
    const back = read(e, HUB_EVENT_LIMITS);
    assert.notEqual(checkedEvent(back, HUB_EVENT_LIMITS), null);
    assert.notEqual(checkedEvent(back, resolveLimits({ maxIdBytes: 1024, maxStringBytes: 4096 })), null, 'limits as loose or looser take it');
    assert.equal(checkedEvent(back, DEFAULT_LIMITS), null, 'stricter limits do not');
    assert.throws(() => validateEvents([back], DEFAULT_LIMITS), /^ValidationError: events\[0\]\.id: /);
    const strict = new FastMatcher({ limits: DEFAULT_LIMITS });
    const roomy = new FastMatcher({ limits: HUB_EVENT_LIMITS });
    try {
      for (const m of [strict, roomy]) m.add({ id: 's', owner: 'd', filters: [{ constraints: [{ name: 'a', op: 'eq', value: 1 }] }] });
      await assert.rejects(strict.matchBatch([back]), /events\[0\]\.id/);
      assert.deepEqual(await roomy.matchBatch([back]), [['s']]);
      assert.deepEqual(await roomy.match(back), ['s']);
    } finally {
      await strict.close();
      await roomy.close();
    }
  });
});
