/** What the numbers were measured on: recorded in every result file and printed with every table. */
import { execFileSync } from 'node:child_process';
import os from 'node:os';

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
  return `${m.cpu} (${m.logicalCores} logical cores), ${(m.memoryBytes / 2 ** 30).toFixed(1)} GiB, ${m.platform}/${m.arch}, Node ${m.node}${m.commit ? `, commit ${m.commit}` : ''}`;
}
