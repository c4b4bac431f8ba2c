/**
 * Seeded workloads of pattern subscriptions for the differential tests (docs/semantics.md §9):
 * random patterns (1–4 steps, every selection, parameters, negations, aggregates with conditions,
 * consuming), events with ties, out-of-order and late times, devices that move or are forgotten,
 * patterns removed and replaced mid-stream; and a runner that plays them through a PatternMatcher.
 */
import type { PatternMatcher, PatternNotification, TimedInput } from '../../src/engines/event-patterns/pattern-matcher.js';
import type { AggregateFn, CompareOp, EventPattern, PatternSubscription, Selection } from '../../src/model/event-patterns.js';
import type { Filter, Value } from '../../src/model/types.js';
import { Prng } from '../../src/workload/prng.js';

const TYPES = ['A', 'B', 'C', 'D'];
const DEVICES = ['d0', 'd1', 'd2', 'd3'];
const LAT0 = 45.46;
const LON0 = 9.19;
// About 2.2 km by 1.6 km: areas of 300-1500 m cover parts of it.
const point = (r: Prng) => ({ lat: LAT0 + r.float() * 0.02, lon: LON0 + r.float() * 0.02 });

export interface Knobs {
  patterns: number;
  events: number;
  latenessMs: number;
  maxRetained: number;
  maxWindow: number;
  /** Probability that an event's time goes back. */
  disorder: number;
}

export type Op =
  | { kind: 'publish'; events: TimedInput[] }
  | { kind: 'move'; device: string; lat: number; lon: number }
  | { kind: 'forget'; device: string }
  | { kind: 'add' | 'replace'; sub: PatternSubscription }
  | { kind: 'remove'; id: string }
  | { kind: 'advance'; timeMs: number };

function stepFilter(r: Prng, knobs: Knobs): Filter {
  const f: Filter = { constraints: [{ name: 'type', op: 'eq', value: r.pick(TYPES) }] };
  if (r.chance(0.2)) f.constraints.push({ name: 'v', op: r.pick(['lt', 'ge'] as const), value: r.pick([0, 1, 2]) });
  const a = r.float();
  if (a < 0.3) f.area = { radiusM: r.int(300, 1500) };
  else if (a < 0.45) f.area = { radiusM: r.int(300, 1500), center: point(r) };
  void knobs;
  return f;
}

function randomPattern(r: Prng, knobs: Knobs): EventPattern {
  const n = r.int(1, 4);
  const names = ['t', 's1', 's2', 's3'].slice(0, n);
  const win = () => r.int(1, knobs.maxWindow);
  const p: EventPattern = {
    steps: names.map((name, i) =>
      i === 0 ? { name, filter: stepFilter(r, knobs) } : { name, filter: stepFilter(r, knobs), selection: r.pick(['each', 'last', 'first'] as Selection[]), withinMs: win() },
    ),
  };
  const ops: CompareOp[] = ['eq', 'eq', 'eq', 'ne', 'lt', 'ge'];
  if (n > 1) {
    p.parameters = [];
    const k = r.int(0, 2);
    for (let j = 0; j < k; j++) {
      const a = r.int(0, n - 1);
      let b = r.int(0, n - 2);
      if (b >= a) b++;
      const attr = r.pick(['zone', 'zone', 'v']);
      p.parameters.push({ left: { step: names[a], attribute: attr }, op: r.pick(ops), right: { step: names[b], attribute: r.chance(0.9) ? attr : 'v' } });
    }
  }
  if (r.chance(0.35)) {
    p.negations = [];
    const k = r.int(1, 2);
    for (let j = 0; j < k; j++) {
      const params = r.chance(0.6) ? [{ attribute: 'zone', op: r.pick(ops), step: r.pick(names), stepAttribute: 'zone' }] : [];
      if (n > 1 && r.chance(0.5)) {
        const a = r.int(0, n - 1);
        let b = r.int(0, n - 2);
        if (b >= a) b++;
        p.negations.push({ filter: stepFilter(r, knobs), between: [names[a], names[b]], parameters: params });
      } else p.negations.push({ filter: stepFilter(r, knobs), before: r.pick(names), withinMs: win(), parameters: params });
    }
  }
  if (r.chance(0.4)) {
    p.aggregates = [];
    const k = r.int(1, 2);
    for (let j = 0; j < k; j++) {
      const fn = r.pick(['count', 'sum', 'min', 'max', 'avg'] as AggregateFn[]);
      const agg: NonNullable<EventPattern['aggregates']>[number] = {
        name: `g${j}`,
        fn,
        filter: stepFilter(r, knobs),
        before: r.pick(names),
        withinMs: win(),
      };
      if (fn !== 'count') agg.attribute = 'v';
      if (r.chance(0.5)) agg.parameters = [{ attribute: 'zone', op: 'eq', step: r.pick(names), stepAttribute: 'zone' }];
      if (r.chance(0.4)) agg.where = { op: r.pick(['gt', 'le', 'eq'] as CompareOp[]), value: r.pick([0, 1, 2, 3]) };
      p.aggregates.push(agg);
    }
  }
  if (r.chance(0.25)) p.consuming = names.filter(() => r.chance(0.5));
  return p;
}

function value(r: Prng): Value {
  const x = r.float();
  if (x < 0.05) return '2';
  if (x < 0.08) return true;
  if (x < 0.12) return -0;
  return r.pick([0, 1, 1.5, 2, 3]);
}

export function generate(seed: number, knobs: Knobs): Op[] {
  const r = new Prng(seed);
  const ops: Op[] = [];
  for (const d of DEVICES) ops.push({ kind: 'move', device: d, ...point(r) });
  let ids = 0;
  const live: string[] = [];
  const newSub = (id: string): PatternSubscription => ({ id, owner: r.pick(DEVICES), pattern: randomPattern(r, knobs) });
  for (let i = 0; i < knobs.patterns; i++) {
    const id = `p${ids++}`;
    live.push(id);
    ops.push({ kind: 'add', sub: newSub(id) });
  }
  let t = 1000;
  let ev = 0;
  while (ev < knobs.events) {
    const x = r.float();
    if (x < 0.08) ops.push({ kind: 'move', device: r.pick(DEVICES), ...point(r) });
    else if (x < 0.09) ops.push({ kind: 'forget', device: r.pick(DEVICES) });
    else if (x < 0.1 && live.length > 0) ops.push({ kind: 'remove', id: live.splice(r.int(0, live.length - 1), 1)[0] });
    else if (x < 0.11 && live.length > 0) ops.push({ kind: 'replace', sub: newSub(r.pick(live)) });
    else if (x < 0.12) {
      const id = `p${ids++}`;
      live.push(id);
      ops.push({ kind: 'add', sub: newSub(id) });
    } else if (x < 0.14) ops.push({ kind: 'advance', timeMs: t + r.int(0, 3) });
    else {
      const events: TimedInput[] = [];
      const k = r.int(1, 5);
      for (let j = 0; j < k && ev < knobs.events; j++, ev++) {
        t += r.pick([0, 0, 1, 1, 2, 3]);
        const timeMs = r.chance(knobs.disorder) ? Math.max(0, t - r.int(1, 6)) : t;
        events.push({
          timeMs,
          event: { id: `e${ev}`, ...point(r), radiusM: r.chance(0.2) ? r.int(1, 200) : 0, attributes: { type: r.pick(TYPES), zone: r.int(0, 2), v: value(r) } },
        });
      }
      ops.push({ kind: 'publish', events });
    }
  }
  return ops;
}

export const key = (n: PatternNotification): string =>
  `${n.subscription}|${n.owner}|${n.steps.map((s) => `${s.step}=${s.event.id}@${s.timeMs}`).join(',')}|${JSON.stringify(Object.entries(n.aggregates).sort())}`;

export async function run(ops: readonly Op[], pm: PatternMatcher): Promise<string[][]> {
  const out: string[][] = [];
  for (const op of ops) {
    switch (op.kind) {
      case 'publish':
        out.push((await pm.publish(op.events)).map(key).sort());
        break;
      case 'advance':
        out.push((await pm.advanceTo(op.timeMs)).map(key).sort());
        break;
      case 'move':
        pm.updatePosition(op.device, op.lat, op.lon);
        break;
      case 'forget':
        pm.removeDevice(op.device);
        break;
      case 'add':
        pm.add(op.sub);
        break;
      case 'replace':
        pm.replace(op.sub);
        break;
      case 'remove':
        pm.remove(op.id);
        break;
    }
  }
  return out;
}


/** The devices' positions after `ops`, given to `pm` (as the service gives a restored engine its positions back). */
export function givePositions(ops: readonly Op[], pm: PatternMatcher): void {
  const at = new Map<string, { lat: number; lon: number } | null>();
  for (const op of ops) {
    if (op.kind === 'move') at.set(op.device, { lat: op.lat, lon: op.lon });
    else if (op.kind === 'forget') at.set(op.device, null);
  }
  for (const [d, p] of at) if (p !== null) pm.updatePosition(d, p.lat, p.lon);
}
