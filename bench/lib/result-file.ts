/**
 * Result files of every benchmark: where they go, what each records about its run (the machine
 * with its commit, when it started, the command line) and how they are written and read back.
 * The field names stay each benchmark's own (startedAt, date, createdAt, ...): the report
 * generators read files of every age.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type MachineInfo, machineInfo } from './machine.js';

/** The repository root (this file is dist/bench/lib/result-file.js). */
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** Where result documents are built from. */
export const RESULTS_DIR = path.join(REPO, 'bench', 'results');

export interface ResultRunOptions {
  /** --out as parsed: a path relative to the working directory; anything else means the default. */
  out?: string | boolean;
  /** Default file relative to the repository; without one, bench/out/<name>-<start time>.json. */
  defaultFile?: string;
  /** The run's name (--name): letters, digits, '.', '_' or '-'. */
  name?: string;
  /** Node flags of the processes that measure (default: this process's). */
  execArgv?: string[];
  /** Reports a bad option and exits. */
  fail: (msg: string) => never;
}

/** One benchmark run: created when the run starts, written as often as the run likes. */
export class ResultRun {
  readonly startedAt = new Date();
  /** Arguments after the script. */
  readonly argv = process.argv.slice(2);
  /** `node <script> <arguments>` as it was started. */
  readonly command = `node ${process.argv.slice(1).join(' ')}`;
  readonly machine: MachineInfo;
  readonly path: string;

  constructor(o: ResultRunOptions) {
    if (o.name !== undefined && !/^[\w.-]+$/.test(o.name)) o.fail(`--name must be letters, digits, '.', '_' or '-', got ${JSON.stringify(o.name)}`);
    if (typeof o.out === 'string') this.path = path.resolve(o.out);
    else if (o.defaultFile !== undefined) this.path = path.join(REPO, o.defaultFile);
    else this.path = path.join(REPO, 'bench', 'out', `${o.name ?? 'bench'}-${this.startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
    this.machine = machineInfo(o.execArgv ?? process.execArgv);
  }

  /** The file as printed: relative to the working directory. */
  get shown(): string {
    return path.relative(process.cwd(), this.path) || this.path;
  }

  write(value: unknown): void {
    writeResultFile(this.path, value);
  }
}

/** Writes a JSON result (folders created, two-space indent, trailing newline). */
export function writeResultFile(file: string, value: unknown): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}

/** Parses a result file; `fail` reports one that is unreadable or not JSON. */
export function readResultFile(file: string, fail: (msg: string) => never): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    fail(`${file}: ${(err as Error).message}`);
  }
}
