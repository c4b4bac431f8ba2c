/**
 * The SDK's AmbitDevice in Node: gRPC for a "host:port" address (grpc-channel.ts), WebSocket for a
 * ws:// or wss:// URL. The class in device.ts speaks WebSocket only, so a browser or React Native
 * bundle of it (sdk/web.ts) carries no grpc-js.
 */
import type { BackoffOptions } from './backoff.js';
import { type DeviceChannel, isWebSocketAddress } from './channel.js';
import { AmbitDevice as WebSocketAmbitDevice, type DeviceOptions } from './device.js';
import { GrpcDeviceChannel } from './grpc-channel.js';

export class AmbitDevice extends WebSocketAmbitDevice {
  protected override channelFor(address: string, options: DeviceOptions, backoff: BackoffOptions): DeviceChannel {
    return isWebSocketAddress(address) ? super.channelFor(address, options, backoff) : new GrpcDeviceChannel(address, options, backoff);
  }
}
