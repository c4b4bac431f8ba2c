/** Operators' calls (the `ops` scope): server totals and one device's state. */
import type { GetDeviceSubscriptionsResponse, GetStatsResponse } from '../api/gen/ambit/v1/ops_pb.js';
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
}

export interface DeviceInfo {
  subscriptions: Subscription[];
  /** Last known position, or null. */
  location: LatLon | null;
  connected: boolean;
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
    };
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
