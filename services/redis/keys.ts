/**
 * Every Redis key and channel Ambit uses, in one place. All of them start with the deployment's
 * prefix so several deployments can share one Redis. Scripts touch several of these keys at once,
 * so the layout needs one Redis (not a cluster).
 *
 *   {p}subs:{device}    HASH  subscription id → "<in-entry id> <DeviceSubscription JSON>"
 *   {p}subdevs          SET   devices with at least one subscription (the matcher's snapshot list)
 *   {p}pos              HASH  device → 16 bytes: lat, lon as float64 LE
 *   {p}in               STREAM every gateway → matcher command, in one total order
 *   {p}n:{device}       STREAM the device's notifications, ids "<ms>-<ordinal>"
 *   {p}dstate           HASH  device → its delivery state, 56 bytes (scripts.ts: last id, length,
 *                             TTL time, the (in-entry, event index) marker of its last notification)
 *   {p}nseq, {p}nlast   HASH  the same for devices notified by versions before {p}dstate (read only)
 *   {p}acked            HASH  device → last acknowledged delivery id
 *   {p}stats            HASH  events, notifications, dropped, locations
 *   {p}config           HASH  the matcher's retention (maxPerDevice, maxAgeMs)
 *   {p}matcher:offset   STRING last `in` entry whose effects are stored
 *   {p}matcher:stats    STRING the matcher's engine figures as JSON; its TTL is the liveness signal
 *   {p}eid:{event id}   STRING "<reached> <in-entry id>" of a matched event, for the dedupe window (PX)
 *   {p}reply:{gateway}  CHANNEL publish replies for one gateway
 *   {p}wake:{device}    CHANNEL each notification stored for the device, whole (scripts.ts)
 */
export class Keys {
  readonly subDevices: string;
  readonly pos: string;
  readonly in: string;
  readonly dstate: string;
  readonly nseq: string;
  readonly nlast: string;
  readonly acked: string;
  readonly stats: string;
  readonly config: string;
  readonly matcherOffset: string;
  readonly matcherStats: string;
  readonly matcherLease: string;
  readonly matcherEpoch: string;
  readonly wakePrefix: string;

  constructor(readonly prefix: string) {
    this.subDevices = `${prefix}subdevs`;
    this.pos = `${prefix}pos`;
    this.in = `${prefix}in`;
    this.dstate = `${prefix}dstate`;
    this.nseq = `${prefix}nseq`;
    this.nlast = `${prefix}nlast`;
    this.acked = `${prefix}acked`;
    this.stats = `${prefix}stats`;
    this.config = `${prefix}config`;
    this.matcherOffset = `${prefix}matcher:offset`;
    this.matcherStats = `${prefix}matcher:stats`;
    this.matcherLease = `${prefix}matcher:lease`;
    this.matcherEpoch = `${prefix}matcher:epoch`;
    this.wakePrefix = `${prefix}wake:`;
  }

  subs(device: string): string {
    return `${this.prefix}subs:${device}`;
  }

  notes(device: string): string {
    return `${this.prefix}n:${device}`;
  }

  eventId(id: string): string {
    return `${this.prefix}eid:${id}`;
  }

  reply(gatewayId: string): string {
    return `${this.prefix}reply:${gatewayId}`;
  }

  wake(device: string): string {
    return this.wakePrefix + device;
  }
}

export const DEFAULT_PREFIX = 'ambit:';
