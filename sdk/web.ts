/**
 * The Ambit client SDK for browsers and React Native: AmbitDevice over WebSocket (a ws:// or
 * wss:// address; the server's AMBIT_WEB_PORT), with the same API as in Node, and the plain
 * types. No Node module is imported from here: bundle it as it is.
 *
 *   const device = await AmbitDevice.connect('wss://ambit.example.com:8443', deviceToken);
 *   await device.subscribe({ id: 'accidents', filters: [{ constraints: [{ name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 } }] });
 *   device.updateLocation(45.4642, 9.19);
 *   for await (const n of device.notifications()) console.log(n.event.attributes);
 *
 * Publishers, fleet back ends and operators use gRPC (sdk/index.ts, Node).
 */
export { AmbitDevice, encodeLocation, type DeviceCounters, type DeviceEventMap, type DeviceOptions, type DeviceState } from './device.js';
export { AmbitError, StatusCode, statusName } from './errors.js';
export { DEFAULT_BACKOFF, backoffDelay, resolveBackoff, type BackoffOptions } from './backoff.js';
export type { TokenSource } from './channel.js';
export type { WebSocketConstructor, WebSocketLike } from './websocket-channel.js';
export {
  compareDeliveryIds,
  type AmbitEvent,
  type Area,
  type AttributeValue,
  type Constraint,
  type EventPattern,
  type Filter,
  type LatLon,
  type Notification,
  type Op,
  type PatternMatch,
  type Subscription,
} from './types.js';
