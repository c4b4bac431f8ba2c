/**
 * A device's transport over gRPC (grpc-js, HTTP/2): the Connect stream and the device's unary
 * calls on one channel. grpc-js shares a TCP connection among clients of the same address and
 * options, so many devices in one process multiplex over one HTTP/2 connection unless told
 * otherwise (channelOptions).
 */
import * as grpc from '@grpc/grpc-js';
import { type ConnectResponse, DeviceService, type ListSubscriptionsResponse } from '../api/gen/ambit/v1/device_pb.js';
import type { BackoffOptions } from './backoff.js';
import { type ChannelStream, type ConnectRequestInit, type DeviceChannel, type StreamHandlers, encodeLocation } from './channel.js';
import { AmbitError, StatusCode } from './errors.js';
import { type ClientOptions, channelOptions, clientFor, credentials, unary } from './transport.js';

let DeviceClient: grpc.ServiceClientConstructor | null = null;

type Stream = grpc.ClientDuplexStream<unknown, ConnectResponse>;

export class GrpcDeviceChannel implements DeviceChannel {
  readonly kind = 'gRPC';
  private readonly client: grpc.Client;

  constructor(address: string, options: ClientOptions, backoff: BackoffOptions) {
    DeviceClient ??= clientFor(DeviceService);
    // The channel's reconnect backoff follows the device's. No transparent retries (the device
    // re-opens the stream itself), and a one-byte retry buffer: grpc-js keeps queued messages there
    // and re-copies them per send (about 100 µs per message when writes outpace the connection, profiled).
    this.client = new DeviceClient(
      address,
      credentials(options.tls),
      channelOptions(options, {
        'grpc.initial_reconnect_backoff_ms': Math.max(1, backoff.initialMs),
        'grpc.max_reconnect_backoff_ms': Math.max(1, backoff.maxMs),
        'grpc.enable_retries': 0,
        'grpc.per_rpc_retry_buffer_size': 1,
      }),
    );
  }

  connect(token: string, h: StreamHandlers): ChannelStream {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${token}`);
    const s = (this.client as unknown as { connect(md: grpc.Metadata): Stream }).connect(md);
    s.on('data', (m: ConnectResponse) => h.message(m));
    // 'status' follows every 'error' and decides; without a listener 'error' would throw.
    s.on('error', () => {});
    s.on('status', (st: grpc.StatusObject) => h.ended(st.code === StatusCode.OK ? new AmbitError(StatusCode.UNAVAILABLE, 'sdk: the server ended the stream') : AmbitError.from(st)));
    return {
      write: (m: ConnectRequestInit, sent?: () => void) => void s.write(m, sent),
      // A Buffer: the client's serializer passes Buffers through unencoded (transport.ts clientFor).
      writeLocation: (lat: number, lon: number, sent?: () => void) => void s.write(Buffer.from(encodeLocation(lat, lon).buffer, 0, 20), sent),
      end: () => s.end(),
      cancel: () => s.cancel(),
      pause: () => s.pause(),
      resume: () => s.resume(),
    };
  }

  listSubscriptions(token: string, deadlineMs: number): Promise<ListSubscriptionsResponse> {
    return unary<ListSubscriptionsResponse>(this.client, 'listSubscriptions', {}, token, deadlineMs);
  }

  close(): void {
    this.client.close();
  }
}
