/**
 * Differential testing against the reference (docs/semantics.md X1, X2). A candidate engine and a
 * ReferenceMatcher receive the same operation sequence (test/support/workloads.ts); every
 * outcome is compared: errors (code and field), return values, match results as sets, and after
 * each step the statistics and the stored form of every subscription the step touched.
 *
 * Match results must be equal as sets for every event, whatever precision the candidate computes
 * in internally. A disagreement is reported with the reference's own per-filter decision
 * (`filterDistance`, `contentMatches`): content, d, r = r_f + r_e and d - r.
 *
 * A candidate that keeps tags (Matcher.tag) has two subscriptions in three tagged as they are
 * added or replaced, and every match is asked again through matchBatchTagged: the same set as its
 * matchBatch answered (R6; that one is compared with the reference's), each
 * tagged subscription listed as the very tag it holds now, every other one as its id (a removed
 * or replaced subscription loses its tag).
 *
 * Replay and exploration: AMBIT_DIFF_SEED=<n> runs every variant with that seed only;
 * AMBIT_DIFF_SEEDS=<k> runs k seeds per variant (default 1).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Listed, Matcher } from '../../src/engines/matcher.js';
import { ReferenceMatcher, attributeMap, contentMatches, filterDistance, tagsMatch } from '../../src/engines/reference.js';
import { AmbitError } from '../../src/model/errors.js';
import { validateEvent } from '../../src/model/limits.js';
import type { Event } from '../../src/model/types.js';
import type { MakeMatcher } from './contract.js';
import { type Op, type Scenario, VARIANTS, type Variant, generate, variantSeed } from './workloads.js';

export interface DiffReport {
  failures: string[];
  /** Events matched (single and batched). */
  events: number;
  /** Sum of the reference's result sizes: a workload that matches nothing proves nothing. */
  matched: number;
  /** Operations that failed (identically) in both engines. */
  errors: number;
}

type Outcome = { ok: true; value: unknown } | { ok: false; code: string; field: string | undefined; message: string };

async function attempt(fn: () => unknown): Promise<Outcome> {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    if (e instanceof AmbitError) return { ok: false, code: e.code, field: e.field, message: e.message };
    return { ok: false, code: `non-AmbitError ${(e as Error)?.name}`, field: undefined, message: String((e as Error)?.stack ?? e) };
  }
}

const MAX_FAILURES = 12;

function fmt(x: number | null | undefined): string {
  if (x === null) return 'none';
  if (x === undefined) return 'unknown';
  return Number.isInteger(x) ? String(x) : x.toPrecision(17);
}

/** Runs one scenario through both engines; collects every discrepancy (up to a cap). */
export async function runScenario(scn: Scenario, cand: Matcher, ref: ReferenceMatcher): Promise<DiffReport> {
  const report: DiffReport = { failures: [], events: 0, matched: 0, errors: 0 };
  const fail = (ctx: string, msg: string): void => {
    if (report.failures.length < MAX_FAILURES) report.failures.push(`${ctx}: ${msg}`);
    else if (report.failures.length === MAX_FAILURES) report.failures.push('… more failures omitted');
  };

  const sameOutcome = (ctx: string, c: Outcome, r: Outcome): void => {
    if (c.ok !== r.ok) {
      fail(ctx, c.ok ? `candidate succeeded where the reference failed with ${r.ok ? '' : r.message}` : `candidate failed (${c.code} ${c.message}) where the reference succeeded`);
      return;
    }
    if (!c.ok && !r.ok) {
      report.errors++;
      if (c.code !== r.code || c.field !== r.field) fail(ctx, `error differs: candidate ${c.code} at ${c.field} (${c.message}), reference ${r.code} at ${r.field} (${r.message})`);
      return;
    }
    if (c.ok && r.ok && c.value !== r.value && !(c.value === undefined && r.value === undefined)) {
      fail(ctx, `return value differs: candidate ${String(c.value)}, reference ${String(r.value)}`);
    }
  };

  /** Why (or why not) the reference matches `id` for this event, filter by filter. */
  const anatomy = (id: string, event: Event): string => {
    const s = ref.get(id);
    if (s === undefined) return 'no such subscription in the reference';
    const ne = validateEvent(event, ref.limits);
    const attrs = attributeMap(ne);
    const pos = ref.position(s.owner);
    return s.filters
      .map((f, j) => {
        const d = filterDistance(f, pos, ne);
        const content = contentMatches(f, attrs);
        const tags = f.tags.length === 0 ? '' : ` tags=${tagsMatch(f, ne)}`;
        if (d === null || d === undefined) return `filter[${j}] content=${content}${tags} area=${d === null ? 'none' : 'anchored to an unknown position'}`;
        const r = f.area!.radiusM + ne.radiusM;
        return `filter[${j}] content=${content}${tags} d=${fmt(d)} r=${fmt(r)} (r_f=${fmt(f.area!.radiusM)} r_e=${fmt(ne.radiusM)}) d-r=${fmt(d - r)} (${d <= r ? 'inside' : 'outside'})`;
      })
      .join('; ');
  };

  const compareSets = (ctx: string, event: Event, got: readonly string[], want: readonly string[]): void => {
    report.events++;
    report.matched += want.length;
    const g = new Set(got);
    if (g.size !== got.length) fail(ctx, `candidate returned duplicate ids (R3): ${JSON.stringify(got.filter((x, i) => got.indexOf(x) !== i))}`);
    const w = new Set(want);
    const ectx = `${ctx} event ${event.id} at (${event.lat}, ${event.lon}) r_e=${event.radiusM ?? 0}`;
    for (const id of g) {
      if (!w.has(id)) fail(ectx, `subscription ${JSON.stringify(id)} returned only by the candidate; ${anatomy(id, event)}`);
    }
    for (const id of w) {
      if (!g.has(id)) fail(ectx, `subscription ${JSON.stringify(id)} returned only by the reference; ${anatomy(id, event)}`);
    }
  };

  // The tag each subscription of the candidate holds now (when it keeps tags).
  const tagging = typeof cand.tag === 'function' && typeof cand.matchBatchTagged === 'function';
  const tags = new Map<string, number>();
  /** Each number given once, so a listed number names one subscription. */
  const tagged = new Map<number, string>();
  let tagTurn = 0;
  const retag = (ctx: string, id: string, ok: boolean): void => {
    if (!tagging || !ok) return;
    tags.delete(id);
    if (tagTurn++ % 3 === 2) return;
    const t = tagTurn;
    if (cand.tag!(id, t)) {
      tags.set(id, t);
      tagged.set(t, id);
    } else fail(ctx, `tag(${JSON.stringify(id)}) refused a live subscription`);
  };
  /** matchBatchTagged against the candidate's own answers (`want`, R6); those are compared with the reference's by compareSets. */
  const compareTagged = async (ctx: string, events: readonly Event[], want: readonly (readonly string[])[]): Promise<void> => {
    if (!tagging) return;
    const got = await attempt(() => cand.matchBatchTagged!(events));
    if (!got.ok) return fail(ctx, `matchBatchTagged failed (${got.code} ${got.message}) where matchBatch answered`);
    const rows = got.value as Listed[][];
    for (let k = 0; k < want.length; k++) {
      const ids = rows[k].map((x) => (typeof x === 'string' ? x : (tagged.get(x) ?? `<unknown tag ${x}>`)));
      if (JSON.stringify([...ids].sort()) !== JSON.stringify([...want[k]].sort())) fail(`${ctx} [${k}] tagged`, `matchBatchTagged listed ${JSON.stringify(ids)}, matchBatch ${JSON.stringify(want[k])}`);
      for (const x of rows[k]) {
        const id = typeof x === 'string' ? x : (tagged.get(x) ?? '');
        const t = tags.get(id);
        if (t === undefined ? typeof x !== 'string' : x !== t) fail(`${ctx} [${k}] tagged`, `${JSON.stringify(id)} listed as ${typeof x === 'string' ? 'its id' : 'a tag'}${t === undefined ? ' but holds no tag' : typeof x === 'string' ? ' but holds a tag' : ' other than the one it holds'}`);
      }
    }
  };

  const handleOps = (m: Matcher, op: Extract<Op, { kind: 'handle' }>): Promise<Outcome> =>
    attempt(() => {
      const h = m.openDevice(op.device);
      assert.equal(h.device, op.device);
      for (const p of op.points) h.update(p.lat, p.lon);
      h.release();
      h.release(); // idempotent
      if (op.useAfterRelease) h.update(0, 0);
    });

  for (let si = 0; si < scn.steps.length; si++) {
    const touched = new Set<string>();
    const ops = scn.steps[si].ops;
    for (let oi = 0; oi < ops.length; oi++) {
      const op = ops[oi];
      const ctx = `variant=${scn.variant} seed=${scn.seed} step=${si} op=${oi} (${op.kind})`;
      switch (op.kind) {
        case 'add': {
          touched.add(op.sub.id);
          const c = await attempt(() => cand.add(op.sub));
          sameOutcome(ctx, c, await attempt(() => ref.add(op.sub)));
          retag(ctx, op.sub.id, c.ok);
          break;
        }
        case 'replace': {
          touched.add(op.sub.id);
          const c = await attempt(() => cand.replace(op.sub));
          sameOutcome(ctx, c, await attempt(() => ref.replace(op.sub)));
          retag(ctx, op.sub.id, c.ok);
          break;
        }
        case 'remove': {
          touched.add(op.id);
          const c = await attempt(() => cand.remove(op.id));
          sameOutcome(ctx, c, await attempt(() => ref.remove(op.id)));
          if (c.ok && c.value === true) {
            tags.delete(op.id);
            if (tagging && cand.tag!(op.id, ++tagTurn)) fail(ctx, `tag(${JSON.stringify(op.id)}) took a removed subscription`);
          }
          break;
        }
        case 'move':
          sameOutcome(ctx, await attempt(() => cand.updatePosition(op.device, op.lat, op.lon)), await attempt(() => ref.updatePosition(op.device, op.lat, op.lon)));
          break;
        case 'moves':
          sameOutcome(ctx, await attempt(() => cand.updatePositions(op.updates)), await attempt(() => ref.updatePositions(op.updates)));
          break;
        case 'handle':
          sameOutcome(ctx, await handleOps(cand, op), await handleOps(ref, op));
          break;
        case 'forget':
          sameOutcome(ctx, await attempt(() => cand.removeDevice(op.device)), await attempt(() => ref.removeDevice(op.device)));
          break;
        case 'match': {
          const c = await attempt(() => cand.match(op.event));
          const r = await attempt(() => ref.match(op.event));
          if (c.ok && r.ok) {
            compareSets(ctx, op.event, c.value as string[], r.value as string[]);
            await compareTagged(ctx, [op.event], [c.value as string[]]);
          } else sameOutcome(ctx, c, r);
          break;
        }
        case 'batch': {
          const c = await attempt(() => cand.matchBatch(op.events));
          const r = await attempt(() => ref.matchBatch(op.events));
          if (c.ok && r.ok) {
            const cv = c.value as string[][];
            const rv = r.value as string[][];
            if (!Array.isArray(cv) || cv.length !== rv.length) fail(ctx, `matchBatch returned ${Array.isArray(cv) ? cv.length : typeof cv} results for ${rv.length} events`);
            else {
              for (let k = 0; k < rv.length; k++) compareSets(`${ctx} [${k}]`, op.events[k], cv[k], rv[k]);
              await compareTagged(ctx, op.events, cv);
            }
          } else sameOutcome(ctx, c, r);
          break;
        }
      }
    }
    // After each step: counts, and the stored form of everything the step touched (L6, L7).
    const ctx = `variant=${scn.variant} seed=${scn.seed} after step ${si}`;
    const cs = cand.stats();
    const rs = ref.stats();
    for (const k of ['subscriptions', 'filters', 'constraints', 'devices'] as const) {
      if (cs[k] !== rs[k]) fail(ctx, `stats.${k}: candidate ${cs[k]}, reference ${rs[k]}`);
    }
    for (const id of touched) {
      if (cand.has(id) !== ref.has(id)) fail(ctx, `has(${JSON.stringify(id)}): candidate ${cand.has(id)}, reference ${ref.has(id)}`);
      const cg = JSON.stringify(cand.get(id));
      const rg = JSON.stringify(ref.get(id));
      if (cg !== rg) fail(ctx, `get(${JSON.stringify(id)}) differs:\n  candidate ${cg}\n  reference ${rg}`);
    }
  }
  return report;
}

/** Seeds to run per variant: AMBIT_DIFF_SEED pins one, AMBIT_DIFF_SEEDS asks for more. */
export function seedsFor(v: Variant): number[] {
  const pinned = process.env.AMBIT_DIFF_SEED;
  if (pinned !== undefined && pinned !== '') return [Number(pinned) >>> 0];
  const k = Math.max(1, Number(process.env.AMBIT_DIFF_SEEDS ?? 1) | 0);
  return Array.from({ length: k }, (_, i) => variantSeed(v.name, i));
}

/** Registers one test per workload variant: the candidate against a fresh reference. */
export function runDifferential(name: string, make: MakeMatcher): void {
  describe(`differential: ${name} vs reference (exact)`, () => {
    for (const v of VARIANTS) {
      for (const seed of seedsFor(v)) {
        it(`[X1] ${v.name} seed ${seed}`, async () => {
          const scn = generate(v, seed);
          const cand = make();
          const ref = new ReferenceMatcher({ limits: cand.limits });
          try {
            const rep = await runScenario(scn, cand, ref);
            assert.deepEqual(rep.failures, [], `${name} disagrees with the reference (replay: AMBIT_DIFF_SEED=${seed}):\n${rep.failures.join('\n')}`);
            assert.ok(rep.events >= 100, `workload too small: ${rep.events} events`);
            assert.ok(rep.matched > 0, 'vacuous workload: the reference matched nothing');
          } finally {
            await cand.close();
            await ref.close();
          }
        });
      }
    }
  });
}
