/**
 * The WebSocket framing of `DeviceService.Connect` (docs/service.md "Device streams over
 * WebSocket"), shared by the gateway (services/edge/ws-device-stream.ts) and the SDK's WebSocket
 * transport (sdk/websocket-channel.ts): the path, the subprotocols, the flags byte before each
 * message, and the status codes as the end-of-stream JSON names them (Connect's names).
 */

export const WS_SUBPROTOCOL = 'ambit.v1';
export const WS_PATH = '/ambit.v1.DeviceService/Connect';
/** A subprotocol entry `ambit.bearer.<token>` carries the token where a client cannot set headers (browsers). */
export const WS_BEARER_PREFIX = 'ambit.bearer.';
/** Flags byte: a message follows (a ConnectRequest or ConnectResponse). */
export const FLAG_MESSAGE = 0;
/** Flags byte: the end of the stream (from the server, its status as JSON). */
export const FLAG_END = 2;

/** gRPC status codes by number, as the Connect protocol names them (lower snake case). */
export const CODE_NAMES: readonly string[] = Object.freeze([
  'ok',
  'canceled',
  'unknown',
  'invalid_argument',
  'deadline_exceeded',
  'not_found',
  'already_exists',
  'permission_denied',
  'resource_exhausted',
  'failed_precondition',
  'aborted',
  'out_of_range',
  'unimplemented',
  'internal',
  'unavailable',
  'data_loss',
  'unauthenticated',
]);

/** The server's end of stream: `{}` for OK. */
export interface WsEndOfStream {
  error?: { code: string; message: string; details?: { type: string; value: string }[] };
  metadata?: Record<string, string[]>;
}
