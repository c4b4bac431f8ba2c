/**
 * Token expiry of open device streams: one timer for all of them, not one per stream (a timer is
 * about 200 bytes, and a node holds 100k idle streams). Streams wait in buckets by expiry second;
 * the timer is set for the earliest bucket and, when it fires, ends every stream whose second has
 * come by the clock (ms since the epoch) and sets itself for the next.
 */

/** What expires: a stream of a device. */
export interface Expiring {
  expire(): void;
}

/** Timers cap at 2^31-1 ms (~24.8 days); a later expiry re-arms until it comes. */
const MAX_DELAY_MS = 2 ** 31 - 1;

export class ExpiryClock {
  private readonly buckets = new Map<number, Set<Expiring>>();
  /** The bucket seconds, as a binary min-heap (each second once). */
  private readonly heap: number[] = [];
  private timer: NodeJS.Timeout | null = null;
  private timerFor = Infinity;

  constructor(private readonly now: () => number) {}

  /** Calls `s.expire()` once the clock reaches second `at` (at once when it has). */
  add(s: Expiring, at: number): void {
    if (at * 1000 <= this.now()) return s.expire();
    let b = this.buckets.get(at);
    if (b === undefined) {
      b = new Set();
      this.buckets.set(at, b);
      this.push(at);
    }
    b.add(s);
    if (at < this.timerFor) this.arm();
  }

  /** Forgets `s` (added with second `at`). */
  remove(s: Expiring, at: number): void {
    const b = this.buckets.get(at);
    if (b === undefined) return;
    b.delete(s);
    // An empty bucket stays in the heap until its second comes; the timer skips it then.
  }

  /** Streams waiting (tests). */
  get size(): number {
    let n = 0;
    for (const b of this.buckets.values()) n += b.size;
    return n;
  }

  private arm(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.timerFor = Infinity;
    const at = this.heap[0];
    if (at === undefined) return;
    this.timerFor = at;
    this.timer = setTimeout(this.fire, Math.max(0, Math.min(MAX_DELAY_MS, at * 1000 - this.now())));
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    const now = this.now();
    while (this.heap.length !== 0 && this.heap[0] * 1000 <= now) {
      const at = this.pop();
      const b = this.buckets.get(at);
      this.buckets.delete(at);
      if (b !== undefined) for (const s of b) s.expire();
    }
    this.arm();
  };

  private push(v: number): void {
    const h = this.heap;
    h.push(v);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p] <= v) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = v;
  }

  private pop(): number {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length !== 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const c = l + 1 < h.length && h[l + 1] < h[l] ? l + 1 : l;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}
