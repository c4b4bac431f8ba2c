/**
 * Validation and normalisation of pattern subscriptions (docs/semantics.md §9: E18 limits, E19
 * validation; E1 defaults; E10 and E16 derived values), on the pure functions of
 * src/model/event-patterns.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  DEFAULT_PATTERN_LIMITS,
  MAX_TIME_MS,
  type PatternLimits,
  checkTimeMs,
  elementReach,
  patternElements,
  resolvePatternLimits,
  validateEventPattern,
  validatePatternSubscription,
} from '../../src/model/event-patterns.js';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import { throwsAt } from '../support/assertions.js';

// Inputs are built loosely on purpose: validation is what checks their shape.
type Obj = Record<string, any>;

const V = (p: unknown, pl: PatternLimits = DEFAULT_PATTERN_LIMITS) => validateEventPattern('pattern', p, DEFAULT_LIMITS, pl);

/** A valid pattern: c ← b (10 ms) ← a (5 ms, each). */
function base(): Obj {
  return {
    steps: [
      { name: 'c', filter: {} },
      { name: 'b', filter: {}, withinMs: 10 },
      { name: 'a', filter: {}, withinMs: 5, selection: 'each' },
    ],
  };
}

/** `base()` changed by `edit` must be rejected at `pattern.<field>` with a rule matching `rule`. */
function rejects(edit: (p: Obj) => void, field: string, rule: RegExp, pl: PatternLimits = DEFAULT_PATTERN_LIMITS): void {
  const p = base();
  edit(p);
  const full = field === '' ? 'pattern' : `pattern.${field}`;
  const err = throwsAt(() => V(p, pl), full);
  assert.match(err.rule, rule, `${full}: ${err.message}`);
}

const neg = (extra: Obj = {}): Obj => ({ filter: {}, between: ['c', 'b'], ...extra });
const agg = (extra: Obj = {}): Obj => ({ name: 'n', fn: 'count', filter: {}, before: 'c', withinMs: 10, ...extra });
const par = (extra: Obj = {}): Obj => ({ left: { step: 'c', attribute: 'k' }, op: 'eq', right: { step: 'b', attribute: 'k' }, ...extra });
const epar = (extra: Obj = {}): Obj => ({ attribute: 'k', op: 'eq', step: 'c', stepAttribute: 'k', ...extra });
const steps = (n: number): Obj[] => Array.from({ length: n }, (_, i) => (i === 0 ? { name: 's0', filter: {} } : { name: `s${i}`, filter: {}, withinMs: 1 }));
const times = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));

describe('E19 validation: the pattern and its steps', () => {
  it('[E19] the pattern must be an object with a steps array', () => {
    throwsAt(() => V(null), 'pattern');
    throwsAt(() => V([]), 'pattern');
    throwsAt(() => V('steps'), 'pattern');
    rejects((p) => delete p.steps, 'steps', /must be an array/);
    rejects((p) => (p.steps = {}), 'steps', /must be an array/);
    rejects((p) => (p.steps = []), 'steps', /at least one step/);
  });

  it('[E19] an unknown field of the pattern is an error (a misspelt field must not be ignored)', () => {
    rejects((p) => (p.withinMs = 10), 'withinMs', /unknown field/);
    rejects((p) => (p.negation = []), 'negation', /unknown field/);
    rejects((p) => (p.consume = ['c']), 'consume', /unknown field/);
  });

  it('[E19] a step must be an object with a name and a filter', () => {
    rejects((p) => (p.steps[1] = 'b'), 'steps[1]', /must be an object/);
    rejects((p) => delete p.steps[1].name, 'steps[1].name', /must be a string/);
    rejects((p) => (p.steps[1].name = 7), 'steps[1].name', /must be a string/);
    rejects((p) => (p.steps[1].name = ''), 'steps[1].name', /at least 1/);
    rejects((p) => (p.steps[1].name = 'x'.repeat(DEFAULT_LIMITS.maxNameBytes + 1)), 'steps[1].name', /at most/);
    rejects((p) => delete p.steps[0].filter, 'steps[0].filter', /must be an object/);
  });

  it('[E19] step names are unique', () => {
    rejects((p) => (p.steps[2].name = 'c'), 'steps[2].name', /unique/);
    rejects((p) => (p.steps[2].name = 'b'), 'steps[2].name', /unique/);
  });

  it('[E19] step filters are validated as V2, with paths under the step', () => {
    rejects((p) => (p.steps[1].filter = { constraints: 'x' }), 'steps[1].filter.constraints', /must be an array/);
    rejects((p) => (p.steps[1].filter = { constraints: [{ name: 'v', op: 'zz', value: 1 }] }), 'steps[1].filter.constraints[0].op', /./);
    rejects((p) => (p.steps[2].filter = { area: { radiusM: 0 } }), 'steps[2].filter.area.radiusM', /./);
  });

  it('[E19] the terminator has no selection or withinMs', () => {
    rejects((p) => (p.steps[0].selection = 'last'), 'steps[0].selection', /absent on the terminator/);
    rejects((p) => (p.steps[0].withinMs = 10), 'steps[0].withinMs', /absent on the terminator/);
  });

  it('[E19] every later step has a withinMs: an integer in [1, maxWindowMs]', () => {
    rejects((p) => delete p.steps[1].withinMs, 'steps[1].withinMs', /required/);
    rejects((p) => delete p.steps[2].withinMs, 'steps[2].withinMs', /required/);
    for (const bad of [0, -1, 1.5, '10', Number.NaN, Number.POSITIVE_INFINITY, DEFAULT_PATTERN_LIMITS.maxWindowMs + 1]) {
      rejects((p) => (p.steps[1].withinMs = bad), 'steps[1].withinMs', /must be (a number|an integer)/);
    }
  });

  it('[E19] selection is each, last or first', () => {
    rejects((p) => (p.steps[1].selection = 'all'), 'steps[1].selection', /each, last, first/);
    rejects((p) => (p.steps[1].selection = 'LAST'), 'steps[1].selection', /each, last, first/);
    rejects((p) => (p.steps[1].selection = 1), 'steps[1].selection', /each, last, first/);
  });

  it('[E19] an unknown field of a step is an error', () => {
    rejects((p) => (p.steps[1].within = 10), 'steps[1].within', /unknown field/);
    rejects((p) => (p.steps[0].windowMs = 10), 'steps[0].windowMs', /unknown field/);
  });
});

describe('E19 validation: parameters', () => {
  it('[E19] parameters is an array of objects', () => {
    rejects((p) => (p.parameters = {}), 'parameters', /must be an array/);
    rejects((p) => (p.parameters = [null]), 'parameters[0]', /must be an object/);
  });

  it('[E19] each side names a step and an attribute', () => {
    rejects((p) => (p.parameters = [par({ left: 'c.k' })]), 'parameters[0].left', /must be an object/);
    rejects((p) => (p.parameters = [par({ left: { step: 'z', attribute: 'k' } })]), 'parameters[0].left.step', /must name a step/);
    rejects((p) => (p.parameters = [par({ left: { attribute: 'k' } })]), 'parameters[0].left.step', /must be a string/);
    rejects((p) => (p.parameters = [par({ left: { step: 'c' } })]), 'parameters[0].left.attribute', /must be a string/);
    rejects((p) => (p.parameters = [par({ right: { step: 'z', attribute: 'k' } })]), 'parameters[0].right.step', /must name a step/);
    rejects((p) => (p.parameters = [par({ right: { step: 'b', attribute: '' } })]), 'parameters[0].right.attribute', /at least 1/);
    rejects((p) => (p.parameters = [par({ left: { step: 'c', attribute: 'k', op: 'eq' } })]), 'parameters[0].left.op', /unknown field/);
  });

  it('[E19] op is one of eq, ne, lt, le, gt, ge', () => {
    for (const op of ['prefix', 'like', 'exists', '=', undefined]) {
      rejects((p) => (p.parameters = [par({ op })]), 'parameters[0].op', /eq, ne, lt, le, gt, ge/);
    }
  });

  it('[E19] a parameter relates two different steps', () => {
    rejects((p) => (p.parameters = [par({ right: { step: 'c', attribute: 'j' } })]), 'parameters[0].right.step', /another step/);
  });

  it('[E19] an unknown field of a parameter is an error', () => {
    rejects((p) => (p.parameters = [par({ within: 3 })]), 'parameters[0].within', /unknown field/);
  });

  it('[E19] a step name in a later parameter must name a step; the first violation in document order is reported', () => {
    rejects((p) => (p.parameters = [par(), par({ op: 'zz', right: { step: 'z', attribute: 'k' } })]), 'parameters[1].op', /eq, ne/);
    rejects(
      (p) => {
        p.parameters = [par({ op: 'zz' })];
        p.negations = [{}];
      },
      'parameters[0].op',
      /eq, ne/,
    );
  });
});

describe('E19 validation: negations', () => {
  it('[E19] negations is an array of objects with a filter', () => {
    rejects((p) => (p.negations = 'x'), 'negations', /must be an array/);
    rejects((p) => (p.negations = [7]), 'negations[0]', /must be an object/);
    rejects((p) => (p.negations = [neg({ filter: undefined })]), 'negations[0].filter', /must be an object/);
    rejects((p) => (p.negations = [neg({ filter: { constraints: [{ name: '', op: 'eq', value: 1 }] } })]), 'negations[0].filter.constraints[0].name', /./);
  });

  it('[E19] a negation has exactly one form: between or before', () => {
    rejects((p) => (p.negations = [{ filter: {} }]), 'negations[0]', /between .*before/);
    rejects((p) => (p.negations = [{ filter: {}, withinMs: 5 }]), 'negations[0]', /between .*before/);
    rejects((p) => (p.negations = [neg({ before: 'c' })]), 'negations[0].before', /one form/);
    rejects((p) => (p.negations = [neg({ before: 'c', withinMs: 5 })]), 'negations[0].before', /one form/);
    rejects((p) => (p.negations = [neg({ withinMs: 5 })]), 'negations[0].withinMs', /absent when between/);
  });

  it('[E19] between names two different steps', () => {
    rejects((p) => (p.negations = [neg({ between: 'c' })]), 'negations[0].between', /must be an array/);
    rejects((p) => (p.negations = [neg({ between: ['c'] })]), 'negations[0].between', /at least 2/);
    rejects((p) => (p.negations = [neg({ between: ['c', 'b', 'a'] })]), 'negations[0].between', /at most 2/);
    rejects((p) => (p.negations = [neg({ between: ['z', 'b'] })]), 'negations[0].between[0]', /must name a step/);
    rejects((p) => (p.negations = [neg({ between: ['c', 'z'] })]), 'negations[0].between[1]', /must name a step/);
    rejects((p) => (p.negations = [neg({ between: ['b', 'b'] })]), 'negations[0].between[1]', /another step/);
    rejects((p) => (p.negations = [neg({ between: ['c', 3] })]), 'negations[0].between[1]', /must be a string/);
  });

  it('[E19] before names a step and needs a withinMs in [1, maxWindowMs]', () => {
    const before = (extra: Obj): Obj => ({ filter: {}, before: 'b', withinMs: 5, ...extra });
    rejects((p) => (p.negations = [before({ before: 'z' })]), 'negations[0].before', /must name a step/);
    rejects((p) => (p.negations = [before({ withinMs: undefined })]), 'negations[0].withinMs', /required with before/);
    rejects((p) => (p.negations = [before({ withinMs: 0 })]), 'negations[0].withinMs', /within \[1, /);
    rejects((p) => (p.negations = [before({ withinMs: DEFAULT_PATTERN_LIMITS.maxWindowMs + 1 })]), 'negations[0].withinMs', /within \[1, /);
  });

  it('[E19] negation parameters: attribute, op, step (a step name), stepAttribute', () => {
    rejects((p) => (p.negations = [neg({ parameters: {} })]), 'negations[0].parameters', /must be an array/);
    rejects((p) => (p.negations = [neg({ parameters: ['k'] })]), 'negations[0].parameters[0]', /must be an object/);
    rejects((p) => (p.negations = [neg({ parameters: [epar({ attribute: undefined })] })]), 'negations[0].parameters[0].attribute', /must be a string/);
    rejects((p) => (p.negations = [neg({ parameters: [epar({ op: 'contains' })] })]), 'negations[0].parameters[0].op', /eq, ne/);
    rejects((p) => (p.negations = [neg({ parameters: [epar({ step: 'z' })] })]), 'negations[0].parameters[0].step', /must name a step/);
    rejects((p) => (p.negations = [neg({ parameters: [epar(), epar({ stepAttribute: '' })] })]), 'negations[0].parameters[1].stepAttribute', /at least 1/);
    rejects((p) => (p.negations = [neg({ parameters: [epar({ value: 1 })] })]), 'negations[0].parameters[0].value', /unknown field/);
  });

  it('[E19] an unknown field of a negation is an error', () => {
    rejects((p) => (p.negations = [neg({ within: 5 })]), 'negations[0].within', /unknown field/);
    rejects((p) => (p.negations = [neg({ after: 'b' })]), 'negations[0].after', /unknown field/);
  });
});

describe('E19 validation: aggregates', () => {
  it('[E19] aggregates is an array of objects', () => {
    rejects((p) => (p.aggregates = agg()), 'aggregates', /must be an array/);
    rejects((p) => (p.aggregates = [null]), 'aggregates[0]', /must be an object/);
  });

  it('[E19] an aggregate has a name, unique among the aggregates (a step may share it)', () => {
    rejects((p) => (p.aggregates = [agg({ name: undefined })]), 'aggregates[0].name', /must be a string/);
    rejects((p) => (p.aggregates = [agg({ name: '' })]), 'aggregates[0].name', /at least 1/);
    rejects((p) => (p.aggregates = [agg(), agg({ name: 'm' }), agg()]), 'aggregates[2].name', /unique/);
    const p = base();
    p.aggregates = [agg({ name: 'c' })];
    assert.equal(V(p).aggregates[0].name, 'c');
  });

  it('[E19] fn is count, sum, min, max or avg; count takes no attribute, the others need one', () => {
    rejects((p) => (p.aggregates = [agg({ fn: 'median' })]), 'aggregates[0].fn', /count, sum, min, max, avg/);
    rejects((p) => (p.aggregates = [agg({ fn: undefined })]), 'aggregates[0].fn', /count, sum, min, max, avg/);
    rejects((p) => (p.aggregates = [agg({ attribute: 'v' })]), 'aggregates[0].attribute', /absent for count/);
    for (const fn of ['sum', 'min', 'max', 'avg']) {
      rejects((p) => (p.aggregates = [agg({ fn })]), 'aggregates[0].attribute', new RegExp(`required for ${fn}`));
      rejects((p) => (p.aggregates = [agg({ fn, attribute: '' })]), 'aggregates[0].attribute', /at least 1/);
    }
  });

  it('[E19] filter, before (a step name) and withinMs in [1, maxWindowMs]', () => {
    rejects((p) => (p.aggregates = [agg({ filter: [] })]), 'aggregates[0].filter', /must be an object/);
    rejects((p) => (p.aggregates = [agg({ before: undefined })]), 'aggregates[0].before', /must be a string/);
    rejects((p) => (p.aggregates = [agg({ before: 'z' })]), 'aggregates[0].before', /must name a step/);
    rejects((p) => (p.aggregates = [agg({ withinMs: undefined })]), 'aggregates[0].withinMs', /is required/);
    rejects((p) => (p.aggregates = [agg({ withinMs: 0 })]), 'aggregates[0].withinMs', /within \[1, /);
    rejects((p) => (p.aggregates = [agg({ withinMs: 2.5 })]), 'aggregates[0].withinMs', /integer/);
    rejects((p) => (p.aggregates = [agg({ withinMs: DEFAULT_PATTERN_LIMITS.maxWindowMs + 1 })]), 'aggregates[0].withinMs', /within \[1, /);
  });

  it('[E19] aggregate parameters are element parameters', () => {
    rejects((p) => (p.aggregates = [agg({ parameters: [epar({ step: 'z' })] })]), 'aggregates[0].parameters[0].step', /must name a step/);
    rejects((p) => (p.aggregates = [agg({ parameters: [epar({ op: 'regex' })] })]), 'aggregates[0].parameters[0].op', /eq, ne/);
    rejects((p) => (p.aggregates = [agg({ parameters: [epar({ stepAttribute: undefined })] })]), 'aggregates[0].parameters[0].stepAttribute', /must be a string/);
  });

  it('[E19] where: an object with op and a finite number value', () => {
    rejects((p) => (p.aggregates = [agg({ where: 5 })]), 'aggregates[0].where', /must be an object/);
    rejects((p) => (p.aggregates = [agg({ where: { op: 'prefix', value: 1 } })]), 'aggregates[0].where.op', /eq, ne/);
    rejects((p) => (p.aggregates = [agg({ where: { value: 1 } })]), 'aggregates[0].where.op', /eq, ne/);
    rejects((p) => (p.aggregates = [agg({ where: { op: 'ge' } })]), 'aggregates[0].where.value', /must be a number/);
    rejects((p) => (p.aggregates = [agg({ where: { op: 'ge', value: '1' } })]), 'aggregates[0].where.value', /must be a number/);
    rejects((p) => (p.aggregates = [agg({ where: { op: 'ge', value: true } })]), 'aggregates[0].where.value', /must be a number/);
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      rejects((p) => (p.aggregates = [agg({ where: { op: 'ge', value: v } })]), 'aggregates[0].where.value', /finite/);
    }
    rejects((p) => (p.aggregates = [agg({ where: { op: 'ge', value: 1, strict: true } })]), 'aggregates[0].where.strict', /unknown field/);
  });

  it('[E19] an unknown field of an aggregate is an error', () => {
    rejects((p) => (p.aggregates = [agg({ step: 'c' })]), 'aggregates[0].step', /unknown field/);
    rejects((p) => (p.aggregates = [agg({ withinMS: 5 })]), 'aggregates[0].withinMS', /unknown field/);
  });
});

describe('E19 validation: consuming and the subscription', () => {
  it('[E19] consuming names steps, none twice', () => {
    rejects((p) => (p.consuming = 'c'), 'consuming', /must be an array/);
    rejects((p) => (p.consuming = ['z']), 'consuming[0]', /must name a step/);
    rejects((p) => (p.consuming = ['c', 3]), 'consuming[1]', /must be a string/);
    rejects((p) => (p.consuming = ['c', 'b', 'c']), 'consuming[2]', /must not repeat/);
  });

  it('[E19] a subscription has an id, an owner and a pattern; paths are under subscription', () => {
    const ok = { id: 'p1', owner: 'dev-1', pattern: base() };
    const S = (s: unknown) => validatePatternSubscription(s, DEFAULT_LIMITS, DEFAULT_PATTERN_LIMITS);
    throwsAt(() => S(null), 'subscription');
    throwsAt(() => S({ ...ok, id: undefined }), 'subscription.id');
    throwsAt(() => S({ ...ok, id: '' }), 'subscription.id');
    throwsAt(() => S({ ...ok, id: 'x'.repeat(DEFAULT_LIMITS.maxIdBytes + 1) }), 'subscription.id');
    throwsAt(() => S({ ...ok, owner: 5 }), 'subscription.owner');
    throwsAt(() => S({ ...ok, pattern: undefined }), 'subscription.pattern');
    throwsAt(() => S({ ...ok, pattern: { steps: [{ name: 'c', filter: {}, selection: 'each' }] } }), 'subscription.pattern.steps[0].selection');
    throwsAt(() => S({ id: '', owner: 5, pattern: null }), 'subscription.id');
    const n = S(ok);
    assert.equal(n.id, 'p1');
    assert.equal(n.owner, 'dev-1');
    assert.deepEqual(n.pattern, V(base()));
  });

  it('[E19] the field prefix is the caller’s', () => {
    throwsAt(() => validateEventPattern('req.p', { steps: [] }, DEFAULT_LIMITS, DEFAULT_PATTERN_LIMITS), 'req.p.steps');
    throwsAt(() => validatePatternSubscription({ id: 'x', owner: 'y', pattern: {} }, DEFAULT_LIMITS, DEFAULT_PATTERN_LIMITS, 'subs[3]'), 'subs[3].pattern.steps');
  });
});

describe('E2 event times', () => {
  it('[E2] an event time is an integer number of ms in [0, 2^53 − 1]; -0 is 0', () => {
    assert.equal(MAX_TIME_MS, 2 ** 53 - 1);
    assert.equal(checkTimeMs('t', 0), 0);
    assert.equal(checkTimeMs('t', 1_700_000_000_000), 1_700_000_000_000);
    assert.equal(checkTimeMs('t', MAX_TIME_MS), MAX_TIME_MS);
    assert.ok(Object.is(checkTimeMs('t', -0), 0));
    for (const bad of [-1, 1.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.match(throwsAt(() => checkTimeMs('event.timeMs', bad), 'event.timeMs').rule, /integer number of milliseconds within \[0, /);
    }
    for (const bad of ['5', null, undefined, {}]) assert.match(throwsAt(() => checkTimeMs('event.timeMs', bad), 'event.timeMs').rule, /must be a number/);
  });
});

describe('E18 limits', () => {
  it('[E18] the defaults', () => {
    assert.deepEqual({ ...DEFAULT_PATTERN_LIMITS }, { maxSteps: 8, maxParameters: 16, maxNegations: 4, maxAggregates: 4, maxWindowMs: 86_400_000 });
    assert.ok(Object.isFrozen(DEFAULT_PATTERN_LIMITS));
    assert.deepEqual(resolvePatternLimits(), { ...DEFAULT_PATTERN_LIMITS });
    assert.deepEqual(resolvePatternLimits({}), { ...DEFAULT_PATTERN_LIMITS });
    assert.deepEqual(resolvePatternLimits({ maxNegations: 2 }), { ...DEFAULT_PATTERN_LIMITS, maxNegations: 2 });
  });

  it('[E18] maxSteps: at the bound, and one past', () => {
    assert.equal(V({ steps: steps(8) }).steps.length, 8);
    throwsAt(() => V({ steps: steps(9) }), 'pattern.steps');
    assert.match(throwsAt(() => V({ steps: steps(9) }), 'pattern.steps').rule, /at most 8 steps/);
    const pl = resolvePatternLimits({ maxSteps: 2 });
    assert.equal(V({ steps: steps(2) }, pl).steps.length, 2);
    throwsAt(() => V({ steps: steps(3) }, pl), 'pattern.steps');
    assert.equal(V({ steps: steps(1) }, resolvePatternLimits({ maxSteps: 1 })).steps.length, 1);
  });

  it('[E18] maxParameters bounds the pattern’s parameters, and each negation’s and aggregate’s', () => {
    const withParams = (n: number): Obj => ({ ...base(), parameters: times(n, () => par()) });
    assert.equal(V(withParams(16)).parameters.length, 16);
    rejects((p) => (p.parameters = times(17, () => par())), 'parameters', /at most 16 parameters/);
    const pNeg = base();
    pNeg.negations = [neg({ parameters: times(16, () => epar()) })];
    assert.equal(V(pNeg).negations[0].parameters.length, 16);
    rejects((p) => (p.negations = [neg({ parameters: times(17, () => epar()) })]), 'negations[0].parameters', /at most 16 parameters/);
    const pAgg = base();
    pAgg.aggregates = [agg({ parameters: times(16, () => epar()) })];
    assert.equal(V(pAgg).aggregates[0].parameters.length, 16);
    rejects((p) => (p.aggregates = [agg({ parameters: times(17, () => epar()) })]), 'aggregates[0].parameters', /at most 16 parameters/);
    const pl = resolvePatternLimits({ maxParameters: 1 });
    assert.equal(V(withParams(1), pl).parameters.length, 1);
    rejects((p) => (p.parameters = times(2, () => par())), 'parameters', /at most 1 parameters/, pl);
  });

  it('[E18] maxNegations and maxAggregates: at the bound, and one past', () => {
    const p4 = base();
    p4.negations = times(4, () => neg());
    p4.aggregates = times(4, (i) => agg({ name: `n${i}` }));
    const n = V(p4);
    assert.equal(n.negations.length, 4);
    assert.equal(n.aggregates.length, 4);
    rejects((p) => (p.negations = times(5, () => neg())), 'negations', /at most 4 negations/);
    rejects((p) => (p.aggregates = times(5, (i) => agg({ name: `n${i}` }))), 'aggregates', /at most 4 aggregates/);
    const pl = resolvePatternLimits({ maxNegations: 1, maxAggregates: 1 });
    rejects((p) => (p.negations = times(2, () => neg())), 'negations', /at most 1 negations/, pl);
    rejects((p) => (p.aggregates = times(2, (i) => agg({ name: `n${i}` }))), 'aggregates', /at most 1 aggregates/, pl);
  });

  it('[E18] maxWindowMs bounds every withinMs: 1 and the bound pass, 0 and one past fail', () => {
    const max = DEFAULT_PATTERN_LIMITS.maxWindowMs;
    for (const w of [1, max]) {
      const p = base();
      p.steps[1].withinMs = w;
      p.negations = [{ filter: {}, before: 'a', withinMs: w }];
      p.aggregates = [agg({ withinMs: w })];
      const n = V(p);
      assert.equal(n.steps[1].withinMs, w);
      assert.equal(n.negations[0].withinMs, w);
      assert.equal(n.aggregates[0].withinMs, w);
    }
    for (const w of [0, max + 1]) {
      rejects((p) => (p.steps[2].withinMs = w), 'steps[2].withinMs', new RegExp(`within \\[1, ${max}\\]`));
      rejects((p) => (p.negations = [{ filter: {}, before: 'a', withinMs: w }]), 'negations[0].withinMs', new RegExp(`within \\[1, ${max}\\]`));
      rejects((p) => (p.aggregates = [agg({ withinMs: w })]), 'aggregates[0].withinMs', new RegExp(`within \\[1, ${max}\\]`));
    }
    const pl = resolvePatternLimits({ maxWindowMs: 100 });
    rejects((p) => (p.steps[1].withinMs = 101), 'steps[1].withinMs', /within \[1, 100\]/, pl);
  });

  it('[E18] consuming lists at most maxSteps names', () => {
    rejects((p) => (p.consuming = times(9, () => 'c')), 'consuming', /at most 8/);
    rejects((p) => (p.consuming = times(8, () => 'c')), 'consuming[1]', /must not repeat/);
  });

  it('[E18] resolvePatternLimits: integers within [1, ceiling], known names only', () => {
    const ceilings: PatternLimits = { maxSteps: 32, maxParameters: 64, maxNegations: 16, maxAggregates: 16, maxWindowMs: 2_592_000_000 };
    assert.deepEqual(resolvePatternLimits(ceilings), ceilings);
    for (const [k, c] of Object.entries(ceilings)) {
      assert.equal(resolvePatternLimits({ [k]: 1 })[k as keyof PatternLimits], 1);
      for (const bad of [c + 1, 0, -1, 1.5, '4', Number.NaN, null]) {
        const err = throwsAt(() => resolvePatternLimits({ [k]: bad } as Partial<PatternLimits>), `patternLimits.${k}`);
        assert.match(err.rule, new RegExp(`within \\[1, ${c}\\]`));
      }
    }
    throwsAt(() => resolvePatternLimits({ maxStep: 4 } as Partial<PatternLimits>), 'patternLimits.maxStep');
    throwsAt(() => resolvePatternLimits(null as unknown as Partial<PatternLimits>), 'patternLimits');
    throwsAt(() => resolvePatternLimits([] as unknown as Partial<PatternLimits>), 'patternLimits');
  });

  it('[E18] at the ceilings a pattern may have 32 steps and 64 parameters', () => {
    const pl = resolvePatternLimits({ maxSteps: 32, maxParameters: 64 });
    const p = { steps: steps(32), parameters: times(64, (i) => ({ left: { step: 's0', attribute: 'k' }, op: 'eq', right: { step: `s${(i % 31) + 1}`, attribute: 'k' } })) };
    const n = V(p, pl);
    assert.equal(n.steps.length, 32);
    assert.equal(n.parameters.length, 64);
    throwsAt(() => V({ steps: steps(33) }, pl), 'pattern.steps');
  });
});

describe('E1 defaults and normalised forms', () => {
  it('[E1] steps[0] is each with window 0; a later step defaults to last; given selections are kept', () => {
    const p = base();
    p.steps.push({ name: 'z', filter: {}, withinMs: 3, selection: 'first' });
    const n = V(p);
    assert.deepEqual(
      n.steps.map((s) => [s.name, s.selection, s.withinMs]),
      [
        ['c', 'each', 0],
        ['b', 'last', 10],
        ['a', 'each', 5],
        ['z', 'first', 3],
      ],
    );
    assert.deepEqual(n.steps[0].filter, { constraints: [], area: null, tags: [] });
    assert.deepEqual([n.parameters, n.negations, n.aggregates, n.consuming], [[], [], [], []]);
  });

  it('[E19] absent optional lists may be null', () => {
    const p = base();
    Object.assign(p, { parameters: null, negations: null, aggregates: null, consuming: null });
    assert.deepEqual([V(p).parameters, V(p).negations, V(p).aggregates, V(p).consuming], [[], [], [], []]);
  });

  it('[E7] parameters: step indices, and at = the greater of the two', () => {
    const p = base();
    p.parameters = [
      par({ left: { step: 'a', attribute: 'x' }, op: 'lt', right: { step: 'c', attribute: 'y' } }),
      par({ left: { step: 'b', attribute: 'x' }, op: 'ge', right: { step: 'a', attribute: 'y' } }),
      par(),
    ];
    assert.deepEqual(V(p).parameters, [
      { left: { step: 2, attribute: 'x' }, op: 'lt', right: { step: 0, attribute: 'y' }, at: 2 },
      { left: { step: 1, attribute: 'x' }, op: 'ge', right: { step: 2, attribute: 'y' }, at: 2 },
      { left: { step: 0, attribute: 'k' }, op: 'eq', right: { step: 1, attribute: 'k' }, at: 1 },
    ]);
  });

  it('[E10] negations: between normalised to [smaller index, greater index]; at = the greatest step referred to', () => {
    const p = base();
    p.negations = [
      neg({ between: ['a', 'c'] }),
      neg({ between: ['b', 'c'] }),
      neg({ between: ['c', 'b'], parameters: [epar({ step: 'a', op: 'ne', attribute: 'u', stepAttribute: 'v' })] }),
      { filter: {}, before: 'b', withinMs: 7 },
      { filter: {}, before: 'c', withinMs: 7, parameters: [epar({ step: 'b' })] },
      { filter: {}, before: 'c', withinMs: 7 },
    ];
    const n = V(p, resolvePatternLimits({ maxNegations: 6 })).negations;
    assert.deepEqual(
      n.map((x) => [x.between, x.before, x.withinMs, x.at]),
      [
        [[0, 2], null, 0, 2],
        [[0, 1], null, 0, 1],
        [[0, 1], null, 0, 2],
        [null, 1, 7, 1],
        [null, 0, 7, 1],
        [null, 0, 7, 0],
      ],
    );
    assert.deepEqual(n[2].parameters, [{ attribute: 'u', op: 'ne', step: 2, stepAttribute: 'v' }]);
    assert.deepEqual(n[0].parameters, []);
  });

  it('[E12] aggregates: attribute null for count, where null when absent, -0 in where is 0', () => {
    const p = base();
    p.aggregates = [agg(), agg({ name: 's', fn: 'avg', attribute: 'v', before: 'a', withinMs: 3, where: { op: 'gt', value: -0 }, parameters: [epar({ step: 'b' })] })];
    const [a0, a1] = V(p).aggregates;
    assert.deepEqual(a0, { name: 'n', fn: 'count', attribute: null, filter: { constraints: [], area: null, tags: [] }, before: 0, withinMs: 10, parameters: [], where: null });
    assert.equal(a1.attribute, 'v');
    assert.equal(a1.before, 2);
    assert.deepEqual(a1.parameters, [{ attribute: 'k', op: 'eq', step: 1, stepAttribute: 'k' }]);
    assert.deepEqual(a1.where, { op: 'gt', value: 0 });
    assert.ok(Object.is(a1.where?.value, 0));
  });

  it('[E14] consuming: step indices, ascending', () => {
    const p = base();
    p.consuming = ['a', 'c'];
    assert.deepEqual(V(p).consuming, [0, 2]);
    p.consuming = ['b'];
    assert.deepEqual(V(p).consuming, [1]);
  });

  it('[E19] the normalised form does not share the caller’s objects', () => {
    const p = base();
    p.steps[1].filter = { constraints: [{ name: 'v', op: 'gt', value: 1 }] };
    p.negations = [neg({ between: ['c', 'a'] })];
    const n = V(p);
    const before = JSON.stringify(n);
    p.steps[1].name = 'changed';
    p.steps[1].filter.constraints[0].value = 99;
    p.negations[0].between[1] = 'b';
    assert.equal(JSON.stringify(n), before);
  });

  it('[E1] patternElements: step filters, then negation filters, then aggregate filters', () => {
    const f = (i: number) => ({ constraints: [{ name: 'e', op: 'eq', value: i }] });
    const p = {
      steps: [
        { name: 'c', filter: f(0) },
        { name: 'b', filter: f(1), withinMs: 5 },
      ],
      negations: [{ filter: f(2), between: ['c', 'b'] }],
      aggregates: [agg({ filter: f(3) }), agg({ name: 'm', filter: f(4) })],
    };
    const els = patternElements(V(p));
    assert.deepEqual(
      els.map((x) => x.constraints[0].value),
      [0, 1, 2, 3, 4],
    );
  });

  it('[E16] elementReach: steps sum their windows; between reaches its earlier step; before and aggregates add W', () => {
    const p = base(); // c (0) ← b (10) ← a (5): step reaches 0, 10, 15
    p.negations = [
      neg({ between: ['c', 'a'] }), // reach(a) = 15
      neg({ between: ['b', 'c'] }), // reach(b) = 10
      { filter: {}, before: 'b', withinMs: 3 }, // 10 + 3
      { filter: {}, before: 'c', withinMs: 4, parameters: [epar({ step: 'a' })] }, // 0 + 4: parameters do not widen it
    ];
    p.aggregates = [agg({ withinMs: 7 }), agg({ name: 'm', before: 'a', withinMs: 1 })]; // 0 + 7, 15 + 1
    assert.deepEqual(elementReach(V(p)), [0, 10, 15, 15, 10, 13, 4, 7, 16]);
    assert.deepEqual(elementReach(V({ steps: [{ name: 'c', filter: {} }] })), [0]);
  });
});
