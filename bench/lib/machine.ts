/** What the numbers were measured on: recorded in every result file and printed with every table. */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { sinkNumber } from './sink.js';

export interface MachineInfo {
  cpu: string;
  logicalCores: number;
  availableParallelism: number;
  memoryBytes: number;
  platform: string;
  arch: string;
  osRelease: string;
  node: string;
  v8: string;
  /** Commit of the working tree, '+dirty' when it has changes; null outside a git checkout. */
  commit: string | null;
  /** Node flags the measuring processes ran with. */
  execArgv: string[];
  /** How fast this machine ran two fixed probes when the run started (absent in older files): see speedProbe. */
  speed?: SpeedProbe;
}

/**
 * Two fixed probes, timed when a run starts, so runs on machines that share a name (lent hosts of
 * one kind differ by up to about 1.5x) can be compared: `jsMs`, the best of 3 of a fixed piece of
 * JavaScript (string keys into a Map and back, a sort of 100k numbers: the kind of work the hub
 * and engines do); `memGBps`, the best of 3 reads of a 32 MiB array.
 */
export interface SpeedProbe {
  jsMs: number;
  memGBps: number;
}

export function speedProbe(): SpeedProbe {
  let jsMs = Infinity;
  let memGBps = 0;
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    const m = new Map<string, number>();
    for (let i = 0; i < 50_000; i++) m.set(`k${(i * 7919) % 50_000}`, i);
    let got = 0;
    for (let i = 0; i < 50_000; i++) got += m.get(`k${i}`) ?? 0;
    sinkNumber(got);
    const a = new Float64Array(100_000);
    let x = 12345;
    for (let i = 0; i < a.length; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      a[i] = x / 2 ** 32;
    }
    a.sort();
    sinkNumber(a[50_000] * 2 ** 31);
    jsMs = Math.min(jsMs, performance.now() - t);
  }
  const big = new Float64Array(4 * 2 ** 20).fill(1);
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    let s = 0;
    for (let i = 0; i < big.length; i++) s += big[i];
    const ms = performance.now() - t;
    sinkNumber(s);
    memGBps = Math.max(memGBps, big.byteLength / (ms * 1e6));
  }
  return { jsMs: Math.round(jsMs * 10) / 10, memGBps: Math.round(memGBps * 10) / 10 };
}

export function machineInfo(execArgv: string[] = process.execArgv): MachineInfo {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model.trim().replace(/\s+/g, ' ') ?? 'unknown',
    logicalCores: cpus.length,
    availableParallelism: typeof os.availableParallelism === 'function' ? os.availableParallelism() : cpus.length,
    memoryBytes: os.totalmem(),
    platform: process.platform,
    arch: process.arch,
    osRelease: os.release(),
    node: process.version,
    v8: process.versions.v8,
    commit: gitCommit(),
    execArgv,
    speed: speedProbe(),
  };
}

/**
 * The checkout's commit (+dirty). AMBIT_BENCH_COMMIT overrides it, for a copy of the tree whose
 * .git is not the one the build came from (a machine the tree was carried to).
 */
function gitCommit(): string | null {
  const given = process.env.AMBIT_BENCH_COMMIT;
  if (given !== undefined && given !== '') return given;
  try {
    const head = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim() !== '';
    return dirty ? `${head}+dirty` : head;
  } catch {
    return null;
  }
}

export function describeMachine(m: MachineInfo): string {
  const speed = m.speed === undefined ? '' : `; speed probes: JavaScript ${m.speed.jsMs} ms, memory ${m.speed.memGBps} GB/s`;
  return `${m.cpu} (${m.logicalCores} logical cores), ${(m.memoryBytes / 2 ** 30).toFixed(1)} GiB, ${m.platform}/${m.arch}, Node ${m.node}${m.commit ? `, commit ${m.commit}` : ''}${speed}`;
}
