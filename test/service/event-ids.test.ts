/**
 * Event-id deduplication in memory (the embedded hub's window): ids are forgotten after the
 * window by the injected clock or beyond maxIds (oldest first); a publish that fails forgets its
 * ids; a duplicate of a publish still being matched waits for its reach.
 */
import assert from 'node:assert/strict';
import vm from 'node:vm';
import { describe, it } from 'node:test';
import { EventIdWindow, type PublishSlot, StreamIdJudge, hashId, planPublish, settlePublish } from '../../services/matcher/event-ids.js';
import type { Event } from '../../src/model/types.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { MatchCore } from '../../services/matcher/core.js';

const ev = (id: string): Event => ({ id, lat: 0, lon: 0, attributes: {} });
const done = (r: number[]) => Promise.resolve(r);

describe('event ids', () => {
  it('an id is remembered for the window by the injected clock, then published anew', () => {
    let now = 1000;
    const w = new EventIdWindow({ windowMs: 100, maxIds: 10 }, () => now);
    w.settle(w.remember('a', done([3]), 0), 3);
    now = 1099;
    assert.equal(w.get('a'), 3);
    now = 1100;
    assert.equal(w.get('a'), undefined);
    w.settle(w.remember('a', done([5]), 0), 5);
    assert.equal(w.get('a'), 5);
    assert.equal(w.size, 1, 'expired entries are removed as new ones come');
  });

  it('a clock that jumps back counts no time until it moves on: an id is held a window of elapsed time, not the window plus the jump', () => {
    let now = 10_000;
    const w = new EventIdWindow({ windowMs: 100, maxIds: 10 }, () => now);
    w.settle(w.remember('a', done([3]), 0), 3);
    now = 1000; // back 9 s
    w.settle(w.claim([ev('b')], done([4]))!.tickets[0], 4);
    now = 1099;
    assert.deepEqual([w.get('a'), w.get('b')], [3, 4], '99 ms elapsed since either');
    now = 1100;
    assert.deepEqual([w.get('a'), w.get('b')], [undefined, undefined], 'a window elapsed: both forgotten, a too');
    const again = w.claim([ev('a'), ev('b')], done([1, 2]))!;
    assert.equal(again.plan.slots, null, 'both published anew');
    assert.equal(w.size, 2, 'the old entries went as the new ones came');
  });

  it('a bound of 0 holds no id: a publish neither hangs nor is remembered, and repeats within a call are still duplicates', async () => {
    const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })), { dedupe: { windowMs: 60_000, maxIds: 0 } });
    try {
      // A hang is a loop that never yields: run the call's synchronous part under a time limit.
      const publish = (events: Event[]) => vm.runInNewContext('publish()', { publish: () => hub.publish(events) }, { timeout: 2000 }) as ReturnType<EmbeddedHub['publish']>;
      const first = await publish([ev('a'), ev('a')]);
      assert.deepEqual(first.map((r) => r.duplicate === true), [false, true]);
      const again = await publish([ev('a')]);
      assert.deepEqual(again.map((r) => r.duplicate === true), [false], 'nothing was remembered');
    } finally {
      await hub.close();
    }
  });

  it('holds at most maxIds, forgetting the oldest', () => {
    const w = new EventIdWindow({ windowMs: 1e9, maxIds: 3 }, () => 0);
    for (const id of ['a', 'b', 'c', 'd']) w.settle(w.remember(id, done([1]), 0), 1);
    assert.equal(w.size, 3);
    assert.deepEqual(['a', 'b', 'c', 'd'].map((id) => w.get(id)), [undefined, 1, 1, 1]);
  });

  it('a window of 0 remembers nothing', () => {
    const w = new EventIdWindow({ windowMs: 0, maxIds: 3 }, () => 0);
    w.remember('a', done([1]), 0);
    assert.equal(w.get('a'), undefined);
    assert.equal(w.size, 0);
  });

  it('a pending publish: its duplicates wait for its reach; a failed one is forgotten', async () => {
    const w = new EventIdWindow({ windowMs: 1000, maxIds: 10 }, () => 0);
    let answer!: (r: number[]) => void;
    const pending = new Promise<number[]>((resolve) => (answer = resolve));
    const e = w.remember('p', pending, 1);
    const waiting = w.get('p');
    assert.ok(waiting instanceof Promise);
    answer([7, 9]);
    w.settle(e, 9);
    assert.equal(await waiting, 9);
    assert.equal(w.get('p'), 9);
    const f = w.remember('q', new Promise<number[]>(() => {}), 0);
    w.drop('q', f);
    assert.equal(w.get('q'), undefined);
    // Dropping an entry that was replaced since leaves the newer one.
    const old = w.remember('r', done([1]), 0);
    w.settle(w.remember('r', done([2]), 0), 2);
    w.drop('r', old);
    assert.equal(w.get('r'), 2);
  });

  it('plans a call: fresh events in order, duplicates of earlier ones and of the window', async () => {
    const seen = new Map([['old', 4]]);
    const plan = planPublish([ev('a'), ev('old'), ev('b'), ev('a'), ev('b')], (id) => seen.get(id));
    assert.deepEqual(plan.fresh.map((e) => e.id), ['a', 'b']);
    assert.deepEqual(await settlePublish(plan, [1, 2]), [
      { reached: 1, duplicate: false },
      { reached: 4, duplicate: true },
      { reached: 2, duplicate: false },
      { reached: 1, duplicate: true },
      { reached: 2, duplicate: true },
    ]);
    const plain = planPublish([ev('x'), ev('y')], () => undefined);
    assert.equal(plain.slots, null, 'no per-event slots when nothing repeats');
  });

  it('a claim sees the window as it was when the call came: an id its own events push out of a full ring is still a duplicate', () => {
    // A ring as large as the bound (1024, its first size) and full: each fresh id pushes out the oldest.
    const w = new EventIdWindow({ windowMs: 1e9, maxIds: 1024 }, () => 0);
    for (let k = 0; k < 1024; k++) w.settle(w.remember(`e${k}`, done([k]), 0), k);
    const claimed = w.claim([ev('x'), ev('y'), ev('e1'), ev('e0')], new Promise<number[]>(() => {}))!;
    assert.deepEqual(claimed.plan.fresh.map((e) => e.id), ['x', 'y']);
    assert.deepEqual(claimed.plan.slots, [{ fresh: 0 }, { fresh: 1 }, { reached: 1 }, { reached: 0 }]);
    assert.equal(w.size, 1024, 'the oldest went at the end of the call');
    assert.equal(w.get('e0'), undefined);
    assert.equal(w.get('e2'), 2);
    assert.equal((w as unknown as { cap: number }).cap, 1024, 'the ring did not grow for it');
  });

  it('a claim is all or nothing: an entry that is no event with a string id is refused, naming it, and nothing is remembered', async () => {
    const w = new EventIdWindow({ windowMs: 1000, maxIds: 10 }, () => 0);
    const never = new Promise<number[]>(() => {});
    for (const bad of [null, undefined, { id: 5 }, 'x']) {
      assert.throws(() => w.claim([ev('a'), ev('b'), bad as unknown as Event], never), (err: Error & { field?: string }) => err.field === 'events[2]' && /string id/.test(err.message));
      assert.equal(w.size, 0);
    }
    const claimed = w.claim([ev('a'), ev('b')], Promise.resolve([1, 2]))!;
    assert.deepEqual(claimed.plan.fresh.map((e) => e.id), ['a', 'b'], 'a retry is fresh');
  });

  it('the embedded hub refuses a publish with an entry that is no event, naming it, and remembers none of its ids: within the bound and beyond it', async () => {
    for (const maxIds of [10, 2]) {
      const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })), { dedupe: { windowMs: 60_000, maxIds } });
      try {
        await assert.rejects(hub.publish([ev('a'), ev('b'), null as unknown as Event]), (err: Error & { field?: string }) => err.field === 'events[2]');
        await assert.rejects(hub.publish([ev('a'), { id: 7 } as unknown as Event, ev('c')]), (err: Error & { field?: string }) => err.field === 'events[1]');
        const rs = await hub.publish([ev('a'), ev('b'), ev('c')]);
        assert.deepEqual(rs.map((r) => r.duplicate === true), [false, false, false], `a retry is fresh (bound ${maxIds})`);
      } finally {
        await hub.close();
      }
    }
  });

  it('a duplicate of a publish that fails does not reject unhandled while an earlier duplicate of the same call still waits', async () => {
    const w = new EventIdWindow({ windowMs: 1000, maxIds: 10 }, () => 0);
    let answerA!: (r: number[]) => void;
    let failB!: (err: Error) => void;
    const a = new Promise<number[]>((resolve) => (answerA = resolve));
    const b = new Promise<number[]>((_, reject) => (failB = reject));
    b.catch(() => {}); // the hub's own handler on its promise
    w.claim([ev('a')], a);
    w.claim([ev('b')], b);
    const unhandled: unknown[] = [];
    const onUnhandled = (r: unknown) => unhandled.push(r);
    process.on('unhandledRejection', onUnhandled);
    try {
      const c = w.claim([ev('a'), ev('b')], new Promise<number[]>(() => {}))!;
      const settled = settlePublish(c.plan, []);
      failB(new Error('b failed'));
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      answerA([4]);
      await assert.rejects(settled, /b failed/);
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('claims a call in one pass as planPublish then remember would: the same plan, the same window after, settles and drops alike', async () => {
    let seed = 11;
    const rand = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    for (const [windowMs, maxIds, idSpace] of [[40, 5000, 300], [1e9, 200, 300], [15, 60, 300], [1e9, 1024, 3000]]) {
      let now = 0;
      const one = new EventIdWindow({ windowMs, maxIds }, () => now);
      const two = new EventIdWindow({ windowMs, maxIds }, () => now);
      /** Calls not yet settled: each window's tickets and the call's promise. */
      const open: { fresh: string[]; t1: number[]; t2: number[]; answer: (r: number[]) => void }[] = [];
      let sameAs = 0;
      let waited = 0;
      for (let step = 0; step < 3000; step++) {
        now += rand(4);
        const n = 1 + rand(maxIds < 100 ? 80 : 12);
        const events = Array.from({ length: n }, () => ev(`e${rand(idSpace)}`));
        let answer!: (r: number[]) => void;
        const pending = new Promise<number[]>((resolve) => (answer = resolve));
        const claimed = one.claim(events, pending);
        const plan = planPublish(events, (id) => two.get(id));
        if (n > maxIds) {
          assert.equal(claimed, null, 'a call longer than the bound is not claimed');
          continue;
        }
        assert.ok(claimed !== null);
        const t2 = plan.fresh.map((e, k) => two.remember(e.id, pending, k));
        assert.deepEqual(claimed.plan.fresh.map((e) => e.id), plan.fresh.map((e) => e.id), `fresh events at step ${step}`);
        assert.equal(claimed.plan.slots === null, plan.slots === null, `slots at step ${step}`);
        if (plan.slots !== null) {
          const norm = (ss: PublishSlot[]) => ss.map((x) => ('reached' in x ? { reached: x.reached instanceof Promise ? 'pending' : x.reached } : x));
          assert.deepEqual(norm(claimed.plan.slots!), norm(plan.slots), `slots at step ${step}`);
          sameAs += plan.slots.filter((x) => 'sameAs' in x).length;
          waited += plan.slots.filter((x) => 'reached' in x && x.reached instanceof Promise).length;
        }
        open.push({ fresh: plan.fresh.map((e) => e.id), t1: claimed.tickets, t2, answer });
        // Settle or drop an open call now and then, oldest or newest.
        while (open.length > 0 && rand(3) === 0) {
          const c = rand(2) === 0 ? open.shift()! : open.pop()!;
          if (rand(5) === 0) {
            c.fresh.forEach((id, k) => {
              one.drop(id, c.t1[k]);
              two.drop(id, c.t2[k]);
            });
          } else {
            const reached = c.fresh.map(() => rand(50));
            reached.forEach((r, k) => {
              one.settle(c.t1[k], r);
              two.settle(c.t2[k], r);
            });
            c.answer(reached);
          }
        }
        assert.equal(one.size, two.size, `size at step ${step}`);
        if (step % 100 === 0) {
          for (let k = 0; k < 300; k++) {
            const a = one.get(`e${k}`);
            const b = two.get(`e${k}`);
            assert.equal(a instanceof Promise ? 'pending' : a, b instanceof Promise ? 'pending' : b, `get(e${k}) at step ${step}`);
          }
        }
      }
      assert.ok(sameAs > 0 && waited > 0, `the run saw duplicates within a call (${sameAs}) and of open calls (${waited})`);
    }
  });
});

describe('stream id judge (events read again from the command stream)', () => {
  const e = (id: string): Event => ({ id, lat: 0, lon: 0, attributes: {} });
  const fresh = (j: StreamIdJudge, entry: string, ids: string[], known: ReadonlyMap<string, { entry: string }> = new Map()) => j.plan(entry, ids.map(e), known).fresh.map((x) => x.id);

  it('an id fresh in an earlier entry less than the window before is a duplicate; a window later it is fresh again, and forgotten meanwhile', () => {
    const j = new StreamIdJudge(1000);
    assert.deepEqual(fresh(j, '10000-0', ['a', 'b', 'a']), ['a', 'b']);
    assert.deepEqual(fresh(j, '10999-0', ['a', 'c']), ['c']);
    assert.equal(j.size, 3);
    // b's and a's first entries are a window behind: both forgotten, a fresh again.
    assert.deepEqual(fresh(j, '11000-0', ['a']), ['a']);
    assert.equal(j.size, 2, 'c and a, as of their latest entries');
    assert.deepEqual(fresh(j, '11500-0', ['a']), [], 'a, fresh at 11000');
  });

  it('a dedupe record names the entry that first had the id: an earlier one within the window makes a duplicate; its own entry, a later one or one a window before does not', () => {
    const j = new StreamIdJudge(1000);
    const known = new Map([['x', { entry: '20000-0' }], ['y', { entry: '20500-1' }], ['z', { entry: '19000-0' }]]);
    assert.deepEqual(fresh(j, '20500-1', ['x', 'y', 'z'], known), ['y', 'z']);
  });

  it('without a window only repeats within an entry are duplicates, and nothing is remembered', () => {
    const j = new StreamIdJudge(0);
    assert.deepEqual(fresh(j, '1-0', ['a', 'a'], new Map([['a', { entry: '0-1' }]])), ['a']);
    assert.deepEqual(fresh(j, '1-1', ['a']), ['a']);
    assert.equal(j.size, 0);
  });
});

describe('event id window: the ring against a plain model', () => {
  /** The window's rules written plainly: a Map in insertion order, expiry and the bound from the front. */
  class Model {
    readonly ids = new Map<string, { at: number; reached: number | null; ticket: number }>();
    constructor(private readonly windowMs: number, private readonly maxIds: number) {}
    get(id: string, now: number): number | 'pending' | undefined {
      const e = this.ids.get(id);
      if (e === undefined || e.at <= now - this.windowMs) return undefined;
      return e.reached === null ? 'pending' : e.reached;
    }
    remember(id: string, now: number, ticket: number): void {
      this.ids.delete(id);
      this.ids.set(id, { at: now, reached: null, ticket });
      for (const [k, e] of this.ids) {
        if (this.ids.size <= this.maxIds && e.at > now - this.windowMs) break;
        this.ids.delete(k);
      }
    }
    settle(ticket: number, reached: number): void {
      for (const e of this.ids.values()) if (e.ticket === ticket) e.reached = reached;
    }
    drop(id: string, ticket: number): void {
      if (this.ids.get(id)?.ticket === ticket) this.ids.delete(id);
    }
  }

  it('agrees through growth past its first ring, eviction by the bound and by age, re-publishes, settles and drops', async () => {
    let seed = 7;
    const rand = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    // Ids of one length whose hashes collide (found by a birthday search), so the table's lookups
    // must compare the ids' text, beside plain and multi-byte ones.
    const byHash = new Map<number, string>();
    const colliding: string[] = [];
    for (let k = 0; colliding.length < 400; k++) {
      const id = `c-${k.toString(36).padStart(6, '0')}`;
      const h = hashId(id);
      const other = byHash.get(h);
      if (other === undefined) byHash.set(h, id);
      else colliding.push(other, id);
    }
    assert.equal(hashId(colliding[0]), hashId(colliding[1]));
    const pools: ((n: number) => string)[] = [(n) => `e${n}`, (n) => (n % 3 === 0 ? `é🚑${n}` : colliding[n % colliding.length])];
    for (const [windowMs, maxIds, pool] of [[50, 3000, 0], [1e9, 1500, 0], [400, 5000, 0], [50, 3000, 1], [1e9, 300, 1]]) {
      const idOf = pools[pool];
      let now = 0;
      const w = new EventIdWindow({ windowMs, maxIds }, () => now);
      const model = new Model(windowMs, maxIds);
      const tickets: { id: string; ticket: number }[] = [];
      const never = new Promise<number[]>(() => {});
      for (let step = 0; step < 20_000; step++) {
        now += rand(3);
        const r = rand(10);
        if (r < 6) {
          const id = idOf(rand(4000));
          const ticket = w.remember(id, never, 0);
          model.remember(id, now, ticket);
          tickets.push({ id, ticket });
        } else if (r < 8 && tickets.length > 0) {
          const t = tickets[rand(tickets.length)];
          const reached = rand(100);
          w.settle(t.ticket, reached);
          model.settle(t.ticket, reached);
        } else if (r < 9 && tickets.length > 0) {
          const t = tickets[rand(tickets.length)];
          w.drop(t.id, t.ticket);
          model.drop(t.id, t.ticket);
        } else {
          const id = idOf(rand(4000));
          const got = w.get(id);
          const want = model.get(id, now);
          assert.equal(got instanceof Promise ? 'pending' : got, want, `get(${id}) at step ${step} (window ${windowMs} ms, ${maxIds} ids)`);
        }
        if (step % 500 === 0) assert.equal(w.size, model.ids.size, `size at step ${step}`);
      }
      assert.equal(w.size, model.ids.size);
    }
  });
});
