#!/usr/bin/env node
// Builds the installable SDK package (sdk/package.json) into sdk/dist: the SDK with the generated
// API code it imports, as ES modules with type declarations. Then checks that the browser entry
// (sdk/web.ts, also the package's "browser" and "react-native" export) reaches no Node module and
// no grpc-js, so a bundler takes it as it is. `npm pack` in sdk/ then makes the tarball.
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'sdk', 'dist');
rmSync(out, { recursive: true, force: true });
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'sdk', 'tsconfig.json')], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);

/** Every module the file imports at run time, transitively; the bare specifiers it reaches. */
function graph(entry) {
  const seen = new Set();
  const bare = new Map();
  const walk = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(file, 'utf8');
    for (const m of src.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s*['"]([^'"]+)['"]|(?:^|\n)\s*import\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)) {
      const spec = m[1] ?? m[2] ?? m[3];
      if (spec.startsWith('.')) walk(resolve(dirname(file), spec));
      else bare.set(spec, relative(out, file));
    }
  };
  walk(entry);
  return { files: seen, bare };
}
const web = graph(join(out, 'sdk', 'web.js'));
const allowed = new Set(['@bufbuild/protobuf', '@bufbuild/protobuf/wkt', '@bufbuild/protobuf/codegenv2']);
const bad = [...web.bare].filter(([spec]) => !allowed.has(spec));
if (bad.length > 0) {
  for (const [spec, file] of bad) process.stderr.write(`build-sdk: the browser entry reaches ${spec} (imported by ${file})\n`);
  process.exit(1);
}
process.stdout.write(`build-sdk: sdk/dist built; the browser entry is ${web.files.size} modules importing only ${[...new Set(web.bare.keys())].join(', ')}\n`);
