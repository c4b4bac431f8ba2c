/**
 * One process per job (as pino's benchmarks do per library): the parent only orchestrates and
 * prints; each child builds its workload and engine, measures, and reports over IPC. A child that
 * dies (out of memory, a crash in an engine) costs that job only.
 */
import { fork } from 'node:child_process';
import os from 'node:os';
import { type Job, type JobResult, runJob } from './cases.js';
import { sinkValue } from './sink.js';

interface Reply {
  ok: boolean;
  result?: JobResult;
  error?: string;
  sink?: number;
}

/** Old-space limit for jobs: three quarters of RAM, leaving at least 2 GiB to the system. */
export function heapLimitMb(): number {
  const total = os.totalmem() / 2 ** 20;
  return Math.max(2048, Math.floor(Math.min(total * 0.75, total - 2048)));
}

/** Node flags of a job process: GC exposed (for clean memory figures) and room for 1 M subscriptions. */
export function childExecArgv(): string[] {
  return ['--expose-gc', `--max-old-space-size=${heapLimitMb()}`];
}

export function runInChild(entry: string, job: Job): Promise<{ result: JobResult; sink: number }> {
  return new Promise((resolve, reject) => {
    const child = fork(entry, ['--child'], { execArgv: childExecArgv(), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let settled = false;
    child.once('message', (msg: Reply) => {
      settled = true;
      if (msg.ok && msg.result !== undefined) resolve({ result: msg.result, sink: msg.sink ?? 0 });
      else reject(new Error(msg.error ?? 'bench: job failed without a message'));
    });
    child.once('error', (err) => {
      if (!settled) {
        settled = true;
        reject(err);
      }
    });
    child.once('exit', (code, signal) => {
      if (!settled) {
        settled = true;
        const oom = code === 134 || signal === 'SIGABRT' || signal === 'SIGKILL';
        reject(new Error(`bench: job process exited with ${signal ?? `code ${code}`}${oom ? ' (out of memory?)' : ''}`));
      }
    });
    child.send(job);
  });
}

/** Entry of a job process: one job from the parent, one reply, exit. */
export function childMain(): void {
  process.once('message', (job: Job) => {
    runJob(job).then(
      (result) => process.send!({ ok: true, result, sink: sinkValue() } satisfies Reply, () => process.exit(0)),
      (err: unknown) => process.send!({ ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies Reply, () => process.exit(1)),
    );
  });
}
