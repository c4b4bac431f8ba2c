/** Operators' calls (the `ops` scope): server totals, devices (listed, inspected, purged), moving cells of the shard map. */
import type { DrainGatewayResponse, GetDeviceSubscriptionsResponse, GetStatsResponse, ListDevicesResponse, MoveCellsResponse, PlanCellsResponse, PurgeDeviceResponse, RevokeTokensResponse } from '../api/gen/ambit/v1/ops_pb.js';
import { OpsService } from '../api/gen/ambit/v1/ops_pb.js';
import { type ClientOptions, ServiceClient, type TokenSource, unary } from './transport.js';
import { type LatLon, type Subscription, fromWireSubscription } from './types.js';

export interface ServerStats {
  /** Matching engine in use ("gpu", "fast", ...) and why. */
  engine: string;
  engineDetail: string;
  /** "embedded" or "redis". */
  mode: string;
  subscriptions: number;
  filters: number;
  devices: number;
  connectedDevices: number;
  eventsPublished: number;
  notifications: number;
  locationUpdates: number;
  notificationsDropped: number;
  engineMemoryBytes: number;
  uptimeSeconds: number;
  /** Sharded by space: the shard map's version (0: as configured) and whether a move of cells is under way. */
  shardMapVersion: number;
  shardMapMoving: boolean;
}

/** A cell of the shard map (row, column in cells of AMBIT_GEO_CELL_DEG degrees) and the geographic shard it is to belong to. */
export interface CellMove {
  row: number;
  col: number;
  shard: number;
}

export interface DeviceInfo {
  subscriptions: Subscription[];
  /** Last known position, or null. */
  location: LatLon | null;
  connected: boolean;
}


/** One device of a listing. */
export interface DeviceSummary {
  deviceId: string;
  subscriptions: number;
  location: LatLon | null;
  /** When a gateway last saw it (ms since the epoch; 0: not recorded). */
  lastSeenMs: number;
}

export interface DevicePage {
  devices: DeviceSummary[];
  /** Pass as `pageToken` for the next page; '' after the last. */
  nextPageToken: string;
}

/** What a purge removed. */
export interface PurgeResult {
  subscriptionsRemoved: number;
  notificationsRemoved: number;
  hadLocation: boolean;
}

export class AmbitOps extends ServiceClient {
  constructor(address: string, token: TokenSource, options: ClientOptions = {}) {
    super(OpsService, address, token, options);
  }

  async stats(): Promise<ServerStats> {
    const s = await unary<GetStatsResponse>(this.client, 'getStats', {}, this.token, this.deadlineMs);
    return {
      engine: s.engine,
      engineDetail: s.engineDetail,
      mode: s.mode,
      subscriptions: Number(s.subscriptions),
      filters: Number(s.filters),
      devices: Number(s.devices),
      connectedDevices: Number(s.connectedDevices),
      eventsPublished: Number(s.eventsPublished),
      notifications: Number(s.notifications),
      locationUpdates: Number(s.locationUpdates),
      notificationsDropped: Number(s.notificationsDropped),
      engineMemoryBytes: Number(s.engineMemoryBytes),
      uptimeSeconds: Number(s.uptimeSeconds),
      shardMapVersion: Number(s.shardMapVersion),
      shardMapMoving: s.shardMapMoving,
    };
  }

  /**
   * A deployment sharded by space: gives these cells to other geographic shards while traffic
   * flows; resolves once every device homed in them lives on its new shard. FAILED_PRECONDITION
   * when the deployment is not sharded by space or another move is under way.
   */
  async moveCells(moves: readonly CellMove[]): Promise<{ shardMapVersion: number; devicesMoved: number }> {
    const r = await unary<MoveCellsResponse>(this.client, 'moveCells', { moves: moves.map((m) => ({ row: m.row, col: m.col, shard: m.shard })) }, this.token, this.deadlineMs);
    return { shardMapVersion: Number(r.shardMapVersion), devicesMoved: Number(r.devicesMoved) };
  }

  /**
   * A deployment sharded by space: a plan that fits the shard map to load, moves of cells (at most
   * `maxMoves`, default 100) that even out the devices homed on the geographic shards, with each
   * shard's devices before and after. Nothing moves: pass `moves` to `moveCells`.
   */
  async planCells(maxMoves = 100): Promise<{ moves: CellMove[]; devicesBefore: number[]; devicesAfter: number[] }> {
    const r = await unary<PlanCellsResponse>(this.client, 'planCells', { maxMoves }, this.token, this.deadlineMs);
    return { moves: r.moves.map((m) => ({ row: m.row, col: m.col, shard: m.shard })), devicesBefore: r.devicesBefore.map(Number), devicesAfter: r.devicesAfter.map(Number) };
  }

  /**
   * Drains the gateway process that takes the call (before stopping or replacing it): it turns
   * unready, ends its device streams (devices reconnect elsewhere) and refuses new ones. Resolves
   * with the streams it ended. FAILED_PRECONDITION for a gateway of a node of several processes.
   */
  async drainGateway(): Promise<{ streamsEnded: number }> {
    const r = await unary<DrainGatewayResponse>(this.client, 'drainGateway', {}, this.token, this.deadlineMs);
    return { streamsEnded: Number(r.streamsEnded) };
  }

  /** Removes one subscription of a device (as its own unsubscribe would); NOT_FOUND (field subscription_id) when it has none with that id. */
  async deleteSubscription(deviceId: string, subscriptionId: string): Promise<void> {
    await unary(this.client, 'deleteSubscription', { deviceId, subscriptionId }, this.token, this.deadlineMs);
  }

  /**
   * A page of the devices holding subscriptions (1..1000 a page, default 100), in no order to rely
   * on; `idPrefix` keeps those whose id starts with it.
   */
  async listDevices(options: { pageSize?: number; pageToken?: string; idPrefix?: string } = {}): Promise<DevicePage> {
    const r = await unary<ListDevicesResponse>(this.client, 'listDevices', { pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? '', idPrefix: options.idPrefix ?? '' }, this.token, this.deadlineMs);
    return {
      devices: r.devices.map((d) => ({ deviceId: d.deviceId, subscriptions: d.subscriptions, location: d.location === undefined ? null : { lat: d.location.lat, lon: d.location.lon }, lastSeenMs: Number(d.lastSeenMs) })),
      nextPageToken: r.nextPageToken,
    };
  }

  /** Every device holding subscriptions, page after page. */
  async *allDevices(options: { pageSize?: number; idPrefix?: string } = {}): AsyncGenerator<DeviceSummary> {
    let pageToken = '';
    do {
      const page = await this.listDevices({ ...options, pageToken });
      yield* page.devices;
      pageToken = page.nextPageToken;
    } while (pageToken !== '');
  }

  /**
   * Removes everything the deployment holds for a device (subscriptions, position, backlog,
   * acknowledgements); its open stream ends UNAVAILABLE and a reconnect finds its state lost.
   */
  async purgeDevice(deviceId: string): Promise<PurgeResult> {
    const r = await unary<PurgeDeviceResponse>(this.client, 'purgeDevice', { deviceId }, this.token, this.deadlineMs);
    return { subscriptionsRemoved: Number(r.subscriptionsRemoved), notificationsRemoved: Number(r.notificationsRemoved), hadLocation: r.hadLocation };
  }

  /**
   * Revokes tokens in the whole deployment: one (`token` whole, or `tokenId`) or every token of a
   * `subject` issued up to now; kept until the token expires, or `keepDays` (default: the
   * deployment's). Streams opened with them end UNAUTHENTICATED on every gateway.
   */
  async revokeTokens(what: { token: string } | { tokenId: string; keepDays?: number } | { subject: string; keepDays?: number }): Promise<{ streamsEnded: number; keptUntilMs: number }> {
    const r = await unary<RevokeTokensResponse>(this.client, 'revokeTokens', { token: 'token' in what ? what.token : '', tokenId: 'tokenId' in what ? what.tokenId : '', subject: 'subject' in what ? what.subject : '', keepDays: 'keepDays' in what ? (what.keepDays ?? 0) : 0 }, this.token, this.deadlineMs);
    return { streamsEnded: Number(r.streamsEnded), keptUntilMs: Number(r.keptUntilUnixS) * 1000 };
  }

  async deviceSubscriptions(deviceId: string): Promise<DeviceInfo> {
    const r = await unary<GetDeviceSubscriptionsResponse>(this.client, 'getDeviceSubscriptions', { deviceId }, this.token, this.deadlineMs);
    return {
      subscriptions: r.subscriptions.map(fromWireSubscription),
      location: r.location === undefined ? null : { lat: r.location.lat, lon: r.location.lon },
      connected: r.connected,
    };
  }

}
