/** Command-line parsing shared by the benchmark entry points: `--flag` and `--key value` / `--key=value`. */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import type { SpatialKind } from '../../src/workload/index.js';

export type Args = Record<string, string | boolean | undefined>;
export type Fail = (msg: string) => never;

/** A bad command line: the message and the usage on stderr, exit status 2. */
export function cliFail(prog: string, usage: string): Fail {
  return (msg) => {
    process.stderr.write(`${prog}: ${msg}\n\n${usage.trimEnd()}\n`);
    process.exit(2);
  };
}

/** Runs an entry point's main; an error ends the process with status 1 after its stack. */
export function runMain(prog: string, main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    process.stderr.write(`${prog}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}

/**
 * The command line of an entry point whose usage is `help`: its options and a reader, or null when
 * --help was asked (the usage is printed then).
 */
export function readCommandLine(argv: string[], flags: Set<string>, valued: Set<string>, fail: Fail, help: string): { a: Args; r: ArgReader } | null {
  const a = parseArgs(argv, flags, valued, fail);
  if (a.help) {
    process.stdout.write(`${help}\n`);
    return null;
  }
  return { a, r: new ArgReader(a, fail) };
}

/** 1000, 10k, 2.5M, 1_000_000 → an integer, or NaN. */
export function parseCount(s: string): number {
  const m = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(s.replace(/_/g, ''));
  return m === null ? NaN : Math.round(Number(m[1]) * (m[2] === '' ? 1 : m[2].toLowerCase() === 'k' ? 1e3 : 1e6));
}

/** Typed option values with one wording for what is wrong; `fallback` when an option is absent. */
export class ArgReader {
  constructor(
    readonly args: Args,
    private readonly fail: Fail,
  ) {}

  str(key: string): string | undefined {
    const v = this.args[key];
    return typeof v === 'string' ? v : undefined;
  }

  flag(key: string): boolean {
    return this.args[key] === true;
  }

  /** An integer in [min, max] ('_' separators allowed). */
  int(key: string, fallback: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
    const v = this.args[key];
    if (v === undefined) return fallback;
    const n = Number(String(v).replace(/_/g, ''));
    if (!Number.isInteger(n) || n < min || n > max) this.fail(`--${key} must be an integer in [${min}, ${max}], got ${JSON.stringify(v)}`);
    return n;
  }

  /** A finite number in [min, max]. */
  num(key: string, fallback: number, min = 0, max = Infinity): number {
    const v = this.args[key];
    if (v === undefined) return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) this.fail(`--${key} must be a number in [${min}, ${max}], got ${JSON.stringify(v)}`);
    return n;
  }

  /** A count such as 1000, 10k or 1M. */
  count(key: string, fallback: number, min = 1): number {
    const v = this.args[key];
    return v === undefined ? fallback : this.toCount(key, String(v), min);
  }

  /** A comma-separated list with at least one item. */
  list(key: string): string[] | undefined {
    const v = this.args[key];
    if (v === undefined) return undefined;
    const items = String(v).split(',').map((s) => s.trim()).filter((s) => s !== '');
    if (items.length === 0) this.fail(`--${key} needs at least one item`);
    return items;
  }

  /** A list of counts, as given or (sorted) ascending without repeats. */
  counts(key: string, fallback: number[], sorted = false): number[] {
    const items = this.list(key);
    if (items === undefined) return fallback;
    const ns = items.map((s) => this.toCount(key, s, 1));
    return sorted ? [...new Set(ns)].sort((a, b) => a - b) : ns;
  }

  /** Areas given in percent of the region, returned as fractions. */
  areas(key: string, fallback: number[]): number[] {
    const items = this.list(key);
    if (items === undefined) return fallback;
    return items.map((s) => {
      const p = Number(s.replace(/%$/, ''));
      if (!(p > 0 && p <= 100)) this.fail(`--${key}: ${JSON.stringify(s)} is not a percentage in (0, 100]`);
      return p / 100;
    });
  }

  /** Spatial placements (default both). */
  spatial(key: string): SpatialKind[] {
    const items = (this.list(key) ?? ['uniform', 'zipf']) as SpatialKind[];
    for (const s of items) if (s !== 'uniform' && s !== 'zipf') this.fail(`--${key}: ${JSON.stringify(s)} is not uniform or zipf`);
    return items;
  }

  /** Items of a list that must each be one of `known`. */
  oneOf<T extends string>(key: string, known: readonly T[], fallback: readonly T[]): T[] {
    const items = (this.list(key) ?? [...fallback]) as T[];
    for (const x of items) if (!known.includes(x)) this.fail(`--${key}: ${JSON.stringify(x)} is not one of ${known.join(', ')}`);
    return items;
  }

  private toCount(key: string, s: string, min: number): number {
    const n = parseCount(s);
    if (!Number.isInteger(n) || n < min) this.fail(`--${key}: ${JSON.stringify(s)} is not a count >= ${min} (e.g. 1000, 10k, 1M)`);
    return n;
  }
}

export function parseArgs(argv: readonly string[], flags: ReadonlySet<string>, valued: ReadonlySet<string>, fail: Fail): Args {
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

/**
 * Arguments of the report generators: result files, or every *.json of `--dir` (default
 * `defaultDir`) when none is named.
 */
export function parseReportArgs(argv: readonly string[], defaultDir: string, usage: string, fail: Fail): { files: string[]; dir: string; scanned: boolean } {
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
