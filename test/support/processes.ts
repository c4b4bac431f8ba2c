/**
 * Real Ambit processes for integration tests: `node dist/services/process/main.js` with an environment,
 * its JSON log parsed line by line, ready once it logs where it listens. Killed on test end and on
 * process exit, so a failed test leaves nothing running.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../../services/process/main.js', import.meta.url));
const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export interface AmbitProcess {
  readonly pid: number;
  /** gRPC port (gateway and all roles). */
  readonly port: number | null;
  readonly metricsPort: number | null;
  /** Every JSON log line so far. */
  readonly logs: Record<string, unknown>[];
  /** Resolves with the first log line `match` accepts (already logged ones count). */
  waitForLog(match: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** SIGKILL: no shutdown code runs. */
  kill9(): Promise<void>;
  /** SIGTERM and wait for exit; resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
  readonly exited: Promise<number | null>;
}

export async function startAmbit(env: Record<string, string>, args: string[] = [], readyTimeoutMs = 20_000): Promise<AmbitProcess> {
  const child = spawn(process.execPath, [MAIN, ...args], {
    env: { ...process.env, AMBIT_PORT: '0', AMBIT_METRICS_PORT: 'off', AMBIT_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const logs: Record<string, unknown>[] = [];
  const waiters = new Set<{ match: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }>();
  let stderr = '';
  let buf = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(line) as Record<string, unknown>;
      } catch {
        parsed = { nonJson: line };
      }
      logs.push(parsed);
      for (const w of [...waiters]) {
        if (w.match(parsed)) {
          waiters.delete(w);
          w.resolve(parsed);
        }
      }
    }
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (c: string) => {
    stderr += c;
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      live.delete(child);
      resolve(code);
    }),
  );
  const waitForLog = (match: (l: Record<string, unknown>) => boolean, timeoutMs = 10_000) => {
    const seen = logs.find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const w = { match, resolve: (l: Record<string, unknown>) => (clearTimeout(timer), resolve(l)) };
      const timer = setTimeout(() => {
        waiters.delete(w);
        reject(new Error(`process ${child.pid}: no matching log line within ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}; last logs: ${JSON.stringify(logs.slice(-5))}`));
      }, timeoutMs);
      waiters.add(w);
      void exited.then((code) => {
        if (!waiters.has(w)) return;
        waiters.delete(w);
        clearTimeout(timer);
        reject(new Error(`process ${child.pid} exited (${code}) before the expected log line; stderr: ${stderr.slice(-2000)}`));
      });
    });
  };
  const role = env.AMBIT_ROLE ?? 'all';
  const ready = await waitForLog((l) => l.component === 'server' && (role === 'matcher' ? l.role === 'matcher' : typeof l.port === 'number'), readyTimeoutMs);
  return {
    pid: child.pid!,
    port: typeof ready.port === 'number' ? ready.port : null,
    metricsPort: typeof ready.metricsPort === 'number' ? ready.metricsPort : null,
    logs,
    waitForLog,
    exited,
    async kill9() {
      child.kill('SIGKILL');
      await exited;
    },
    async stop(timeoutMs = 15_000) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
