/** Helpers of the SDK tests: an in-process server on a free port, tokens, and a TCP proxy to cut. */
import net from 'node:net';
import { SCOPES } from '../../services/edge/auth.js';
import { type RunningServer, startServer } from '../../services/process/server.js';

export interface TestServer {
  server: RunningServer;
  /** The gRPC address ("host:port"). */
  address: string;
  /** The WebSocket address of device streams (ws://host:port). */
  wsAddress: string;
  /** A token for `subject` with `scopes` (default: device). */
  token(subject: string, scopes?: string[]): string;
  opsToken: string;
  publishToken: string;
  stop(): Promise<void>;
}

export async function startTestServer(): Promise<TestServer> {
  const server = await startServer({ port: 0, metricsPort: null, webPort: 0, engine: 'fast', dev: true, shutdownGraceS: 1 });
  const authority = server.authority!;
  const token = (subject: string, scopes: string[] = [SCOPES.device]) => authority.issue({ subject, scopes, ttlSeconds: 600 });
  return {
    server,
    address: `127.0.0.1:${server.port}`,
    wsAddress: `ws://127.0.0.1:${server.webPort}`,
    token,
    opsToken: token('test-ops', [SCOPES.ops]),
    publishToken: token('test-publisher', [SCOPES.publish]),
    stop: () => server.stop(),
  };
}

/** Polls `cond` every 10 ms until it holds; fails after `timeoutMs`. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The next value of an async iterator, or an error after `timeoutMs`. */
export async function next<T>(it: AsyncIterator<T>, timeoutMs = 3000): Promise<T> {
  let timer: NodeJS.Timeout;
  const r = await Promise.race([
    it.next(),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no value within ${timeoutMs} ms`)), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
  if (r.done === true) throw new Error('iterator ended');
  return r.value;
}

/**
 * A loopback TCP proxy in front of the server: `cut()` drops every connection, `refuse` makes it
 * drop new ones at once, so a client sees the network fail and come back.
 */
export class TcpProxy {
  refuse = false;
  private readonly sockets = new Set<net.Socket>();
  private readonly server: net.Server;
  port = 0;

  private constructor(private targetPort: number) {
    this.server = net.createServer((client) => {
      if (this.refuse) {
        client.destroy();
        return;
      }
      const upstream = net.connect(this.targetPort, '127.0.0.1');
      this.sockets.add(client);
      this.sockets.add(upstream);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.pipe(upstream);
      upstream.pipe(client);
    });
  }

  static async start(targetPort: number): Promise<TcpProxy> {
    const p = new TcpProxy(targetPort);
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get connections(): number {
    return this.sockets.size / 2;
  }

  /** New connections go to `port` from now on (a server started again elsewhere). */
  retarget(port: number): void {
    this.targetPort = port;
  }

  cut(): void {
    for (const s of [...this.sockets]) s.destroy();
    this.sockets.clear();
  }

  async close(): Promise<void> {
    this.refuse = true;
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
