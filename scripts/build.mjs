#!/usr/bin/env node
// Incremental build: `tsc -b` recompiles only what changed since the last build (dist/.tsbuildinfo),
// so an unchanged tree builds in about a second. Then outputs whose source is gone are removed:
// a renamed or deleted test would otherwise still run from dist/test/.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const r = spawnSync(process.execPath, [tsc, '-b', join(root, 'tsconfig.json')], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);

// The ops dashboard's page (services/ops-ui/: HTML, CSS and a browser module) goes beside the
// compiled code, so dist/ is all a process needs.
const ui = join(root, 'services', 'ops-ui');
mkdirSync(join(dist, 'services', 'ops-ui'), { recursive: true });
for (const f of readdirSync(ui)) copyFileSync(join(ui, f), join(dist, 'services', 'ops-ui', f));
// The browser demo's page likewise (demo/web/: served by bench/demo-web.ts beside dist/sdk).
const web = join(root, 'demo', 'web');
mkdirSync(join(dist, 'demo', 'web'), { recursive: true });
for (const f of readdirSync(web)) copyFileSync(join(web, f), join(dist, 'demo', 'web', f));

let removed = 0;
const prune = (dir) => {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      prune(p);
      if (readdirSync(p).length === 0) rmSync(p, { recursive: true });
      continue;
    }
    const m = /^(.*)\.js(\.map)?$/.exec(e.name);
    if (m === null) continue;
    const source = join(root, relative(dist, dir), `${m[1]}.ts`);
    if (!existsSync(source)) {
      rmSync(p);
      removed++;
    }
  }
};
prune(dist);
if (removed > 0) process.stderr.write(`build: removed ${removed} outputs whose source is gone\n`);
