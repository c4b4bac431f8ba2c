/**
 * Location updates outside a device stream: one device's position (UpdateLocation), or batches for
 * many devices over one client stream (UpdateLocations; other devices need the `location:any`
 * scope, as a fleet back end has).
 */
import type { UpdateLocationsResponse } from '../api/gen/ambit/v1/device_pb.js';
import { DeviceService } from '../api/gen/ambit/v1/device_pb.js';
import { invalid } from './errors.js';
import { type ClientOptions, ServiceClient, type TokenSource, clientStream, unary } from './transport.js';
import { checkLatLon } from './types.js';

/** The most updates the server takes in one UpdateLocations message. */
export const MAX_UPDATES_PER_MESSAGE = 10_000;

export interface LocationUpdate {
  /** Absent: the token's own device. */
  deviceId?: string;
  lat: number;
  lon: number;
}


export class AmbitFleet extends ServiceClient {
  constructor(address: string, token: TokenSource, options: ClientOptions = {}) {
    super(DeviceService, address, token, options);
  }

  /** The token's own device's position; resolves once accepted. */
  async updateLocation(lat: number, lon: number): Promise<void> {
    checkLatLon('location', lat, lon);
    await unary(this.client, 'updateLocation', { location: { lat, lon } }, this.token, this.deadlineMs);
  }

  /** Sends every update over one stream, `batchSize` (≤ 10 000) per message; resolves with the count accepted. */
  async updateLocations(updates: Iterable<LocationUpdate> | AsyncIterable<LocationUpdate>, options: { batchSize?: number } = {}): Promise<number> {
    const batchSize = options.batchSize ?? 1000;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > MAX_UPDATES_PER_MESSAGE) {
      throw invalid('batchSize', `must be an integer in [1, ${MAX_UPDATES_PER_MESSAGE}], got ${String(batchSize)}`);
    }
    async function* batches() {
      let batch: { deviceId: string; location: { lat: number; lon: number } }[] = [];
      let i = 0;
      for await (const u of updates as AsyncIterable<LocationUpdate>) {
        checkLatLon(`updates[${i++}]`, u.lat, u.lon);
        batch.push({ deviceId: u.deviceId ?? '', location: { lat: u.lat, lon: u.lon } });
        if (batch.length === batchSize) {
          yield { updates: batch };
          batch = [];
        }
      }
      if (batch.length > 0) yield { updates: batch };
    }
    const res = await clientStream<UpdateLocationsResponse>(this.client, 'updateLocations', this.token, batches());
    return Number(res.accepted);
  }

  /** Sends ready-encoded UpdateLocationsRequest messages (benchmarks: no encoding on the measured path). */
  async updateLocationsEncoded(messages: Iterable<Buffer> | AsyncIterable<Buffer>): Promise<number> {
    const res = await clientStream<UpdateLocationsResponse>(this.client, 'updateLocations', this.token, messages);
    return Number(res.accepted);
  }

}
