/** Command-line parsing shared by the benchmark entry points: `--flag` and `--key value` / `--key=value`. */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
export type Args = Record<string, string | boolean | undefined>;

export function parseArgs(argv: readonly string[], flags: ReadonlySet<string>, valued: ReadonlySet<string>, fail: (msg: string) => never): Args {
  const out: Args = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) fail(`unexpected argument ${JSON.stringify(a)}`);
    const eq = a.indexOf('=');
    const key = eq < 0 ? a.slice(2) : a.slice(2, eq);
    if (flags.has(key)) {
      if (eq >= 0) fail(`--${key} takes no value`);
      out[key] = true;
    } else if (valued.has(key)) {
      const v = eq >= 0 ? a.slice(eq + 1) : argv[++i];
      if (v === undefined || v.startsWith('--')) fail(`--${key} needs a value`);
      out[key] = v;
    } else fail(`unknown option --${key}`);
  }
  return out;
}

/** FNV-1a over each event's sorted ids: equal checksums = identical answers. */
export function checksum(results: readonly (readonly string[])[]): { checksum: string; avgMatches: number } {
  let h = 0x811c9dc5;
  let total = 0;
  for (const ids of results) {
    total += ids.length;
    const sorted = [...ids].sort();
    for (const id of sorted) {
      for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
      h = Math.imul(h ^ 0x2c, 0x01000193);
    }
    h = Math.imul(h ^ 0x0a, 0x01000193);
  }
  return { checksum: (h >>> 0).toString(16).padStart(8, '0'), avgMatches: results.length === 0 ? 0 : total / results.length };
}

/**
 * Arguments of the report generators: result files, or every *.json of `--dir` (default
 * `defaultDir`) when none is named.
 */
export function parseReportArgs(argv: readonly string[], defaultDir: string, usage: string, fail: (msg: string) => never): { files: string[]; dir: string; scanned: boolean } {
  let dir = defaultDir;
  const files: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--dir') {
      const v = argv[++i];
      if (v === undefined) fail('--dir needs a value');
      dir = path.resolve(v);
    } else if (argv[i] === '--help') {
      process.stdout.write(`${usage}\n`);
      process.exit(0);
    } else if (argv[i].startsWith('--')) fail(`unknown option ${argv[i]}`);
    else files.push(path.resolve(argv[i]));
  }
  const scanned = files.length === 0;
  if (scanned) {
    if (!existsSync(dir)) fail(`no directory ${path.relative(process.cwd(), dir)}`);
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) files.push(path.join(dir, f));
  }
  return { files, dir, scanned };
}
