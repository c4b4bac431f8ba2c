/**
 * The WebSocket port of a gateway (`AMBIT_WEB_PORT`): an HTTP(S) server that upgrades
 * `GET /ambit.v1.DeviceService/Connect` with the subprotocol `ambit.v1` to a device stream
 * (ws-device-stream.ts) and hands it to the gateway, which authenticates it and opens its session
 * as for a gRPC stream. Anything else is answered in HTTP before the upgrade (404 for another path,
 * 426 for a request that is not a WebSocket upgrade, 400 without the subprotocol). With several
 * gateway processes the port is shared as the gRPC port is (node:cluster).
 *
 * Credentials: the `authorization` header (non-browser clients), or a subprotocol entry
 * `ambit.bearer.<token>` beside `ambit.v1` (browsers cannot set headers on a WebSocket); more
 * than one of them in all is refused, as a repeated header is on gRPC. A refusal is the stream's
 * status (an end-of-stream message, then the close), which a browser can read, where an HTTP
 * refusal of the upgrade would only be an error event.
 *
 * Dead peers: a ping every `pingMs`; a socket that has not answered the last one by the next is
 * closed (its session ends; the device resumes when it comes back).
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { WS_BEARER_PREFIX, WS_PATH, WS_SUBPROTOCOL } from './ws-device-stream.js';

export interface WsServerOptions {
  host: string;
  port: number;
  /** TLS (wss://); with `clientCa`, client certificates are asked for, and with `requireClientCert` a connection without a valid one is refused. */
  tls: { cert: Buffer; key: Buffer; clientCa?: Buffer | null; requireClientCert?: boolean } | null;
  /** Largest WebSocket message accepted (a device stream's largest request and its flags byte); past it the socket closes with 1009. */
  maxPayload: number;
  pingMs?: number;
  /** Requests that are not upgrades (the Connect and gRPC-Web calls, connect-edge.ts); default: plainAnswer. */
  onRequest?: (req: IncomingMessage, res: ServerResponse) => void;
  /** A device stream opened: the socket, the credentials it carried (header values and subprotocol tokens, as `Bearer <token>`), and the request (its TLS socket holds a client certificate). */
  onStream(ws: WebSocket, credentials: string[], req: IncomingMessage): void;
}

/** The answer to a request that is neither an upgrade nor served otherwise: 426 on the device stream path, else 404. */
export function plainAnswer(req: IncomingMessage, res: ServerResponse): void {
  const body = `a WebSocket endpoint: upgrade GET ${WS_PATH} with the subprotocol ${WS_SUBPROTOCOL}\n`;
  res.writeHead(req.url?.split('?')[0] === WS_PATH ? 426 : 404, { 'content-type': 'text/plain; charset=utf-8', upgrade: 'websocket' });
  res.end(body);
}

export interface WsServer {
  readonly port: number;
  /** Stops accepting; closes the sockets still open after `graceMs`. */
  close(graceMs: number): Promise<void>;
}

const ALIVE = Symbol('ambit.wsAlive');
type Tracked = WebSocket & { [ALIVE]?: boolean };

/** The `authorization` header values of a request, every one (Node keeps only the first in `headers`). */
function authorizationValues(req: IncomingMessage): string[] {
  const out: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i].toLowerCase() === 'authorization') out.push(raw[i + 1]);
  return out;
}

function offeredProtocols(req: IncomingMessage): string[] {
  const h = req.headers['sec-websocket-protocol'];
  if (h === undefined) return [];
  return h
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

function refuse(socket: Duplex, status: number, reason: string, extra: Record<string, string> = {}): void {
  const body = `${reason}\n`;
  const headers = { 'content-type': 'text/plain; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), connection: 'close', ...extra };
  socket.end(`HTTP/1.1 ${status} ${status === 404 ? 'Not Found' : status === 426 ? 'Upgrade Required' : 'Bad Request'}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n${body}`);
}

export async function startWsServer(o: WsServerOptions): Promise<WsServer> {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: o.maxPayload,
    // Notifications are small and already compact protobuf; deflate would cost CPU per message and memory per socket.
    perMessageDeflate: false,
    handleProtocols: (protocols) => (protocols.has(WS_SUBPROTOCOL) ? WS_SUBPROTOCOL : false),
  });
  const ca = o.tls?.clientCa ?? null;
  const http: Server = o.tls === null ? createHttpServer() : createHttpsServer({ cert: o.tls.cert, key: o.tls.key, ...(ca === null ? {} : { ca, requestCert: true, rejectUnauthorized: o.tls.requireClientCert ?? true }) });
  http.on('request', o.onRequest ?? plainAnswer);
  http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => {});
    const path = (req.url ?? '').split('?')[0];
    if (path !== WS_PATH) return refuse(socket, 404, `no such endpoint ${JSON.stringify(path)}: device streams are at ${WS_PATH}`);
    if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') return refuse(socket, 426, 'upgrade to websocket', { upgrade: 'websocket' });
    const protocols = offeredProtocols(req);
    if (!protocols.includes(WS_SUBPROTOCOL)) return refuse(socket, 400, `offer the subprotocol ${WS_SUBPROTOCOL} (Sec-WebSocket-Protocol)`);
    const credentials = authorizationValues(req);
    for (const p of protocols) if (p.startsWith(WS_BEARER_PREFIX)) credentials.push(`Bearer ${p.slice(WS_BEARER_PREFIX.length)}`);
    wss.handleUpgrade(req, socket, head, (ws) => {
      (ws as Tracked)[ALIVE] = true;
      ws.on('pong', function (this: Tracked) {
        this[ALIVE] = true;
      });
      o.onStream(ws, credentials, req);
    });
  });
  const pingMs = o.pingMs ?? 30_000;
  const pinger = setInterval(() => {
    for (const c of wss.clients) {
      const ws = c as Tracked;
      if (ws[ALIVE] === false) {
        ws.terminate();
        continue;
      }
      ws[ALIVE] = false;
      ws.ping();
    }
  }, pingMs);
  pinger.unref();
  const port = await new Promise<number>((resolve, reject) => {
    http.once('error', reject);
    http.listen({ host: o.host, port: o.port }, () => {
      http.off('error', reject);
      const a = http.address();
      resolve(typeof a === 'object' && a !== null ? a.port : o.port);
    });
  });
  return {
    port,
    close: async (graceMs: number) => {
      clearInterval(pinger);
      const closed = new Promise<void>((resolve) => http.close(() => resolve()));
      // The sessions were ended by the gateway's drain (their end of stream is on its way): give
      // the clients `graceMs` to complete the close, then cut what is left.
      if (wss.clients.size > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, graceMs);
          timer.unref();
          const check = (): void => {
            if (wss.clients.size === 0) {
              clearTimeout(timer);
              resolve();
            }
          };
          for (const c of wss.clients) c.once('close', () => queueMicrotask(check));
        });
      }
      for (const c of wss.clients) c.terminate();
      http.closeAllConnections?.();
      await closed;
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
