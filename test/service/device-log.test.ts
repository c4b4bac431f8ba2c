/**
 * The embedded hub's per-device notification log and its inbox: resume tokens and acks of ids the
 * log never issued (another run's, a purged log's, ahead of the log), with retention by count and
 * by age, the log's head after trims and compaction, and a clock that goes back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InboxStore } from '../../services/hub/inboxes.js';
import type { Event } from '../../src/model/types.js';

const ev = (i: number): Event => ({ id: `e${i}`, lat: 0, lon: 0, attributes: {} });

/** A store on an injected clock and a way to store n notifications for a device at that clock. */
function setup(retention: { maxPerDevice?: number; maxAgeMs?: number } = {}) {
  const clock = { now: 1_000_000 };
  const store = new InboxStore({ retention, now: () => clock.now });
  let n = 0;
  const put = (device: string, count: number): string[] => {
    const ids: string[] = [];
    for (let k = 0; k < count; k++) {
      store.fanout.store(device, ev(n++), ['s'], clock.now);
      const log = store.fanout.log(device);
      ids.push(log.entries[log.entries.length - 1].deliveryId);
    }
    return ids;
  };
  return { clock, store, put };
}

const otherMs = (id: string, delta: number): string => {
  const [ms, o] = id.split('-').map(Number);
  return `${ms + delta}-${o}`;
};

describe('device log: tokens the log never issued', () => {
  it('a resume token with an issued ordinal but another ms is state lost: from the oldest retained, nothing retained skipped', () => {
    const { clock, store, put } = setup({ maxPerDevice: 5 });
    try {
      const ids: string[] = [];
      for (let k = 0; k < 12; k++) {
        ids.push(...put('d', 1));
        clock.now += 10;
      }
      // Retained: ordinals 8..12; 1..7 dropped by count.
      const retained = ids.slice(7);
      for (const [what, token] of [
        ['a retained ordinal, later ms', otherMs(ids[9], 1)],
        ['a retained ordinal, earlier ms', otherMs(ids[9], -1)],
        ['the last ordinal, other ms', otherMs(ids[11], 5)],
        ['the ordinal just before the head, other ms', otherMs(ids[6], 3)],
        ['a dropped ordinal, ms after the oldest retained', otherMs(ids[2], 1000)],
        ['a dropped ordinal, ms before the first issued', otherMs(ids[2], -1000)],
      ] as const) {
        const box = store.openInbox('d', token);
        assert.equal(box.stateLost, true, what);
        assert.equal(box.resumeToken, '', what);
        assert.equal(box.missed, 7, what);
        assert.deepEqual(box.take(100).map((d) => d.deliveryId), retained, what);
        box.close();
      }
      // The issued ones still resume where they say, at the head and before it.
      for (const [k, missed] of [[6, 0], [7, 0], [2, 4], [11, 0]] as const) {
        const box = store.openInbox('d', ids[k]);
        assert.deepEqual([box.stateLost, box.resumeToken, box.missed], [false, ids[k], missed], `token ${ids[k]}`);
        assert.deepEqual(box.take(100).map((d) => d.deliveryId), ids.slice(Math.max(k + 1, 7)));
        box.close();
      }
    } finally {
      store.close();
    }
  });

  it('a token of the log before a purge is state lost in the log made anew, though its ordinal is there', async () => {
    const { clock, store, put } = setup();
    try {
      const before = put('d', 3);
      await store.fanout.purge('d');
      clock.now += 500;
      const after = put('d', 5);
      const box = store.openInbox('d', before[2]);
      assert.deepEqual([box.stateLost, box.resumeToken, box.missed], [true, '', 0]);
      assert.deepEqual(box.take(100).map((d) => d.deliveryId), after, 'nothing of the new log skipped');
      box.close();
    } finally {
      store.close();
    }
  });

  it('a token issued across a head compaction (head past 1024) and age retention: exact at the head, state lost with other ms', () => {
    const { clock, store, put } = setup({ maxPerDevice: 1500, maxAgeMs: 1000 });
    try {
      const ids = put('d', 2000); // 500 dropped by count
      clock.now += 1; // ms differ from here
      ids.push(...put('d', 100));
      const log = store.fanout.log('d');
      clock.now += 1000; // the first 2000 are past their age
      store.sweep();
      assert.equal(log.size, 100);
      assert.ok(log.head < 1024, 'compacted');
      const atHead = store.openInbox('d', ids[1999]);
      assert.deepEqual([atHead.stateLost, atHead.missed], [false, 0]);
      assert.equal(atHead.take(1)[0].deliveryId, ids[2000]);
      atHead.close();
      const forged = store.openInbox('d', otherMs(ids[1999], 1));
      assert.deepEqual([forged.stateLost, forged.missed], [true, 2000]);
      assert.equal(forged.take(1)[0].deliveryId, ids[2000]);
      forged.close();
    } finally {
      store.close();
    }
  });

  it('an ack of an id the log never issued (ordinal ahead, or a later ms with an older ordinal) changes nothing', () => {
    const { clock, store, put } = setup();
    try {
      const ids = put('d', 3);
      const box = store.openInbox('d', null);
      box.take(10);
      void box.ack(ids[1]);
      const [ms] = ids[0].split('-').map(Number);
      void box.ack(`${ms}-999`); // ordinal ahead of the log (its ms not past what was sent)
      void box.ack(`${ms + 10_000}-1`); // a later ms, an older ordinal
      box.close();
      const again = store.openInbox('d', null);
      assert.deepEqual([again.stateLost, again.resumeToken, again.missed], [false, ids[1], 0]);
      assert.deepEqual(again.take(10).map((d) => d.deliveryId), [ids[2]]);
      again.close();
      // The log grows past the bogus ordinal: nothing of it is skipped.
      clock.now += 1;
      const more = put('d', 1000);
      const third = store.openInbox('d', null);
      assert.equal(third.resumeToken, ids[1]);
      assert.deepEqual(third.take(2000).map((d) => d.deliveryId), [ids[2], ...more]);
      third.close();
    } finally {
      store.close();
    }
  });

  it('ids keep increasing when the clock goes back, and tokens and acks of them stay valid', () => {
    const { clock, store, put } = setup();
    try {
      const a = put('d', 2);
      clock.now -= 5000;
      const b = put('d', 2);
      assert.equal(b[0].split('-')[0], a[1].split('-')[0], 'the ms part never goes back');
      const box = store.openInbox('d', a[1]);
      assert.equal(box.stateLost, false);
      void box.ack(b[0]);
      box.close();
      const again = store.openInbox('d', null);
      assert.deepEqual([again.stateLost, again.resumeToken], [false, b[0]]);
      assert.deepEqual(again.take(10).map((d) => d.deliveryId), [b[1]]);
      again.close();
    } finally {
      store.close();
    }
  });
});
