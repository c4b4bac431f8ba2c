/**
 * The gRPC edge: authenticates every call, validates every request (errors name the field and
 * change nothing), and turns calls into Hub operations. Each device stream is a DeviceSession
 * (device-session.ts); unary and client-streaming calls are handled here, and the web port's
 * Connect calls run the same handlers (connect-edge.ts). Tenants' ids and tags: tenancy.ts; rate
 * limits: rate-limits.ts.
 *
 * One file because it is the table of every call of the three services: each entry's scope,
 * checks, tenant and rate rules and work sit side by side, and the credentials, the drain and the
 * client-stream machinery they share are this class's state; split by service, each part would
 * reach back into the same state.
 */
import { type DensityMap, RecentEvents, densityMap } from './density.js';
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { type Limits, checkId, inRange, plainId } from '../../src/model/limits.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import { AuthError, type Principal, RevokedTokens, SCOPES, type Scope, type TokenAuthority, bearer, requireScope } from './auth.js';
import {
  ApiError,
  type StatusInfo,
  fromSubscription,
  position,
  statusOf,
  TENANT_TAG,
  toEvent,
  toServiceError,
} from './convert.js';
import { ValidationError } from '../../src/model/errors.js';
import {
  type ConnectRequest,
  type ConnectResponse,
  ListSubscriptionsResponseSchema,
  type UpdateLocationRequest,
  UpdateLocationResponseSchema,
  type UpdateLocationsRequest,
  UpdateLocationsResponseSchema,
  DeviceService,
} from '../../api/gen/ambit/v1/device_pb.js';
import { OpsService, GetDeviceSubscriptionsResponseSchema, type GetDeviceSubscriptionsRequest, GetStatsResponseSchema, type MoveCellsRequest, MoveCellsResponseSchema, type PlanCellsRequest, PlanCellsResponseSchema, DrainGatewayResponseSchema, type DeleteSubscriptionRequest, DeleteSubscriptionResponseSchema, type ListDevicesRequest, ListDevicesResponseSchema, type PurgeDeviceRequest, PurgeDeviceResponseSchema, type RevokeTokensRequest, RevokeTokensResponseSchema } from '../../api/gen/ambit/v1/ops_pb.js';
import { type BulkPublishRequest, BulkPublishResponseSchema, type PublishRequest, PublishResponseSchema, PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { type DeviceSubscription, type Hub, MAX_DEVICE_PAGE, type PublishResult, type Revocation } from '../hub/port.js';
import { DeviceSession, type SessionHost } from './device-session.js';
import { encodedEvent, keepPublishedBytes } from './notification-frame.js';
import { type DeviceStream, GrpcJsDeviceStream } from './device-stream.js';
import { H2DeviceStream, type H2StreamOptions, takeOverStreams } from './h2-device-stream.js';
import type { WebSocket } from 'ws';
import { WsDeviceStream } from './ws-device-stream.js';
import { type PeerIdentity, peerOfCall, peerOfSocket } from './peer.js';
import { NO_RATE_LIMITS, RateLimitedError, RateLimiter, type RateLimits } from './rate-limits.js';
import { Tenancy } from './tenancy.js';
import type { Logger } from 'pino';
import { type Counters, type EdgeMetrics, TenantCounters } from './counters.js';
import { ExpiryClock } from './expiry.js';
import { type SeenOptions, SeenTracker } from './seen.js';
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { grpcServerDefinition, isMalformed, requestDecoder } from '../../api/rpc.js';
import { LOCATION, fastBulkPublishRequest, fastConnectRequest, fastLocation, fastPublishRequest, fastUpdateLocationsRequest, publishedEvents } from '../../api/fast-decode.js';

export interface GatewayOptions {
  /** Notifications pulled from the hub per read. */
  sendBatch: number;
  /** Events in one BulkPublish message. */
  maxEventsPerMessage: number;
  /** Updates in one UpdateLocations message. */
  maxUpdatesPerMessage: number;
  /**
   * Who carries device streams: 'http2', the gateway itself on the HTTP/2 stream
   * (h2-device-stream.ts, once `takeOverDeviceStreams` ran on the bound server), or 'grpc-js'.
   */
  deviceStreams: 'http2' | 'grpc-js';
  /** With grpc-js carrying device streams: notifications written to the HTTP/2 stream under the call, a batch per write (raw-stream.ts); false: each through grpc-js. */
  rawWrites: boolean;
  /** The largest request message, in bytes (the server's grpc.max_receive_message_length). */
  maxReceiveBytes: number;
  /**
   * What DrainGateway does besides ending the device streams (the process turns unready); null:
   * this process cannot be drained alone (a gateway of a node of several), answered FAILED_PRECONDITION.
   */
  onDrain: (() => void) | null;
  /** When devices were last seen is written to the hub on these periods (null: not recorded). */
  seen: SeenOptions | null;
  /** Clock (ms since the epoch): token expiry and when devices were seen. */
  now: () => number;
  /** How long a revocation by token id or subject is kept unless the call says (days). */
  revocationKeepDays: number;
  /**
   * Mutual TLS: the scopes a verified client certificate grants a call that carries no token (its
   * subject the certificate's CN); null: a certificate alone authorizes nothing.
   */
  certScopes: ReadonlySet<string> | null;
  /** Rate limits (rate-limits.ts): a device's locations and subscription changes, a publisher's events. */
  rateLimits: RateLimits;
  /** Tenants' own limits (AMBIT_TENANT_LIMITS; '' the default tenant), over `rateLimits`. */
  tenantLimits: Readonly<Record<string, Partial<RateLimits>>>;
  /**
   * Tenants (the token authority reads the tenant claim): every event and filter of a tenant gets
   * the reserved tag `tenant:<name>` (the default tenant's `tenant:`), its events' ids `<name>/`
   * before them, so one tenant's events reach only its own devices; tenant operators see their
   * tenant's devices only.
   */
  tenants: boolean;
}

export const DEFAULT_GATEWAY_OPTIONS: Readonly<GatewayOptions> = Object.freeze({
  sendBatch: 64,
  maxEventsPerMessage: 1000,
  maxUpdatesPerMessage: 10_000,
  deviceStreams: 'http2',
  rawWrites: true,
  maxReceiveBytes: 4 * 1024 * 1024,
  onDrain: () => {},
  seen: null,
  now: Date.now,
  revocationKeepDays: 30,
  certScopes: null,
  rateLimits: NO_RATE_LIMITS,
  tenantLimits: {},
  tenants: false,
});

const CONNECT_PATH = `/${DeviceService.typeName}/${DeviceService.method.connect.name}`;

type Handler = grpc.UntypedHandleCall;

/** A unary call's scope and work, kept on its grpc-js handler so the web port serves the same (connect-edge.ts). */
export const UNARY = Symbol('ambit.unary');
export interface UnaryImpl {
  scope: Scope;
  run(req: unknown, p: Principal, call: grpc.ServerUnaryCall<unknown, unknown>): Promise<unknown>;
}

export class Gateway implements SessionHost {
  readonly sessions = new Map<string, DeviceSession>();
  readonly counters: Counters;
  readonly sendBatch: number;
  readonly now: () => number;
  readonly expiry = new ExpiryClock(() => this.now());
  /** Notes the devices heard from and writes when they were seen (Hub.markSeen); null: off. */
  readonly seen: SeenTracker | null;
  private readonly revoked: RevokedTokens;
  private readonly opts: GatewayOptions;
  private readonly startedAt = Date.now();
  private draining = false;
  /** Where the events accepted here lately were (the dashboard's map). */
  readonly recentEvents = new RecentEvents();
  private drainMessage = 'server is shutting down; reconnect';

  constructor(
    readonly hub: Hub,
    private readonly authority: TokenAuthority,
    readonly limits: Limits,
    private readonly metrics: EdgeMetrics,
    readonly log: Logger,
    options: Partial<GatewayOptions> = {},
  ) {
    this.opts = { ...DEFAULT_GATEWAY_OPTIONS, ...options };
    this.now = this.opts.now;
    this.seen = this.opts.seen === null ? null : new SeenTracker(hub, () => this.sessions.keys(), this.now, this.opts.seen, log);
    this.seen?.start();
    this.counters = metrics.counters;
    // Every token this gateway verifies is checked against the deployment's revocations, and the
    // streams of tokens revoked later end (on whichever gateway revoked them).
    this.revoked = authority.revoked ??= new RevokedTokens();
    hub.watchRevocations((all) => {
      this.revoked.set(all);
      this.endRevoked();
    });
    this.sendBatch = this.opts.sendBatch;
    // Publishers' buckets are shared through the hub where gateways share one (Redis).
    this.tenancy = new Tenancy(this.opts.tenants, limits);
    if (this.opts.tenants) this.counters.tenants ??= new TenantCounters();
    this.limiter = this.newLimiter(this.opts.rateLimits);
    this.h2 = { maxReceiveBytes: this.opts.maxReceiveBytes, decode: requestDecoder(DeviceService.method.connect, fastConnectRequest), readLocation: fastLocation, location: LOCATION };
  }

  private readonly h2: H2StreamOptions;
  /** The limits of principals without limits of their own (their tenant's). */
  private readonly limiter: RateLimiter;
  /** Each tenant's limiter, when AMBIT_TENANT_LIMITS sets its own (made on first use). */
  private readonly tenantLimiters = new Map<string, RateLimiter>();

  private newLimiter(limits: RateLimits): RateLimiter {
    const hub = this.hub;
    return new RateLimiter(limits, this.now, hub.takeQuota === undefined ? null : (key, n, perS, capacity) => hub.takeQuota!(key, n, perS, capacity), this.counters.rateLimited);
  }

  /** The rate limits of a principal: its tenant's own where AMBIT_TENANT_LIMITS sets them, else the deployment's. */
  limiterOf(p: Principal): RateLimiter {
    const tenant = this.opts.tenants ? (p.tenant ?? '') : '';
    const own = this.opts.tenantLimits[tenant];
    if (own === undefined || !Object.hasOwn(this.opts.tenantLimits, tenant)) return this.limiter;
    let l = this.tenantLimiters.get(tenant);
    if (l === undefined) {
      l = this.newLimiter({ ...this.opts.rateLimits, ...own });
      this.tenantLimiters.set(tenant, l);
    }
    return l;
  }
  private readonly tenancy: Tenancy;

  /** Implementations keyed by the services' method local names. */
  handlers(): { device: Record<string, Handler>; publisher: Record<string, Handler>; ops: Record<string, Handler> } {
    return {
      device: {
        connect: (call: grpc.ServerDuplexStream<ConnectRequest, ConnectResponse>) => this.connect(call),
        updateLocation: this.unary<UpdateLocationRequest>(SCOPES.device, async (req, p) => {
          const { lat, lon } = position('location', req.location);
          const device = this.deviceOf(p);
          const limiter = this.limiterOf(p);
          const wait = limiter.location(device);
          if (wait > 0) throw limiter.locationError(wait);
          this.seen?.note(device);
          await this.hub.updateLocations([{ device, lat, lon }]);
          this.counters.locationUpdatesUnary++;
          if (this.counters.tenants !== null) this.counters.tenants.of(p.tenant ?? '').locationUpdates++;
          return create(UpdateLocationResponseSchema);
        }),
        updateLocations: (call: grpc.ServerReadableStream<UpdateLocationsRequest, unknown>, cb: grpc.sendUnaryData<unknown>) => this.updateLocations(call, cb),
        listSubscriptions: this.unary(SCOPES.device, async (_req, p) => {
          const device = this.deviceOf(p);
          this.seen?.note(device);
          const subs = await this.hub.listSubscriptions(device);
          return create(ListSubscriptionsResponseSchema, { subscriptions: subs.map(fromSubscription) });
        }),
      },
      publisher: {
        publish: this.unary<PublishRequest>(SCOPES.publish, async (req, p, call) => {
          const event = this.tenancy.event(toEvent('event', req.event, this.limits, randomUUID), p, 'event');
          // Where the hub sends events on (below), their bytes as they came serve as the encoding.
          if (this.hub.forwardsEvents) keepPublishedBytes(event, req.event!, publishedEvents(req), 0);
          await this.limiterOf(p).publish(p.subject, 1);
          if (call.cancelled) throw new ApiError(grpc.status.CANCELLED, 'call ended before the event was published');
          if (this.hub.forwardsEvents) encodedEvent(event);
          const t0 = performance.now();
          const [r] = await this.hub.publish([event]);
          this.metrics.publishSeconds.observe((performance.now() - t0) / 1000);
          this.counters.eventsPublished++;
          if (this.counters.tenants !== null) this.counters.tenants.of(p.tenant ?? '').eventsPublished++;
          this.recentEvents.record(event.lat, event.lon, Date.now());
          if (r.duplicate !== true) this.counters.subscriptionsReached += r.reached;
          return create(PublishResponseSchema, { eventId: this.tenancy.local(p, r.eventId), reached: BigInt(r.reached), duplicate: r.duplicate === true });
        }),
        bulkPublish: (call: grpc.ServerReadableStream<BulkPublishRequest, unknown>, cb: grpc.sendUnaryData<unknown>) => this.bulkPublish(call, cb),
      },
      ops: {
        getStats: this.unary(SCOPES.ops, async (_req, p) => {
          if (this.tenancy.prefix(p) !== '') return this.tenantStats(p);
          const s = await this.hub.stats();
          return create(GetStatsResponseSchema, {
            engine: s.engine,
            engineDetail: s.engineDetail,
            mode: s.mode,
            subscriptions: BigInt(s.subscriptions),
            filters: BigInt(s.filters),
            devices: BigInt(s.devices),
            connectedDevices: BigInt(this.sessions.size),
            eventsPublished: BigInt(s.eventsPublished),
            notifications: BigInt(s.notifications),
            locationUpdates: BigInt(s.locationUpdates),
            notificationsDropped: BigInt(s.notificationsDropped),
            engineMemoryBytes: BigInt(Math.max(0, Math.round(s.engineMemoryBytes))),
            uptimeSeconds: BigInt(Math.floor((Date.now() - this.startedAt) / 1000)),
            shardMapVersion: BigInt(typeof s.extra.shardMapVersion === 'number' ? s.extra.shardMapVersion : 0),
            shardMapMoving: s.extra.shardMapMoving === true,
          });
        }),
        drainGateway: this.unary(SCOPES.ops, async (_req, p) => {
          this.tenancy.deploymentOps(p, 'DrainGateway');
          const onDrain = this.opts.onDrain;
          if (onDrain === null) throw new ApiError(grpc.status.FAILED_PRECONDITION, 'this gateway is one of a node of several gateway processes (AMBIT_GATEWAYS): stop the node (SIGTERM) to drain it', '');
          this.log.warn('draining on request (DrainGateway): device streams end and new ones are refused; other calls are still served');
          onDrain();
          const ended = this.drain('this gateway is draining; reconnect');
          return create(DrainGatewayResponseSchema, { streamsEnded: BigInt(ended) });
        }),
        moveCells: this.unary<MoveCellsRequest>(SCOPES.ops, async (req, p) => {
          this.tenancy.deploymentOps(p, 'MoveCells');
          if (this.hub.moveCells === undefined) throw new ApiError(grpc.status.FAILED_PRECONDITION, 'the deployment is not sharded by space (AMBIT_GEO_SHARDS)', 'moves');
          const r = await this.hub.moveCells(req.moves.map((m) => ({ row: m.row, col: m.col, shard: m.shard })));
          return create(MoveCellsResponseSchema, { shardMapVersion: BigInt(r.version), devicesMoved: BigInt(r.devicesMoved) });
        }),
        planCells: this.unary<PlanCellsRequest>(SCOPES.ops, async (req, p) => {
          this.tenancy.deploymentOps(p, 'PlanCells');
          if (this.hub.planCells === undefined) throw new ApiError(grpc.status.FAILED_PRECONDITION, 'the deployment is not sharded by space (AMBIT_GEO_SHARDS)', 'max_moves');
          const r = await this.hub.planCells(req.maxMoves);
          return create(PlanCellsResponseSchema, { moves: r.moves, devicesBefore: r.before.map(BigInt), devicesAfter: r.after.map(BigInt) });
        }),
        deleteSubscription: this.unary<DeleteSubscriptionRequest>(SCOPES.ops, async (req, p) => {
          const device = this.tenancy.device(p, req.deviceId);
          const id = checkId('subscription_id', req.subscriptionId, this.limits);
          await this.hub.removeSubscription(device, id);
          return create(DeleteSubscriptionResponseSchema, {});
        }),
        listDevices: this.unary<ListDevicesRequest>(SCOPES.ops, async (req, p) => {
          const limit = req.pageSize === 0 ? 100 : req.pageSize;
          if (limit > MAX_DEVICE_PAGE) throw new ApiError(grpc.status.INVALID_ARGUMENT, `must be at most ${MAX_DEVICE_PAGE}, got ${req.pageSize}`, 'page_size');
          if (req.pageToken.length > 1024) throw new ApiError(grpc.status.INVALID_ARGUMENT, 'is not a page token this listing gave', 'page_token');
          if (Buffer.byteLength(req.idPrefix) > this.limits.maxIdBytes) throw new ApiError(grpc.status.INVALID_ARGUMENT, `must be at most ${this.limits.maxIdBytes} bytes`, 'id_prefix');
          // A tenant's operators list their tenant's devices, by the ids its tokens give them.
          const own = this.tenancy.prefix(p);
          const page = await this.hub.listDevices({ prefix: own + req.idPrefix, after: req.pageToken === '' ? '' : own + req.pageToken, limit });
          return create(ListDevicesResponseSchema, {
            devices: page.devices.map((d) => ({ deviceId: d.device.slice(own.length), subscriptions: d.subscriptions, location: d.location ?? undefined, lastSeenMs: BigInt(Math.max(0, Math.round(d.lastSeenMs))) })),
            nextPageToken: page.next === '' ? '' : page.next.slice(own.length),
          });
        }),
        purgeDevice: this.unary<PurgeDeviceRequest>(SCOPES.ops, async (req, p) => {
          const device = this.tenancy.device(p, req.deviceId);
          const r = await this.hub.purgeDevice(device);
          this.log.info({ device, ...r }, 'device purged on request (PurgeDevice)');
          return create(PurgeDeviceResponseSchema, { subscriptionsRemoved: BigInt(r.subscriptions), notificationsRemoved: BigInt(r.notifications), hadLocation: r.location });
        }),
        revokeTokens: this.unary<RevokeTokensRequest>(SCOPES.ops, async (req, op) => {
          // A tenant's operators revoke their tenant's subjects (a token id could be anyone's).
          if (this.tenancy.prefix(op) !== '' && req.subject === '') throw new AuthError('PERMISSION_DENIED', "a tenant's operators revoke by subject (subject), not by token or token id");
          const given = [req.tokenId !== '', req.subject !== '', req.token !== ''].filter(Boolean).length;
          if (given !== 1) throw new ApiError(grpc.status.INVALID_ARGUMENT, `give exactly one of token_id, subject and token, got ${given}`, req.tokenId !== '' ? 'subject' : 'token_id');
          if (req.keepDays > 3650) throw new ApiError(grpc.status.INVALID_ARGUMENT, `must be at most 3650, got ${req.keepDays}`, 'keep_days');
          const nowS = this.now() / 1000;
          const untilS = Math.ceil(nowS + (req.keepDays === 0 ? this.opts.revocationKeepDays : req.keepDays) * 86_400);
          let r: Revocation;
          if (req.token !== '') {
            if (req.keepDays !== 0) throw new ApiError(grpc.status.INVALID_ARGUMENT, 'a token given whole is revoked until it expires; leave keep_days out', 'keep_days');
            let p: Principal;
            try {
              p = this.authority.verify(req.token, false);
            } catch (err) {
              throw new ApiError(grpc.status.INVALID_ARGUMENT, err instanceof Error ? err.message : String(err), 'token');
            }
            if (p.tokenId === '') throw new ApiError(grpc.status.INVALID_ARGUMENT, 'has no id (minted by an earlier version): revoke its subject instead', 'token');
            r = { tokenId: p.tokenId, untilS: p.expiresAt };
          } else if (req.tokenId !== '') {
            if (req.tokenId.length > 128 || !/^[A-Za-z0-9_-]+$/.test(req.tokenId)) throw new ApiError(grpc.status.INVALID_ARGUMENT, 'is not a token id (base64url, at most 128 characters)', 'token_id');
            r = { tokenId: req.tokenId, untilS };
          } else {
            if (Buffer.byteLength(req.subject) > 128) throw new ApiError(grpc.status.INVALID_ARGUMENT, 'must be at most 128 bytes', 'subject');
            r = { subject: this.tenancy.prefix(op) + req.subject, issuedUpToS: Math.floor(nowS), untilS };
          }
          await this.hub.revokeTokens([r]);
          this.revoked.add(r);
          const ended = this.endRevoked();
          this.log.warn({ revocation: r, streamsEnded: ended }, 'tokens revoked on request (RevokeTokens)');
          return create(RevokeTokensResponseSchema, { streamsEnded: BigInt(ended), keptUntilUnixS: BigInt(r.untilS) });
        }),
        getDeviceSubscriptions: this.unary<GetDeviceSubscriptionsRequest>(SCOPES.ops, async (req, p) => {
          const device = this.tenancy.device(p, req.deviceId);
          const info = await this.hub.deviceInfo(device);
          return create(GetDeviceSubscriptionsResponseSchema, {
            subscriptions: info.subscriptions.map(fromSubscription),
            location: info.location ?? undefined,
            connected: this.sessions.has(device),
          });
        }),
      },
    };
  }

  /** Adds the device, publisher and ops services to a gRPC server. */
  addTo(server: grpc.Server): void {
    const h = this.handlers();
    // Locations and acks (most of what device streams carry) and UpdateLocations batches skip the
    // generic decoder.
    server.addService(grpcServerDefinition(DeviceService, { connect: fastConnectRequest, updateLocations: fastUpdateLocationsRequest }), h.device);
    server.addService(grpcServerDefinition(PublisherService, { publish: fastPublishRequest, bulkPublish: fastBulkPublishRequest }), h.publisher);
    server.addService(grpcServerDefinition(OpsService), h.ops);
  }

  /**
   * With deviceStreams 'http2', device streams on the bound `server` are served by the gateway
   * itself from now on; false when they stay with grpc-js (by option, or grpc-js's servers were not
   * found: see takeOverStreams).
   */
  takeOverDeviceStreams(server: grpc.Server): boolean {
    // The stream router goes in either way: it refuses repeated credentials on every path.
    const own = this.opts.deviceStreams === 'http2';
    const routes = new Map(own ? [[CONNECT_PATH, (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => this.connectH2(stream, headers)]] : []);
    return takeOverStreams(server, routes) && own;
  }

  get connectedDevices(): number {
    return this.sessions.size;
  }

  /** Ends every device stream with UNAVAILABLE so clients reconnect elsewhere; new ones are refused. */
  /** The dashboard's map: devices connected here at their last position, and events of the last `windowMs`. */
  density(windowMs = 300_000): DensityMap {
    const self = this;
    function* devices(): Generator<[number, number]> {
      for (const s of self.sessions.values()) if (s.lastLat === s.lastLat) yield [s.lastLat, s.lastLon];
    }
    return densityMap(devices(), this.recentEvents.since(Date.now() - windowMs), windowMs);
  }

  /** Ends the device streams whose token is revoked (UNAUTHENTICATED); how many. */
  private endRevoked(): number {
    if (this.revoked.size === 0) return 0;
    const nowS = this.now() / 1000;
    const status: StatusInfo = { code: grpc.status.UNAUTHENTICATED, message: 'token was revoked', field: '', expected: true };
    let n = 0;
    for (const s of [...this.sessions.values()]) {
      if (!this.revoked.revoked(s.principal, nowS)) continue;
      s.close(status);
      n++;
    }
    return n;
  }

  /** Ends every device stream with UNAVAILABLE and refuses new ones; returns how many ended. */
  drain(message = 'server is shutting down; reconnect'): number {
    this.draining = true;
    this.drainMessage = message;
    const status: StatusInfo = { code: grpc.status.UNAVAILABLE, message, field: '', expected: true };
    const open = [...this.sessions.values()];
    for (const s of open) s.close(status);
    return open.length;
  }

  // ---- plumbing ----

  private authenticate(call: { metadata: grpc.Metadata; getAuthContext?: () => { sslPeerCertificate?: unknown } | null }, scope: Scope): Principal {
    return this.authorize(call.metadata.get('authorization'), scope, this.opts.certScopes === null ? null : peerOfCall(call));
  }

  /**
   * The caller: its token, or (no token, mutual TLS with AMBIT_TLS_CLIENT_SCOPES) its verified
   * client certificate: subject the CN, the configured scopes, until the certificate expires;
   * revocations by subject apply to it as to tokens.
   */
  private authorize(values: readonly grpc.MetadataValue[], scope: Scope, peer: PeerIdentity | null): Principal {
    if (values.length > 1) throw new AuthError('UNAUTHENTICATED', 'more than one authorization metadata value');
    const certScopes = this.opts.certScopes;
    if (values.length === 0 && peer !== null && certScopes !== null) {
      // A certificate names no tenant: its CN is a subject of the default tenant.
      if (this.opts.tenants && peer.subject.includes('/')) throw new AuthError('UNAUTHENTICATED', `client certificate CN ${JSON.stringify(peer.subject)} holds '/', which a deployment with tenants keeps for tenants' ids`);
      const principal: Principal = { subject: peer.subject, scopes: certScopes, expiresAt: peer.expiresAt, issuedAt: 0, tokenId: '', tenant: '' };
      const nowS = Math.floor(this.now() / 1000);
      if (peer.expiresAt <= nowS) throw new AuthError('UNAUTHENTICATED', 'client certificate has expired');
      if (this.revoked.revoked(principal, nowS)) throw new AuthError('UNAUTHENTICATED', `client certificate subject ${JSON.stringify(peer.subject)} was revoked`);
      requireScope(principal, scope);
      return principal;
    }
    const principal = this.authority.verify(bearer(values[0]));
    requireScope(principal, scope);
    return principal;
  }

  // ---- tenants (tenancy.ts) ----

  /**
   * GetStats for a tenant's operators: the tenant's devices and their subscriptions (listed from
   * the hub), its devices connected here, and what its publishers and devices did through this
   * gateway process (the metrics' tenant label adds that up over the processes). Nothing about
   * the deployment (engine, memory, other tenants).
   */
  private async tenantStats(p: Principal): Promise<unknown> {
    const own = this.tenancy.prefix(p);
    let devices = 0;
    let subscriptions = 0;
    let after = '';
    for (let pages = 0; pages < 10_000; pages++) {
      const page = await this.hub.listDevices({ prefix: own, after, limit: MAX_DEVICE_PAGE });
      devices += page.devices.length;
      for (const d of page.devices) subscriptions += d.subscriptions;
      if (page.next === '') break;
      after = page.next;
    }
    let connected = 0;
    for (const d of this.sessions.keys()) if (d.startsWith(own)) connected++;
    const c = this.counters.tenants?.byTenant.get(p.tenant ?? '');
    return create(GetStatsResponseSchema, {
      mode: 'tenant',
      subscriptions: BigInt(subscriptions),
      devices: BigInt(devices),
      connectedDevices: BigInt(connected),
      eventsPublished: BigInt(c?.eventsPublished ?? 0),
      notifications: BigInt(c?.notificationsSent ?? 0),
      locationUpdates: BigInt(c?.locationUpdates ?? 0),
      uptimeSeconds: BigInt(Math.floor((Date.now() - this.startedAt) / 1000)),
    });
  }

  /** A device's subscription in its tenant (SessionHost): the tenant's tag on its filters. */
  tenantSubscription(sub: DeviceSubscription, p: Principal, field: string): DeviceSubscription {
    return this.tenancy.subscription(sub, p, field);
  }

  private deviceOf(p: Principal): string {
    return checkId('token.sub', p.subject, this.limits);
  }

  reject(err: unknown, what: string): StatusInfo {
    const s = statusOf(err);
    if (s.expected) this.counters.rejectedRequests++;
    else this.log.error({ err, call: what }, 'request failed');
    return s;
  }

  /**
   * A unary call of the web port (Connect or gRPC-Web, connect-edge.ts): the same checks and work
   * as over gRPC. `authorization`: every value of the header; `path` names the call in the log;
   * `socket`: the request's (its verified client certificate stands in for a token as on gRPC).
   * Resolves with the response, or rejects with the StatusInfo to answer.
   */
  async runUnary(u: UnaryImpl, request: unknown, authorization: readonly string[], path: string, cancelled: () => boolean, socket: unknown = null): Promise<unknown> {
    try {
      const p = this.authorize(authorization, u.scope, this.opts.certScopes === null ? null : peerOfSocket(socket));
      return await u.run(request, p, { get cancelled() { return cancelled(); }, getPath: () => path } as unknown as grpc.ServerUnaryCall<unknown, unknown>);
    } catch (err) {
      throw this.reject(err, path);
    }
  }

  private unary<Req>(scope: Scope, run: (req: Req, p: Principal, call: grpc.ServerUnaryCall<Req, unknown>) => Promise<unknown>): Handler {
    const handler = (call: grpc.ServerUnaryCall<Req, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      let p: Principal;
      try {
        p = this.authenticate(call, scope);
        if (isMalformed(call.request)) throw new ApiError(grpc.status.INVALID_ARGUMENT, call.request.reason, 'request');
        // grpc-js runs the handler before its own deadline timer fires, so a call whose deadline
        // had passed on arrival would still take effect after the caller was told it failed.
        if (deadlineMs(call.getDeadline()) <= Date.now()) throw new ApiError(grpc.status.DEADLINE_EXCEEDED, 'the call\'s deadline passed before it was handled');
      } catch (err) {
        cb(toServiceError(this.reject(err, call.getPath())));
        return;
      }
      run(call.request, p, call).then(
        (res) => cb(null, res),
        (err: unknown) => cb(toServiceError(this.reject(err, call.getPath()))),
      );
    };
    return Object.assign(handler, { [UNARY]: { scope, run } as UnaryImpl });
  }

  /**
   * A client-streaming call: each message is checked whole (`check` throws naming the field)
   * before any of it is applied. Messages that arrive while an apply runs are applied together,
   * in order, by the next one (`apply` gets them all), so a stream of small messages is not held
   * to one round trip each; reading pauses while 10 000 items (events, updates) wait. The reply (`done`)
   * goes once the client has half-closed and everything is applied. The first failure answers the
   * call; nothing after it is applied.
   */
  private clientStream<Req, Work extends readonly unknown[]>(
    call: grpc.ServerReadableStream<Req, unknown>,
    cb: grpc.sendUnaryData<unknown>,
    name: string,
    scope: Scope,
    check: (req: Req, p: Principal) => Work,
    apply: (works: Work[]) => Promise<void>,
    done: () => unknown,
    /** What a failure reports as applied before it: the items (updates, events) applied so far, and their name. */
    applied: () => number,
    items: string,
  ): void {
    let p: Principal;
    try {
      p = this.authenticate(call, scope);
    } catch (err) {
      cb(toServiceError(this.reject(err, name)));
      call.destroy();
      return;
    }
    const maxQueuedItems = 10_000;
    const queued: Work[] = [];
    let queuedItems = 0;
    let failed = false;
    let ended = false;
    let running = false;
    let paused = false;
    /** A message that failed its check: the ones before it still apply, then the call fails. */
    let refused: unknown = null;
    /** Messages received, and the index of the refused one. */
    let received = 0;
    let refusedAt = -1;
    // The status says which message was refused (if one was) and how much was applied before.
    const fail = (err: unknown, message?: number) => {
      if (failed) return;
      failed = true;
      const s = this.reject(err, name);
      const n = applied();
      s.stream = message === undefined ? { applied: n } : { message, applied: n };
      s.message += message === undefined ? ` (${n} ${items} of this stream applied before the failure)` : ` (message ${message} of this stream, refused whole; the ${n} ${items} before it applied)`;
      cb(toServiceError(s));
    };
    const pump = async () => {
      if (running) return;
      running = true;
      while (queued.length > 0 && !failed) {
        if (call.cancelled || deadlineMs(call.getDeadline()) <= Date.now()) {
          failed = true;
          queued.length = 0;
          break;
        }
        const works = queued.splice(0);
        queuedItems = 0;
        if (paused) {
          paused = false;
          call.resume();
        }
        try {
          await apply(works);
        } catch (err) {
          // A failure that names its message (a rate limit refusing one of several applied together).
          const at = (err as { streamMessage?: unknown }).streamMessage;
          fail(err, typeof at === 'number' ? at : undefined);
        }
      }
      running = false;
      if (refused !== null) fail(refused, refusedAt);
      else if (ended && !failed) cb(null, done());
    };
    call.on('data', (req: Req) => {
      if (failed || refused !== null) return;
      const index = received++;
      try {
        if (isMalformed(req)) throw new ApiError(grpc.status.INVALID_ARGUMENT, req.reason, 'request');
        const work = check(req, p);
        queued.push(work);
        queuedItems += work.length;
      } catch (err) {
        if (!running) return fail(err, index);
        refused = err; // answered once the messages queued before it are applied
        refusedAt = index;
        call.pause();
        return;
      }
      if (queuedItems >= maxQueuedItems && !paused) {
        paused = true;
        call.pause();
      }
      void pump();
    });
    call.on('end', () => {
      ended = true;
      if (!running && !failed && refused === null) cb(null, done());
    });
    // Cancelled or past its deadline: the caller was told it failed, so nothing queued applies.
    const abandon = () => {
      failed = true;
      queued.length = 0;
    };
    call.on('cancelled', abandon);
    call.on('error', abandon);
  }

  private updateLocations(call: grpc.ServerReadableStream<UpdateLocationsRequest, unknown>, cb: grpc.sendUnaryData<unknown>): void {
    let accepted = 0;
    this.clientStream(
      call,
      cb,
      'UpdateLocations',
      SCOPES.device,
      (req, p): PositionUpdate[] => {
        if (req.updates.length > this.opts.maxUpdatesPerMessage) {
          throw new ApiError(grpc.status.RESOURCE_EXHAUSTED, `at most ${this.opts.maxUpdatesPerMessage} updates per message, got ${req.updates.length}`, 'updates');
        }
        const any = p.scopes.has(SCOPES.locationAny);
        const own = this.deviceOf(p);
        const updates = req.updates;
        const out = new Array<PositionUpdate>(updates.length);
        // With tenants, the devices a fleet names are its tenant's.
        const tenant = this.tenancy.prefix(p);
        // The common case (a plain id, a position in range) names no field and makes one object.
        for (let i = 0; i < updates.length; i++) {
          const u = updates[i];
          const id = u.deviceId;
          let device = id === '' ? own : plainId(id, this.limits) ? id : checkId(`updates[${i}].device_id`, id, this.limits);
          if (this.opts.tenants && id !== '') device = tenant === '' ? this.tenancy.free(`updates[${i}].device_id`, device) : checkId(`updates[${i}].device_id`, tenant + device, this.limits);
          if (device !== own && !any) {
            throw new ApiError(grpc.status.PERMISSION_DENIED, `token may only update its own device (needs the ${SCOPES.locationAny} scope)`, `updates[${i}].device_id`);
          }
          const at = u.location;
          out[i] = at !== undefined && inRange(at.lat, at.lon) ? { device, lat: at.lat, lon: at.lon } : { device, ...position(`updates[${i}].location`, at) };
        }
        // A device's own updates draw on its location rate (a fleet's, with location:any, do not).
        if (!any && out.length > 0) {
          const limiter = this.limiterOf(p);
          const wait = limiter.location(own, out.length);
          if (wait > 0) throw limiter.locationError(wait);
        }
        return out;
      },
      async (batches) => {
        const all = batches.length === 1 ? batches[0] : batches.flat();
        await this.hub.updateLocations(all);
        const seen = this.seen;
        if (seen !== null) for (let i = 0; i < all.length; i++) seen.note(all[i].device);
        accepted += all.length;
        this.counters.locationUpdatesUnary += all.length;
      },
      () => create(UpdateLocationsResponseSchema, { accepted: BigInt(accepted) }),
      () => accepted,
      'updates',
    );
  }

  private bulkPublish(call: grpc.ServerReadableStream<BulkPublishRequest, unknown>, cb: grpc.sendUnaryData<unknown>): void {
    let accepted = 0;
    let reached = 0;
    let duplicates = 0;
    let subject = '';
    let tenant = '';
    let limiter = this.limiter;
    /** Messages of this stream applied (their index, for a rate limit that refuses one). */
    let messagesApplied = 0;
    this.clientStream(
      call,
      cb,
      'BulkPublish',
      SCOPES.publish,
      (req, p) => {
        subject = p.subject;
        tenant = p.tenant ?? '';
        limiter = this.limiterOf(p);
        if (req.events.length > this.opts.maxEventsPerMessage) {
          throw new ApiError(grpc.status.RESOURCE_EXHAUSTED, `at most ${this.opts.maxEventsPerMessage} events per message, got ${req.events.length}`, 'events');
        }
        // Where the hub sends events on (publishMessages encodes them), their bytes as they came serve as the encoding.
        const sent = this.hub.forwardsEvents ? publishedEvents(req) : undefined;
        return req.events.map((e, i) => keepPublishedBytes(this.tenancy.event(toEvent(`events[${i}]`, e, this.limits, randomUUID), p, `events[${i}]`), e, sent, i));
      },
      async (all) => {
        // The publisher's rate, message by message: the ones it admits are published, then the
        // call fails naming the first it refused.
        let messages = all;
        let limited: RateLimitedError | null = null;
        if (limiter.limits.eventsPerS > 0) {
          for (let k = 0; k < all.length; k++) {
            try {
              await limiter.publish(subject, all[k].length);
            } catch (err) {
              if (!(err instanceof RateLimitedError)) throw err;
              limited = Object.assign(err, { streamMessage: messagesApplied + k });
              messages = all.slice(0, k);
              break;
            }
          }
        }
        messagesApplied += messages.length;
        if (messages.length > 0) await this.publishMessages(messages, (rs) => {
          accepted += rs.length;
          if (this.counters.tenants !== null) this.counters.tenants.of(tenant).eventsPublished += rs.length;
          for (const r of rs) {
            reached += r.reached;
            if (r.duplicate === true) duplicates++;
          }
        });
        if (limited !== null) throw limited;
      },
      () => create(BulkPublishResponseSchema, { accepted: BigInt(accepted), reached: BigInt(reached), duplicates: BigInt(duplicates) }),
      () => accepted,
      'events',
    );
  }

  /** Publishes a BulkPublish call's messages (as one batch) and counts them; `took` sees the results. */
  private async publishMessages(messages: readonly Event[][], took: (rs: readonly PublishResult[]) => void): Promise<void> {
    const events = messages.length === 1 ? messages[0] : messages.flat();
    // Encoded for the API once here, not by every gateway process that delivers them.
    if (this.hub.forwardsEvents) for (let i = 0; i < events.length; i++) encodedEvent(events[i]);
    const t0 = performance.now();
    const rs = await this.hub.publish(events);
    this.metrics.publishSeconds.observe((performance.now() - t0) / 1000);
    took(rs);
    let fresh = 0;
    for (const r of rs) if (r.duplicate !== true) fresh += r.reached;
    // Counted per message with the events, so a call that fails later still counts its matches.
    this.counters.eventsPublished += rs.length;
    this.counters.subscriptionsReached += fresh;
    const now = Date.now();
    for (let i = 0; i < events.length; i++) this.recentEvents.record(events[i].lat, events[i].lon, now);
  }

  /** A device stream through grpc-js: authenticated here, then a DeviceSession of its own. */
  private connect(call: grpc.ServerDuplexStream<ConnectRequest, ConnectResponse>): void {
    const stream = new GrpcJsDeviceStream(call, this.opts.rawWrites);
    this.open(stream, call.metadata.get('authorization'), this.opts.certScopes === null ? null : peerOfCall(call));
  }

  /** A device stream served on its HTTP/2 stream (h2-device-stream.ts). */
  private connectH2(h2: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    const stream = new H2DeviceStream(h2, headers, this.h2);
    if (stream.ended) return; // answered already (a malformed grpc-timeout)
    const auth = headers.authorization;
    this.open(stream, auth === undefined ? [] : [auth], this.opts.certScopes === null ? null : peerOfSocket(h2.session?.socket));
  }

  /** A device stream over WebSocket (ws-server.ts): its credentials from the header or the subprotocol. */
  connectWs(ws: WebSocket, credentials: readonly string[], socket: unknown): void {
    this.open(new WsDeviceStream(ws, this.h2), credentials, this.opts.certScopes === null ? null : peerOfSocket(socket));
  }

  private open(stream: DeviceStream, authorization: readonly grpc.MetadataValue[], peer: PeerIdentity | null): void {
    let device: string;
    let principal: Principal;
    try {
      if (this.draining) throw new ApiError(grpc.status.UNAVAILABLE, this.drainMessage);
      principal = this.authorize(authorization, SCOPES.device, peer);
      device = this.deviceOf(principal);
    } catch (err) {
      stream.fail(this.reject(err, 'Connect'));
      return;
    }
    new DeviceSession(this, stream, device, principal).start();
  }
}

function deadlineMs(d: grpc.Deadline): number {
  return d instanceof Date ? d.getTime() : d;
}
