/**
 * One matcher's buffers on the device: the state buffers mirroring the host layout (uploaded by
 * dirty range, moves by one scatter dispatch), the per-batch scratch (input, candidates), the
 * readback ring's slots, and the bind groups that tie them to the kernels (bindings.ts).
 */
import { type BufferRole, type EntryPoint, type StateBuffer, bindGroupEntries } from './bindings.js';
import type { GpuContext } from './device.js';
import type { GpuKernels } from './kernels.js';
import type { GpuLayout } from './layout.js';

/** Bytes to allocate for `need`: 1/16 more (at least 4 KiB), so growth re-uploads rarely. */
function headroom(need: number): number {
  return need + Math.max(4096, Math.ceil(need / 16));
}

const STORAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const STAGING = () => GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST;

type MatchKernel = Exclude<EntryPoint, 'scatter'>;
export type SlotGroups = Record<MatchKernel, GPUBindGroup>;

/** One readback slot: the batch's counters and output pairs, and the staging buffer they go to. */
export interface Slot {
  counts: GPUBuffer;
  out: GPUBuffer;
  outCap: number;
  staging: GPUBuffer;
  stagingBytes: number;
  groups: (SlotGroups & { version: number }) | null;
  busy: boolean;
}

export class GpuBuffers {
  private readonly device: GPUDevice;
  private bufs = new Map<StateBuffer, GPUBuffer>();
  /** Buffers created since their last full upload. */
  private readonly fresh = new Set<StateBuffer>();
  private bindVersion = 0;
  private slots: Slot[] = [];

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: GpuLayout,
    private readonly kernels: GpuKernels,
    private readonly opts: { maxBatch: number; initialOutputs: number },
  ) {
    this.device = ctx.device;
  }

  /** Frees the buffers (the device may be shared). */
  destroy(): void {
    for (const b of this.bufs.values()) b.destroy();
    for (const s of this.slots) {
      s.counts.destroy();
      s.out.destroy();
      s.staging.destroy();
    }
    this.bufs.clear();
    this.slots = [];
  }

  /** GPU memory held, bytes. */
  get bytes(): number {
    let n = 0;
    for (const buf of this.bufs.values()) n += buf.size;
    for (const s of this.slots) n += s.counts.size + s.out.size + s.staging.size;
    return n;
  }

  /** The named buffer, at least `bytes` long; a new one (zeroed) when it had to grow. */
  buffer(name: StateBuffer, bytes: number): GPUBuffer {
    const size = Math.max(16, Math.ceil(bytes / 4) * 4);
    let b = this.bufs.get(name);
    if (b === undefined || b.size < size) {
      b?.destroy();
      b = this.ctx.createBuffer(`ambit.${name}`, size, STORAGE());
      this.bufs.set(name, b);
      this.fresh.add(name);
      this.bindVersion++; // cached bind groups refer to the old buffer
    }
    return b;
  }

  /**
   * Sends elements [lo, hi) of a host array, or all of [0, used) after growth. GPU buffers are
   * sized to the used part plus 1/16, not to the host array's doubling capacity.
   */
  private upload(name: StateBuffer, arr: Uint32Array | Float32Array, lo: number, hi: number, all: boolean, used: number): void {
    const have = this.bufs.get(name);
    const need = 4 * Math.max(used, 1);
    const buf = have !== undefined && have.size >= need ? have : this.buffer(name, Math.min(arr.byteLength, headroom(need)));
    if (all || this.fresh.delete(name)) this.ctx.writeBuffer(buf, 0, arr.subarray(0, Math.min(arr.length, buf.size / 4)));
    else if (hi > lo) this.ctx.writeBuffer(buf, lo * 4, arr.subarray(lo, Math.min(hi, used)));
  }

  /** Sends every change of the host mirror since the last call. */
  sync(): void {
    const L = this.layout;
    const fAll = L.fDirty.all;
    const f = L.fDirty;
    this.upload('fBloom', L.fBloom, f.lo, f.hi, fAll, L.fTop);
    this.upload('fMeta', L.fMeta, f.lo, f.hi, fAll, L.fTop);
    this.upload('fPos', L.fPos, f.lo, f.hi, fAll, L.fTop);
    this.upload('fRad', L.fRad, f.lo, f.hi, fAll, L.fTop);
    this.upload('fCon', L.fCon, f.lo, f.hi, fAll, L.fTop);
    this.upload('fSub', L.fSub, f.lo, f.hi, fAll, L.fTop);
    f.clear();
    const c = L.cDirty;
    const cAll = c.all;
    this.upload('cHead', L.cHead, c.lo, c.hi, cAll, L.cTop);
    this.upload('cValA', L.cValA, c.lo, c.hi, cAll, L.cTop);
    this.upload('cValB', L.cValB, c.lo, c.hi, cAll, L.cTop);
    c.clear();
    const s = L.sDirty;
    this.upload('cStr', L.cStr, s.lo, s.hi, s.all, L.sTop);
    s.clear();
    this.syncPositions();
  }

  /** Positions: the whole array after growth; else one scatter of the moved slots. */
  private syncPositions(): void {
    const L = this.layout;
    const moved = L.takeMoved();
    const posNeed = 16 * Math.max(L.pTop, 1);
    const sized = (name: 'pos' | 'posLo'): GPUBuffer => {
      const have = this.bufs.get(name);
      return have !== undefined && have.size >= posNeed ? have : this.buffer(name, Math.min(L.pos.byteLength, headroom(posNeed)));
    };
    // The unit vectors and their low parts (layout.ts, takeMoved) go up together.
    const posBuf = sized('pos');
    const loBuf = sized('posLo');
    const fresh = this.fresh.delete('pos');
    if (this.fresh.delete('posLo') || fresh || L.posAll) {
      this.ctx.writeBuffer(posBuf, 0, L.pos.subarray(0, Math.min(L.pos.length, posBuf.size / 4)));
      this.ctx.writeBuffer(loBuf, 0, L.posLo.subarray(0, Math.min(L.posLo.length, loBuf.size / 4)));
      L.posAll = false;
    } else if (moved.length > 0 && moved.length <= 4) {
      for (const slot of moved) {
        this.ctx.writeBuffer(posBuf, slot * 16, L.pos.subarray(slot * 4, slot * 4 + 4));
        this.ctx.writeBuffer(loBuf, slot * 16, L.posLo.subarray(slot * 4, slot * 4 + 4));
      }
    } else if (moved.length > 0) {
      this.scatter(moved);
    }
  }

  /** One upload of (x, y, z, slot) records, each with its low parts (x, y, z, 0), one scatter dispatch (record 0 holds the count). */
  private scatter(moved: readonly number[]): void {
    const L = this.layout;
    const rec = new Float32Array(4 + 8 * moved.length);
    const recU = new Uint32Array(rec.buffer);
    recU[0] = moved.length;
    for (let i = 0; i < moved.length; i++) {
      const slot = moved[i];
      const o = 4 + 8 * i;
      rec[o] = L.pos[4 * slot];
      rec[o + 1] = L.pos[4 * slot + 1];
      rec[o + 2] = L.pos[4 * slot + 2];
      recU[o + 3] = slot;
      rec[o + 4] = L.posLo[4 * slot];
      rec[o + 5] = L.posLo[4 * slot + 1];
      rec[o + 6] = L.posLo[4 * slot + 2];
    }
    const movesBuf = this.buffer('moves', rec.byteLength);
    this.ctx.writeBuffer(movesBuf, 0, rec);
    const enc = this.device.createCommandEncoder({ label: 'ambit.scatter' });
    const pass = enc.beginComputePass({ label: 'ambit.scatter' });
    pass.setPipeline(this.kernels.scatter);
    pass.setBindGroup(0, this.device.createBindGroup({
      label: 'ambit.scatter',
      layout: this.kernels.layout('scatter'),
      entries: bindGroupEntries('scatter', (role) => this.bufs.get(role as StateBuffer)!),
    }));
    pass.dispatchWorkgroups(Math.ceil(moved.length / this.kernels.wg));
    pass.end();
    this.ctx.queue.submit([enc.finish()]);
  }

  /** A free readback slot (a new one when all are busy); the caller marks it busy. */
  slot(): Slot {
    let s = this.slots.find((x) => !x.busy);
    if (s === undefined) {
      s = {
        counts: this.ctx.createBuffer('ambit.counts', 4 * (this.opts.maxBatch + 1), STORAGE()),
        out: this.ctx.createBuffer('ambit.out', 8 * this.opts.initialOutputs, STORAGE()),
        outCap: this.opts.initialOutputs,
        staging: this.ctx.createBuffer('ambit.staging', 4 * (this.opts.maxBatch + 2) + 8 * this.opts.initialOutputs, STAGING()),
        stagingBytes: 4 * (this.opts.maxBatch + 2) + 8 * this.opts.initialOutputs,
        groups: null,
        busy: false,
      };
      this.slots.push(s);
    }
    return s;
  }

  /** Grows the slot's output buffer to hold at least `pairs` pairs (doubling). */
  growOut(s: Slot, pairs: number): void {
    let cap = s.outCap;
    while (cap < pairs) cap *= 2;
    this.resizeOut(s, cap);
  }

  /** Replaces the slot's output buffer with one of `pairs` pairs (within the binding limit). */
  resizeOut(s: Slot, pairs: number): void {
    const cap = Math.max(1, Math.min(pairs, Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 8)));
    if (cap === s.outCap) return;
    s.out.destroy();
    s.out = this.ctx.createBuffer('ambit.out', 8 * cap, STORAGE());
    s.outCap = cap;
    s.groups = null;
  }

  /** The slot's staging buffer, at least `bytes` long (twice that when it must grow). */
  staging(s: Slot, bytes: number): GPUBuffer {
    if (s.stagingBytes < bytes) {
      s.staging.destroy();
      s.stagingBytes = bytes * 2;
      s.staging = this.ctx.createBuffer('ambit.staging', s.stagingBytes, STAGING());
    }
    return s.staging;
  }

  /** The slot's bind groups for Loc, Cont and Zip, rebuilt when a buffer they name was replaced. */
  groups(s: Slot): SlotGroups {
    if (s.groups === null || s.groups.version !== this.bindVersion) {
      s.groups = { version: this.bindVersion, loc: this.group(s, 'loc'), locFew: this.group(s, 'locFew'), cont: this.group(s, 'cont'), zip: this.group(s, 'zip') };
    }
    return s.groups;
  }

  private group(s: Slot, kernel: MatchKernel): GPUBindGroup {
    const buffer = (role: BufferRole): GPUBuffer => (role === 'counts' ? s.counts : role === 'out' ? s.out : this.bufs.get(role)!);
    return this.device.createBindGroup({ label: `ambit.${kernel}`, layout: this.kernels.layout(kernel), entries: bindGroupEntries(kernel, buffer) });
  }
}
