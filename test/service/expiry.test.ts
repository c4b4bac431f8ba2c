/**
 * The expiry clock of device streams (services/edge/expiry.ts), on an injected clock: a stream
 * expires when the clock reaches its second, not before, in order of second, and not at all once
 * removed. Real timers run (for a millisecond or so); the test waits on the expiries themselves.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type Expiring, ExpiryClock } from '../../services/edge/expiry.js';

class Stream implements Expiring {
  expired = 0;
  readonly done: Promise<void>;
  private resolve!: () => void;

  constructor(
    readonly name: string,
    private readonly log: string[] = [],
  ) {
    this.done = new Promise((r) => (this.resolve = r));
  }

  expire(): void {
    this.expired++;
    this.log.push(this.name);
    this.resolve();
  }
}

describe('expiry clock', { timeout: 20_000 }, () => {
  // The clock's timer does not keep a process alive (unref): this keeps the test's alive meanwhile.
  let alive: NodeJS.Timeout;
  before(() => (alive = setInterval(() => {}, 60_000)));
  after(() => clearInterval(alive));

  it('expires each stream once when the clock reaches its second; a removed one never', async () => {
    let t = 0;
    const clock = new ExpiryClock(() => t);
    const past = new Stream('past');
    clock.add(past, 0);
    assert.equal(past.expired, 1, 'a second already reached expires at once');

    t = 999_990;
    const b = new Stream('b');
    const c = new Stream('c');
    const d = new Stream('d');
    clock.add(b, 1000);
    clock.add(c, 1000);
    clock.add(d, 2000);
    clock.remove(c, 1000);
    t = 1_000_000;
    await b.done;
    assert.equal(c.expired, 0, 'removed');
    assert.equal(d.expired, 0, 'not before its second');
    assert.equal(clock.size, 1);

    // An earlier second than the timer's re-arms it; the clock then jumps past both.
    t = 1_998_999;
    const e = new Stream('e');
    clock.add(e, 1999);
    t = 2_000_000;
    await Promise.all([e.done, d.done]);
    assert.deepEqual([b.expired, c.expired, d.expired, e.expired], [1, 0, 1, 1]);
    assert.equal(clock.size, 0);
  });

  it('expires in order of second, however they were added', async () => {
    let t = 999;
    const clock = new ExpiryClock(() => t);
    const order: string[] = [];
    const seconds = Array.from({ length: 200 }, (_, i) => 1 + ((i * 7919) % 97));
    const streams = seconds.map((s, i) => new Stream(`${s}:${i}`, order));
    streams.forEach((s, i) => clock.add(s, seconds[i]));
    t = 1e9;
    await Promise.all(streams.map((s) => s.done));
    const got = order.map((n) => Number(n.split(':')[0]));
    assert.deepEqual(got, [...seconds].sort((x, y) => x - y));
    assert.ok(streams.every((s) => s.expired === 1));
  });
});
