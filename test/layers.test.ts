/**
 * The layer map of docs/architecture.md, checked against every import in the source tree: no
 * import crosses a layer the wrong way, the core does no I/O, the SDK needs no server code, a
 * CPU-only process never loads WebGPU, and no source file grows past about 700 lines without
 * saying why at its top.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

interface Layer {
  name: string;
  /** Path prefixes (or exact files) relative to the repository root; the longest match wins. */
  paths: string[];
  /** Layers this one may import from (its own is always allowed). */
  uses: string[];
  /** npm packages it may import ('*' any). Node built-ins are allowed everywhere but in `pure` layers. */
  packages: string[];
  /** No node: built-ins that do I/O. */
  pure?: boolean;
}

/** Lower layers first. Keep in step with the table in docs/architecture.md. */
export const LAYERS: Layer[] = [
  { name: 'model', paths: ['src/model/'], uses: [], packages: [], pure: true },
  { name: 'workload', paths: ['src/workload/'], uses: ['model'], packages: [], pure: true },
  { name: 'engines', paths: ['src/engines/'], uses: ['model'], packages: ['rbush'], pure: true },
  { name: 'gpu', paths: ['src/engines/gpu/'], uses: ['model', 'engines'], packages: ['webgpu'] },
  { name: 'api', paths: ['api/'], uses: [], packages: ['@bufbuild/protobuf', '@grpc/grpc-js'] },
  { name: 'port', paths: ['services/hub/port.ts'], uses: ['model'], packages: [] },
  { name: 'redis', paths: ['services/redis/'], uses: ['model', 'port'], packages: ['ioredis', 'pino'] },
  { name: 'matcher', paths: ['services/matcher/'], uses: ['model', 'engines', 'port', 'redis'], packages: ['ioredis', 'pino'] },
  { name: 'hub', paths: ['services/hub/'], uses: ['model', 'port', 'redis', 'matcher'], packages: ['ioredis', 'pino'] },
  { name: 'edge', paths: ['services/edge/'], uses: ['model', 'api', 'port'], packages: ['@grpc/grpc-js', '@bufbuild/protobuf', 'pino', 'ws', '@connectrpc/connect', '@connectrpc/connect-node'] },
  { name: 'process', paths: ['services/process/'], uses: ['model', 'engines', 'api', 'port', 'redis', 'matcher', 'hub', 'edge'], packages: ['*'] },
  { name: 'sdk', paths: ['sdk/'], uses: ['api', 'model-types'], packages: ['@grpc/grpc-js', '@bufbuild/protobuf'] },
  { name: 'cli', paths: ['services/cli/'], uses: ['edge', 'sdk'], packages: [] },
  { name: 'bench', paths: ['bench/'], uses: ['*'], packages: ['*'] },
  { name: 'test', paths: ['test/'], uses: ['*'], packages: ['*'] },
];

/** The SDK may use the model's types (erased at build), nothing that runs. */
/** The model's shapes, which the SDK may import type-only (nothing of the model runs in a client). */
const MODEL_TYPES = ['src/model/types.ts', 'src/model/event-patterns.ts'];
/** Node built-ins a pure layer may use (no I/O). */
const PURE_BUILTINS = new Set(['node:util']);

export function layerOf(file: string): Layer | null {
  let best: Layer | null = null;
  let len = -1;
  for (const l of LAYERS) {
    for (const p of l.paths) if ((file === p || (p.endsWith('/') && file.startsWith(p))) && p.length > len) [best, len] = [l, p.length];
  }
  return best;
}

export interface Import {
  spec: string;
  typeOnly: boolean;
  dynamic: boolean;
}

/** Static imports and re-exports, type-only or not, and dynamic import() with a string literal. */
export function importsOf(source: string): Import[] {
  const out: Import[] = [];
  const stat = /^\s*(import|export)\s+(type\s+)?([^'";]*?\s+from\s+)?['"]([^'"]+)['"]/gm;
  for (let m; (m = stat.exec(source)) !== null; ) {
    if (m[1] === 'export' && m[3] === undefined) continue; // `export 'x'` is not a thing; guards odd matches
    out.push({ spec: m[4], typeOnly: m[2] !== undefined, dynamic: false });
  }
  const dyn = /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;
  for (let m; (m = dyn.exec(source)) !== null; ) out.push({ spec: m[1], typeOnly: false, dynamic: true });
  return out;
}

/** What is wrong with `file` importing `imp` (null when allowed). */
export function violation(file: string, imp: Import): string | null {
  const from = layerOf(file);
  if (from === null) return null;
  const spec = imp.spec;
  if (!spec.startsWith('.')) {
    if (spec.startsWith('node:')) {
      return from.pure === true && !PURE_BUILTINS.has(spec) ? `${file} (${from.name}) imports ${spec}: the ${from.name} layer does no I/O` : null;
    }
    const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
    if (from.packages.includes('*') || from.packages.includes(pkg)) return null;
    return `${file} (${from.name}) imports the package ${pkg}, which the ${from.name} layer may not use`;
  }
  const target = posix.normalize(posix.join(posix.dirname(file), spec)).replace(/\.js$/, '.ts');
  const to = layerOf(target);
  if (to === null) return `${file} (${from.name}) imports ${target}, which is in no layer`;
  if (to === from) return null;
  if (from.uses.includes('*') || from.uses.includes(to.name)) {
    // Within the engines, the GPU module loads only on request (a CPU-only process never loads WebGPU).
    if (from.name === 'engines' && to.name === 'gpu' && !imp.dynamic && !imp.typeOnly) return `${file} imports ${target} statically: the GPU engine loads through import() only`;
    return null;
  }
  if (from.name === 'engines' && to.name === 'gpu') {
    return imp.dynamic || imp.typeOnly ? null : `${file} imports ${target} statically: the GPU engine loads through import() only`;
  }
  if (from.uses.includes('model-types') && MODEL_TYPES.includes(target) && imp.typeOnly) return null;
  return `${file} (${from.name}) imports ${target} (${to.name}): ${from.name} may use ${from.uses.join(', ') || 'no other layer'}`;
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return n === 'node_modules' || n === 'dist' || n === 'results' || n.startsWith('.') ? [] : sources(p);
    return n.endsWith('.ts') ? [p] : [];
  });
}

const files = ['src', 'api', 'services', 'sdk', 'bench', 'test'].flatMap((d) => sources(join(ROOT, d))).map((f) => relative(ROOT, f).split('\\').join('/'));

describe('layers (docs/architecture.md)', () => {
  it('every source file is in a layer', () => {
    assert.ok(files.length > 100, `expected the whole tree, found ${files.length} files under ${ROOT}`);
    assert.deepEqual(files.filter((f) => layerOf(f) === null), []);
  });

  it('no import crosses a layer the wrong way, and each layer uses only its packages', () => {
    const bad: string[] = [];
    for (const f of files) for (const imp of importsOf(readFileSync(join(ROOT, f), 'utf8'))) {
      const v = violation(f, imp);
      if (v !== null) bad.push(v);
    }
    assert.deepEqual(bad, []);
  });

  it('the checker itself refuses what the map forbids', () => {
    const check = (file: string, source: string) => importsOf(source).map((i) => violation(file, i));
    assert.match(String(check('src/model/types.ts', "import { x } from '../engines/fast.js';")[0]), /model may use no other layer/);
    assert.match(String(check('services/redis/keys.ts', "import { Gateway } from '../edge/gateway.js';")[0]), /redis may use model, port/);
    assert.match(String(check('services/edge/gateway.ts', "import { RedisHub } from '../hub/redis.js';")[0]), /\(hub\)/);
    assert.match(String(check('services/matcher/core.ts', "import { x } from '../hub/embedded.js';")[0]), /\(hub\)/);
    assert.match(String(check('sdk/device.ts', "import { TokenAuthority } from '../services/edge/auth.js';")[0]), /sdk may use api/);
    assert.match(String(check('sdk/types.ts', "import { checkLat } from '../src/model/limits.js';")[0]), /\(model\)/);
    assert.equal(check('sdk/types.ts', "import type { Op } from '../src/model/types.js';")[0], null);
    assert.match(String(check('src/engines/index.ts', "import { GpuMatcher } from './gpu/matcher.js';")[0]), /import\(\) only/);
    assert.equal(check('src/engines/index.ts', "const m = await import('./gpu/matcher.js');")[0], null);
    assert.match(String(check('src/model/limits.ts', "import { readFileSync } from 'node:fs';")[0]), /does no I\/O/);
    assert.match(String(check('src/engines/fast.ts', "import { Redis } from 'ioredis';")[0]), /package ioredis/);
    assert.match(String(check('services/edge/gateway.ts', "export { RedisHub } from '../hub/redis.js';")[0]), /\(hub\)/);
  });

  it('no source file is over 700 lines without a reason at its top', () => {
    const long: string[] = [];
    for (const f of files) {
      const text = readFileSync(join(ROOT, f), 'utf8');
      const lines = text.split('\n').length;
      if (lines <= 700 || f.startsWith('api/gen/')) continue; // generated code
      const header = text.slice(0, 2000);
      if (!/\bOne file\b|\bone file\b/.test(header)) long.push(`${f}: ${lines} lines and no "one file because ..." note in its header`);
    }
    assert.deepEqual(long, []);
  });
});
