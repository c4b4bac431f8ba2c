/**
 * The kernels' buffer bindings and shared constants, declared once. The host builds each entry
 * point's bind group layout and bind groups from these tables, and the same tables are written out
 * as WGSL (`matchPrelude`) ahead of match.wgsl, which therefore declares no binding of its own.
 * The probe kernel (probe.ts) uses the same declarations, checked against its WGSL instead.
 *
 * Codes are emitted as WGSL `const`, not `override`: switch case selectors (the operators in
 * Cont) must be const-expressions, and every value here is fixed when the module is built anyway.
 * The workgroup size, which the host chooses per device, stays an `override` (WG).
 */
import { OP_CODE, T_ANY, T_BOOL, T_NUM, T_STR } from '../operators.js';
import { GpuError } from './device.js';
import { EVENT_WORDS, GRID_HEADER_WORDS, P } from './input.js';
import { META_AREA, META_COUNT, META_LIVE, META_NAMES, NAME_BITS } from './layout.js';

/** What a binding holds on the host: a buffer of the matcher's state, or one of a readback slot's. */
export type StateBuffer = 'input' | 'fBloom' | 'fMeta' | 'fPos' | 'fRad' | 'pos' | 'posLo' | 'cand' | 'fCon' | 'fSub' | 'cHead' | 'cValA' | 'cValB' | 'cStr' | 'moves';
export type SlotBuffer = 'counts' | 'out';
export type BufferRole = StateBuffer | SlotBuffer;

export interface BindingDecl<Role extends string = string> {
  /** @binding index in group 0. */
  binding: number;
  /** read: `var<storage, read>`; read_write: `var<storage, read_write>`; uniform: `var<uniform>`. */
  access: 'read' | 'read_write' | 'uniform';
  /** WGSL store type. */
  type: string;
  /** Bytes of one element (of the whole value when not an array): the layout's minimum binding size. */
  elementBytes: number;
  buffer: Role;
  doc: string;
}

/** The WGSL declaration of one binding in group 0. */
export function wgslBinding(name: string, b: BindingDecl): string {
  const space = b.access === 'uniform' ? 'uniform' : `storage, ${b.access}`;
  return `@group(0) @binding(${b.binding}) var<${space}> ${name}: ${b.type};`;
}

/** Bind group layout entries for these bindings (compute stage). */
export function layoutEntries(bindings: readonly BindingDecl[]): GPUBindGroupLayoutEntry[] {
  return bindings.map((b) => ({
    binding: b.binding,
    visibility: GPUShaderStage.COMPUTE,
    buffer: { type: b.access === 'uniform' ? 'uniform' : b.access === 'read' ? 'read-only-storage' : 'storage', minBindingSize: b.elementBytes },
  }));
}

/**
 * For a shader that keeps its own declarations (one compiled standalone, like the probe): checks
 * that it declares exactly the host's bindings, and says which differ.
 */
export function checkBindings(shader: string, wgsl: string, table: Readonly<Record<string, BindingDecl>>): void {
  const key = (d: string) => d.replace(/\s+/g, '');
  const found = new Map<string, string>();
  for (const m of wgsl.matchAll(/@group\s*\(\s*0\s*\)\s*@binding\s*\([^)]*\)\s*var\s*<[^>]*>[^;]*;/g)) found.set(key(m[0]), m[0]);
  const want = new Map(Object.entries(table).map(([name, b]) => [key(wgslBinding(name, b)), wgslBinding(name, b)]));
  const missing = [...want].filter(([k]) => !found.has(k)).map(([, d]) => d);
  const extra = [...found].filter(([k]) => !want.has(k)).map(([, d]) => d);
  if (missing.length > 0 || extra.length > 0) {
    throw new GpuError('SHADER', `shader ${JSON.stringify(shader)}: expected the bindings the host declares, got ${missing.length} missing [${missing.join(' ')}] and ${extra.length} unknown [${extra.join(' ')}]`);
  }
}

/** Every binding of match.wgsl, by its WGSL name. */
export const MATCH_BINDINGS = {
  inp: { binding: 1, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'input', doc: 'the batch input (input.ts, encodeEvents)' },
  fBloom: { binding: 4, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'fBloom', doc: "Bloom word of the filter's constraint names" },
  fMeta: { binding: 5, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'fMeta', doc: 'bits 0-9 count of constraints and tags, bit 10 has area, bit 11 live' },
  fPos: { binding: 6, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'fPos', doc: 'position slot; a META_NAMES filter without an area: its first name id' },
  fRad: { binding: 7, access: 'read', type: 'array<f32>', elementBytes: 4, buffer: 'fRad', doc: 'radius, metres' },
  pos: { binding: 8, access: 'read', type: 'array<vec4<f32>>', elementBytes: 16, buffer: 'pos', doc: 'unit vector, w = 1 when known' },
  cand: { binding: 9, access: 'read_write', type: 'array<u32>', elementBytes: 4, buffer: 'cand', doc: 'candidate filters per event, then their marks' },
  counts: { binding: 10, access: 'read_write', type: 'array<atomic<u32>>', elementBytes: 4, buffer: 'counts', doc: '[0..E) candidates per event, [E] output pairs' },
  fCon: { binding: 11, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'fCon', doc: 'first constraint of the filter' },
  fSub: { binding: 12, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'fSub', doc: 'subscription index' },
  cHead: { binding: 13, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'cHead', doc: 'bits 0-25 name, 26-29 op, 30-31 type' },
  cValA: { binding: 14, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'cValA', doc: 'number: key hi; string: word offset in cStr' },
  cValB: { binding: 15, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'cValB', doc: 'number: key lo; string: byte length' },
  cStr: { binding: 16, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'cStr', doc: 'constraint strings (UTF-8), automata, and the name ids of META_NAMES filters, 4 bytes a word' },
  outPairs: { binding: 18, access: 'read_write', type: 'array<vec2<u32>>', elementBytes: 8, buffer: 'out', doc: '(event, subscription) pairs' },
  moves: { binding: 19, access: 'read', type: 'array<vec4<f32>>', elementBytes: 16, buffer: 'moves', doc: '[0].x: record count (u32 bits); then per record x, y, z, slot and the low parts x, y, z, 0' },
  posOut: { binding: 20, access: 'read_write', type: 'array<vec4<f32>>', elementBytes: 16, buffer: 'pos', doc: 'the pos buffer, written by scatter' },
  posLo: { binding: 21, access: 'read', type: 'array<vec4<f32>>', elementBytes: 16, buffer: 'posLo', doc: 'low parts of the unit vectors (the float64 vector minus pos), read for band pairs' },
  posLoOut: { binding: 22, access: 'read_write', type: 'array<vec4<f32>>', elementBytes: 16, buffer: 'posLo', doc: 'the posLo buffer, written by scatter' },
} as const satisfies Record<string, BindingDecl<BufferRole>>;

export type MatchBinding = keyof typeof MATCH_BINDINGS;

/** The bindings each entry point uses: its bind group layout and bind groups hold exactly these. */
export const MATCH_ENTRY_POINTS = {
  loc: ['inp', 'fBloom', 'fMeta', 'fPos', 'fRad', 'pos', 'posLo', 'cand', 'counts'],
  locFew: ['inp', 'fBloom', 'fMeta', 'fPos', 'fRad', 'pos', 'posLo', 'cand', 'counts'],
  cont: ['inp', 'fMeta', 'fPos', 'cand', 'counts', 'fCon', 'fSub', 'cHead', 'cValA', 'cValB', 'cStr'],
  zip: ['inp', 'cand', 'counts', 'outPairs'],
  scatter: ['moves', 'posOut', 'posLoOut'],
} as const satisfies Record<string, readonly MatchBinding[]>;

export type EntryPoint = keyof typeof MATCH_ENTRY_POINTS;
export const ENTRY_POINTS = Object.keys(MATCH_ENTRY_POINTS) as EntryPoint[];

/** Constants the host and the kernels must agree on, emitted as `const NAME: u32`. */
function sharedConstants(): [string, number, string][] {
  const c: [string, number, string][] = [];
  for (const [op, code] of Object.entries(OP_CODE)) c.push([`OP_${op.toUpperCase()}`, code, '']);
  c.push(['T_NUM', T_NUM, 'value types'], ['T_STR', T_STR, ''], ['T_BOOL', T_BOOL, ''], ['T_ANY', T_ANY, 'exists: any type']);
  c.push(['NAME_BITS', NAME_BITS, 'cHead: name id bits, then 4 of operator, 2 of type']);
  c.push(['META_COUNT', META_COUNT, 'fMeta bits'], ['META_AREA', META_AREA, ''], ['META_LIVE', META_LIVE, ''], ['META_NAMES', META_NAMES, '']);
  for (const [k, v] of Object.entries(P)) c.push([`P_${k}`, v, k === 'FILTERS' ? 'parameter words of the batch input' : '']);
  c.push(['GRID_HEADER', GRID_HEADER_WORDS, 'words before the grid cell offsets']);
  c.push(['EVENT_WORDS', EVENT_WORDS, 'words of an event header in the batch input']);
  return c;
}

let prelude: string | undefined;

/** The WGSL declarations of the tables above, placed ahead of match.wgsl. */
export function matchPrelude(): string {
  if (prelude !== undefined) return prelude;
  const lines = ['// Generated from src/engines/gpu/bindings.ts and src/engines/operators.ts (host and kernels share them).'];
  for (const [name, value, doc] of sharedConstants()) lines.push(`const ${name}: u32 = ${value}u;${doc ? ` // ${doc}` : ''}`);
  for (const [name, b] of Object.entries(MATCH_BINDINGS) as [string, BindingDecl][]) {
    lines.push(`${wgslBinding(name, b)} // ${b.doc}`);
  }
  return (prelude = `${lines.join('\n')}\n\n`);
}

/**
 * match.wgsl with the prelude ahead of it. Rejects a source that declares a binding itself: the
 * host would not know it, and the pipeline would fail later with a less clear message.
 */
export function matchSource(wgsl: string): string {
  const at = wgsl.search(/@binding\s*\(/);
  if (at >= 0) {
    const line = wgsl.slice(0, at).split('\n').length;
    throw new GpuError('SHADER', `shader "match": expected no @binding (bindings are declared in bindings.ts), got one at line ${line}`);
  }
  return matchPrelude() + wgsl;
}

/** The bind group layout of one entry point, from the table. */
export function createBindGroupLayout(device: GPUDevice, entry: EntryPoint): GPUBindGroupLayout {
  const bindings: BindingDecl[] = MATCH_ENTRY_POINTS[entry].map((name) => MATCH_BINDINGS[name]);
  return device.createBindGroupLayout({ label: `ambit.${entry}`, entries: layoutEntries(bindings) });
}

/** The bind group entries of one entry point, each binding's buffer found by its role. */
export function bindGroupEntries(entry: EntryPoint, buffer: (role: BufferRole) => GPUBuffer): GPUBindGroupEntry[] {
  return MATCH_ENTRY_POINTS[entry].map((name) => {
    const b: BindingDecl<BufferRole> = MATCH_BINDINGS[name];
    return { binding: b.binding, resource: { buffer: buffer(b.buffer) } };
  });
}
