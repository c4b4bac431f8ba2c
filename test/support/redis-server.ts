/**
 * A throwaway `redis-server` for integration tests: memory only (no RDB, no AOF), on a free port
 * of 127.0.0.1, killed by stop() or when the test process exits.
 *
 *   const redis = await startRedisServer();   // { url, port, stop }
 *   ... new RedisHub({ redis: redis.url }) ...
 *   await redis.stop();
 *
 * `redisServerMissing()` says why integration tests must skip (null when the binary runs), so a
 * suite can `describe(name, { skip: redisServerMissing() ?? false }, ...)`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import net from 'node:net';
import { freePort } from './ports.js';

export interface RedisServer {
  /** redis://127.0.0.1:<port> */
  url: string;
  port: number;
  /** Kills the server (SIGKILL after 2 s) and waits for it to exit. Idempotent. */
  stop(): Promise<void>;
}

export interface RedisServerOptions {
  /** The binary; default $REDIS_SERVER or "redis-server" on the PATH. */
  binary?: string;
  /** More `--name value` arguments for the server. */
  args?: string[];
  /** How long to wait for the first PONG; default 10 s. */
  startTimeoutMs?: number;
}

const running = new Set<ChildProcess>();
let exitHook = false;

function binaryOf(options: RedisServerOptions): string {
  return options.binary ?? process.env.REDIS_SERVER ?? 'redis-server';
}

/** null when redis-server can be run; otherwise the reason to skip. */
export function redisServerMissing(options: RedisServerOptions = {}): string | null {
  // CI sets this: there a missing redis-server must fail the suites, not skip them.
  if (process.env.AMBIT_REQUIRE_REDIS === '1') return null;
  try {
    execFileSync(binaryOf(options), ['--version'], { stdio: 'ignore' });
    return null;
  } catch (err) {
    return `no runnable ${binaryOf(options)} (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`;
  }
}

export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  if (!exitHook) {
    exitHook = true;
    process.on('exit', () => {
      for (const c of running) c.kill('SIGKILL');
    });
  }
  let lastErr: unknown;
  // The free port may be taken between probing and binding: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    try {
      return await launch(options, port);
    } catch (err) {
      lastErr = err;
    }
  }
  throw lastErr;
}

async function launch(options: RedisServerOptions, port: number): Promise<RedisServer> {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning', ...(options.args ?? [])];
  const child = spawn(binaryOf(options), args, { stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-2000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let dead = false;
  void exited.then(() => {
    dead = true;
    running.delete(child);
  });
  const stop = async (): Promise<void> => {
    if (dead) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + (options.startTimeoutMs ?? 10_000);
  for (;;) {
    if (dead) throw new Error(`redis-server: exited before answering on port ${port}: ${stderr.trim()}`);
    if (await ping(port)) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`redis-server: no PONG on port ${port} within ${options.startTimeoutMs ?? 10_000} ms: ${stderr.trim()}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { url: `redis://127.0.0.1:${port}`, port, stop };
}


/** True when a raw PING on the port (of 127.0.0.1) answers +PONG. */
export function ping(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect(port, host);
    let buf = '';
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.once('error', () => done(false));
    sock.once('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) done(buf.startsWith('+PONG'));
    });
  });
}
