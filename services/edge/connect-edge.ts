/**
 * The unary calls on the web port (AMBIT_WEB_PORT), for browsers and other HTTP/1.1 clients: the
 * Connect protocol and gRPC-Web, through @connectrpc/connect-node, beside the WebSocket device
 * streams (ws-server.ts). Every unary call of DeviceService, PublisherService and OpsService is
 * served with the gateway's own checks and work (Gateway.runUnary, the same as over gRPC); the
 * streams are not (Connect's client and bidi streams need HTTP/2; device streams go over the
 * WebSocket, bulk publishing over gRPC).
 *
 * Errors carry what the gRPC trailers carry, as Connect error metadata (`ambit-field`,
 * `ambit-publish`, `ambit-retry-after-ms`) and details (google.rpc.BadRequest for a named field,
 * google.rpc.RetryInfo for a rate limit).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { DescService } from '@bufbuild/protobuf';
import { Code, ConnectError, type ConnectRouter, type HandlerContext, createContextKey, createContextValues } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { OpsService } from '../../api/gen/ambit/v1/ops_pb.js';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { BadRequestSchema, RetryInfoSchema } from '../../api/gen/google/rpc/error_details_pb.js';
import { type StatusInfo, asciiField } from './convert.js';
import { WS_PATH } from '../../api/websocket.js';
import { type Gateway, UNARY, type UnaryImpl } from './gateway.js';

/** The request's socket (its TLS client certificate, under mutual TLS). */
const SOCKET = createContextKey<unknown>(null);
/** Every authorization header line of the request (Node's `headers` keeps only the first). */
const AUTHORIZATION = createContextKey<string[] | null>(null);

function rawAuthorization(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i].toLowerCase() === 'authorization') out.push(raw[i + 1]);
  return out;
}

/** Connect's error codes are gRPC's numbers. */
function connectError(s: StatusInfo): ConnectError {
  const metadata = new Headers();
  if (s.field !== '') metadata.set('ambit-field', asciiField(s.field));
  if (s.outcome !== undefined) metadata.set('ambit-publish', s.outcome);
  if (s.retryAfterMs !== undefined) metadata.set('ambit-retry-after-ms', String(s.retryAfterMs));
  const details = [];
  if (s.field !== '' && (s.code as number) === Code.InvalidArgument) {
    const description = s.message.startsWith(`${s.field}: `) ? s.message.slice(s.field.length + 2) : s.message;
    details.push({ desc: BadRequestSchema, value: { fieldViolations: [{ field: s.field, description }] } });
  }
  if (s.retryAfterMs !== undefined) {
    const seconds = Math.floor(s.retryAfterMs / 1000);
    details.push({ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(seconds), nanos: (s.retryAfterMs - seconds * 1000) * 1_000_000 } } });
  }
  return new ConnectError(s.message, s.code as number as Code, metadata, details);
}

/**
 * Every value of a request's authorization header: each raw header line, each split at commas
 * (a bearer token has none, so two values joined on one line count as two).
 */
function authorizationValues(ctx: HandlerContext): string[] {
  const lines = ctx.values.get(AUTHORIZATION) ?? [ctx.requestHeader.get('authorization') ?? ''].filter((v) => v !== '');
  return lines.flatMap((v) => v.split(',').map((x) => x.trim()));
}

/** The request handler of the web port's Connect and gRPC-Web calls; `fallback` answers anything else. */
export function connectHandler(gateway: Gateway, maxBytes: number, fallback: (req: IncomingMessage, res: ServerResponse) => void): (req: IncomingMessage, res: ServerResponse) => void {
  type Fallback = NonNullable<Parameters<typeof connectNodeAdapter>[0]['fallback']>;
  const handlers = gateway.handlers();
  const services: [DescService, Record<string, unknown>][] = [
    [DeviceService, handlers.device],
    [PublisherService, handlers.publisher],
    [OpsService, handlers.ops],
  ];
  const routes = (router: ConnectRouter): void => {
    for (const [service, impls] of services) {
      const impl: Record<string, (req: unknown, ctx: HandlerContext) => Promise<unknown>> = {};
      for (const [name, h] of Object.entries(impls)) {
        const u = (h as { [UNARY]?: UnaryImpl })[UNARY];
        if (u === undefined) continue;
        const path = `/${service.typeName}/${service.method[name as keyof typeof service.method]?.name ?? name}`;
        impl[name] = async (req, ctx) => {
          try {
            return await gateway.runUnary(u, req, authorizationValues(ctx), path, () => ctx.signal.aborted, ctx.values.get(SOCKET));
          } catch (s) {
            throw connectError(s as StatusInfo);
          }
        };
      }
      router.service(service, impl as never);
    }
  };
  const adapter = connectNodeAdapter({
    routes,
    connect: true,
    grpcWeb: true,
    grpc: false,
    readMaxBytes: maxBytes,
    fallback: fallback as unknown as Fallback,
    contextValues: (req) => createContextValues().set(SOCKET, req.socket).set(AUTHORIZATION, rawAuthorization(req.rawHeaders)),
  });
  // The device stream's path is the WebSocket's: a plain request there is told to upgrade.
  return (req, res) => ((req.url ?? '').split('?')[0] === WS_PATH ? fallback(req, res) : adapter(req, res));
}

/** What a browser on another origin may send and read (Connect, gRPC-Web and Ambit's own headers). */
const ALLOW_HEADERS = 'authorization, content-type, connect-protocol-version, connect-timeout-ms, grpc-timeout, x-grpc-web, x-user-agent';
const EXPOSE_HEADERS = 'grpc-status, grpc-message, grpc-status-details-bin, ambit-field, ambit-publish, ambit-retry-after-ms, ambit-message, ambit-applied';

/**
 * CORS for the web port (AMBIT_WEB_ORIGINS): requests from the listed origins (or any, with '*')
 * get the headers that let a page on another origin call it, and preflights are answered; from
 * other origins nothing is added (a browser then keeps the page from reading the answer). Tokens
 * travel in the authorization header, never cookies, so no credentials mode is allowed.
 */
export function withCors(origins: readonly string[], handler: (req: IncomingMessage, res: ServerResponse) => void): (req: IncomingMessage, res: ServerResponse) => void {
  if (origins.length === 0) return handler;
  const any = origins.includes('*');
  const allowed = new Set(origins);
  return (req, res) => {
    const origin = req.headers.origin;
    const ok = typeof origin === 'string' && (any || allowed.has(origin));
    if (ok) {
      res.setHeader('access-control-allow-origin', any ? '*' : origin);
      if (!any) res.setHeader('vary', 'origin');
      res.setHeader('access-control-expose-headers', EXPOSE_HEADERS);
    }
    if (req.method === 'OPTIONS' && typeof req.headers['access-control-request-method'] === 'string') {
      if (ok) {
        res.setHeader('access-control-allow-methods', 'POST, GET');
        res.setHeader('access-control-allow-headers', ALLOW_HEADERS);
        res.setHeader('access-control-max-age', '7200');
      }
      res.writeHead(ok ? 204 : 403).end();
      return;
    }
    handler(req, res);
  };
}
