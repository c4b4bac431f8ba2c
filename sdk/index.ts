/**
 * The Ambit client SDK: devices (AmbitDevice), publishers (AmbitPublisher), fleet back ends
 * (AmbitFleet) and operators (AmbitOps), over gRPC, with plain TypeScript types. A device also
 * connects over WebSocket when its address is a ws:// or wss:// URL (sdk/web.ts is the entry for
 * browsers and React Native).
 *
 *   const device = await AmbitDevice.connect('localhost:50051', deviceToken);
 *   await device.subscribe({ id: 'accidents', filters: [{ constraints: [{ name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 } }] });
 *   device.updateLocation(45.4642, 9.19);
 *   for await (const n of device.notifications()) console.log(n.event.attributes);
 */
export { encodeLocation, type DeviceCounters, type DeviceEventMap, type DeviceOptions, type DeviceState } from './device.js';
export { AmbitDevice } from './grpc-device.js';
export type { WebSocketConstructor, WebSocketLike } from './websocket-channel.js';
export { AmbitPublisher, PublishStream, MAX_EVENTS_PER_MESSAGE, type BulkPublishResult, type PublishResult, type PublisherOptions } from './publisher.js';
export { AmbitOps, type CellMove, type DeviceInfo, type DevicePage, type DeviceSummary as OpsDeviceSummary, type PurgeResult, type ServerStats } from './ops.js';
export { AmbitFleet, MAX_UPDATES_PER_MESSAGE, type LocationUpdate } from './fleet.js';
export { AmbitError, StatusCode, statusName, type PublishOutcome } from './errors.js';
export { DEFAULT_BACKOFF, backoffDelay, resolveBackoff, type BackoffOptions } from './backoff.js';
export type { ClientOptions, TlsOptions, TokenSource } from './transport.js';
export {
  compareDeliveryIds,
  type AggregateFn,
  type AmbitEvent,
  type Area,
  type AttributeValue,
  type CompareOp,
  type Constraint,
  type ElementParameter,
  type EventInput,
  type EventPattern,
  type Filter,
  type LatLon,
  type Notification,
  type Op,
  type PatternAggregate,
  type PatternMatch,
  type PatternNegation,
  type PatternParameter,
  type PatternStep,
  type Selection,
  type StepAttribute,
  type Subscription,
} from './types.js';
