/**
 * Streams subscriptions from a WorkloadSource into engines in chunks, so that generation is never
 * timed and never held whole. A workload of n subscriptions is a prefix of one of m > n
 * (generator.ts), so suites that sweep sizes grow one engine from size to size.
 */
import type { Matcher } from '../../../src/engines/index.js';
import type { LatLon, Subscription } from '../../../src/model/types.js';
import type { WorkloadSource } from '../../../src/workload/index.js';
import { count } from '../format.js';
import { msSince, now } from '../measure.js';
import { Progress } from '../progress.js';

interface LoadSlot {
  name: string;
  m: Matcher;
  /** Time in add(), ms. */
  addMs: number;
  /** Time in updatePosition() for the devices of the added subscriptions, ms. */
  posMs: number;
}

const CHUNK = 4096;

/**
 * Streams one workload into several engines: each chunk is generated once (timed apart), then
 * added to each engine in turn (each timed on its own), then its owners' devices are placed.
 */
export class Loader {
  readonly slots: LoadSlot[] = [];
  loaded = 0;
  generateMs = 0;
  private readonly gen: Iterator<Subscription>;
  private readonly lat: Float64Array;
  private readonly lon: Float64Array;

  /** `bulk`: each chunk goes to an engine in one addMany call, else add by add. */
  constructor(readonly src: WorkloadSource, readonly total: number, readonly bulk = false) {
    this.gen = src.subscriptions(total)[Symbol.iterator]();
    // Device i owns subscription i; its initial position does not depend on the workload size.
    const t0 = now();
    const devices = src.devices(total);
    this.lat = Float64Array.from(devices, (d) => d.lat);
    this.lon = Float64Array.from(devices, (d) => d.lon);
    this.generateMs += msSince(t0);
  }

  add(name: string, m: Matcher): LoadSlot {
    if (this.loaded > 0) throw new Error(`bench: engine ${name} joined a load already at ${this.loaded}`);
    const s = { name, m, addMs: 0, posMs: 0 };
    this.slots.push(s);
    return s;
  }

  drop(name: string): void {
    const i = this.slots.findIndex((s) => s.name === name);
    if (i >= 0) this.slots.splice(i, 1);
  }

  position(i: number): LatLon {
    return { lat: this.lat[i], lon: this.lon[i] };
  }

  /** Device of owner `dev<i>`, or undefined. */
  ownerPosition(owner: string): LatLon | undefined {
    const i = Number(owner.slice(3));
    return owner.startsWith('dev') && Number.isInteger(i) && i >= 0 && i < this.loaded ? this.position(i) : undefined;
  }

  /**
   * Loads up to `n` subscriptions in all (no-op when already there). Stops early, returning false,
   * when `deadline` (performance.now() ms) passes; `tick` sees the count after every chunk.
   */
  loadTo(n: number, tick?: (loaded: number) => void, deadline = Infinity): boolean {
    const target = Math.min(n, this.total);
    const chunk: Subscription[] = [];
    while (this.loaded < target) {
      if (performance.now() > deadline) return false;
      const k = Math.min(CHUNK, target - this.loaded);
      let t0 = now();
      chunk.length = 0;
      for (let i = 0; i < k; i++) {
        const r = this.gen.next();
        if (r.done === true) throw new Error('bench: workload stream ended early');
        chunk.push(r.value);
      }
      this.generateMs += msSince(t0);
      for (const s of this.slots) {
        const m = s.m;
        t0 = now();
        if (this.bulk) m.addMany(chunk);
        else for (let i = 0; i < k; i++) m.add(chunk[i]);
        s.addMs += msSince(t0);
      }
      const base = this.loaded;
      for (const s of this.slots) {
        const m = s.m;
        t0 = now();
        for (let i = base; i < base + k; i++) m.updatePosition(`dev${i}`, this.lat[i], this.lon[i]);
        s.posMs += msSince(t0);
      }
      this.loaded += k;
      tick?.(this.loaded);
    }
    return true;
  }
}

/** A Progress bar over a Loader's adds (one tick per chunk). */
export function loadWithProgress(loader: Loader, n: number, label: string): void {
  const from = loader.loaded;
  if (n <= from) return;
  const p = new Progress(`${label}: add ${count(n - from)} subscriptions (to ${count(n)})${loader.slots.length > 1 ? ` into ${loader.slots.map((s) => s.name).join(', ')}` : ''}`, n - from);
  let last = from;
  loader.loadTo(n, (loaded) => {
    p.tick(loaded - last);
    last = loaded;
  });
  p.end();
}
