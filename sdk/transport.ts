/**
 * Channels, credentials, tokens and calls shared by the SDK's clients. grpc-js shares one TCP
 * connection among clients of the same address and options (its global subchannel pool), so many
 * AmbitDevice objects in one process multiplex over one HTTP/2 connection unless told otherwise.
 */
import * as grpc from '@grpc/grpc-js';
import type { DescService } from '@bufbuild/protobuf';
import { grpcDefinition } from '../api/rpc.js';
import { AmbitError } from './errors.js';

import { type TokenSource, checkAddress, resolveToken } from './channel.js';

export { checkAddress, type TokenSource };

export interface TlsOptions {
  /** PEM roots to trust; default: the system's. */
  rootCerts?: Buffer;
  /** Client certificate (mutual TLS). */
  privateKey?: Buffer;
  certChain?: Buffer;
  /** Expected server name when it differs from the address's host. */
  serverName?: string;
}

export interface ClientOptions {
  /** TLS: true for system roots, or roots/client certificates. Default: plaintext. */
  tls?: boolean | TlsOptions;
  /** Deadline of unary calls in ms (default 30 000). */
  deadlineMs?: number;
  /** Extra grpc-js channel options (e.g. `'grpc.use_local_subchannel_pool': 1` for a connection of its own). */
  channelOptions?: grpc.ChannelOptions;
}

export function credentials(tls: ClientOptions['tls']): grpc.ChannelCredentials {
  if (tls === undefined || tls === false) return grpc.credentials.createInsecure();
  if (tls === true) return grpc.credentials.createSsl();
  return grpc.credentials.createSsl(tls.rootCerts ?? null, tls.privateKey ?? null, tls.certChain ?? null);
}

export function channelOptions(o: ClientOptions, extra: grpc.ChannelOptions = {}): grpc.ChannelOptions {
  const out: grpc.ChannelOptions = { ...extra, ...o.channelOptions };
  if (typeof o.tls === 'object' && o.tls.serverName !== undefined) out['grpc.ssl_target_name_override'] = o.tls.serverName;
  return out;
}

export async function metadataFor(token: TokenSource): Promise<grpc.Metadata> {
  const t = await resolveToken(token);
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${t}`);
  return md;
}

/**
 * A client constructor whose request serializers also take ready-encoded Buffers, so hot paths
 * (device locations, pre-encoded batches) skip building message objects.
 */
export function clientFor(service: DescService): grpc.ServiceClientConstructor {
  const def = grpcDefinition(service) as Record<string, grpc.MethodDefinition<unknown, unknown>>;
  for (const name of Object.keys(def)) {
    const encode = def[name].requestSerialize;
    def[name] = { ...def[name], requestSerialize: (v: unknown) => (Buffer.isBuffer(v) ? v : encode(v)) };
  }
  return grpc.makeGenericClientConstructor(def as grpc.ServiceDefinition, service.typeName);
}

const constructors = new Map<string, grpc.ServiceClientConstructor>();

/**
 * What the publisher, ops and fleet clients share: one channel to one service, the caller's token
 * and a default deadline. Connects lazily, on the first call.
 */
export abstract class ServiceClient {
  protected readonly client: grpc.Client;
  protected readonly deadlineMs: number;
  /** Set by close(). */
  protected closed = false;

  constructor(
    service: DescService,
    address: string,
    protected readonly token: TokenSource,
    options: ClientOptions = {},
  ) {
    let ctor = constructors.get(service.typeName);
    if (ctor === undefined) {
      ctor = clientFor(service);
      constructors.set(service.typeName, ctor);
    }
    this.client = new ctor(checkAddress(address), credentials(options.tls), channelOptions(options));
    this.deadlineMs = options.deadlineMs ?? 30_000;
  }

  close(): void {
    this.closed = true;
    this.client.close();
  }
}

type UnaryMethod = (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: unknown) => void) => grpc.ClientUnaryCall;

/** One unary call as a promise; failures become AmbitError. */
export async function unary<Res>(client: grpc.Client, method: string, req: unknown, token: TokenSource, deadlineMs: number): Promise<Res> {
  const md = await metadataFor(token);
  const fn = (client as unknown as Record<string, UnaryMethod>)[method];
  return new Promise<Res>((resolve, reject) => {
    fn.call(client, req, md, { deadline: Date.now() + deadlineMs }, (err, res) => (err ? reject(AmbitError.from(err)) : resolve(res as Res)));
  });
}

/**
 * Writes `messages` to a client stream with backpressure, half-closes it and resolves with the
 * reply; stops writing as soon as the call fails.
 */
export async function clientStream<Res>(
  client: grpc.Client,
  method: string,
  token: TokenSource,
  messages: AsyncIterable<unknown> | Iterable<unknown>,
): Promise<Res> {
  const md = await metadataFor(token);
  type Start = (md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res?: unknown) => void) => grpc.ClientWritableStream<unknown>;
  let failure: AmbitError | null = null;
  let wake: (() => void) | null = null;
  const reply = new Promise<Res>((resolve, reject) => {
    const call = ((client as unknown as Record<string, Start>)[method]).call(client, md, (err, res) => {
      if (err) {
        failure = AmbitError.from(err);
        wake?.();
        reject(failure);
      } else resolve(res as Res);
    });
    void (async () => {
      try {
        for await (const m of messages) {
          if (failure !== null) return;
          if (!call.write(m)) {
            await new Promise<void>((resolve) => {
              wake = resolve;
              call.once('drain', resolve);
            });
            wake = null;
          }
        }
        if (failure === null) call.end();
      } catch (err) {
        call.cancel();
        reject(err);
      }
    })();
  });
  return reply;
}
