/**
 * Which key layout a process uses (keys.ts), from its Redis source and the configured device-group
 * count, and the check that every process of a deployment agrees: the first process to start
 * records the layout in `{p}layout`; a process whose layout differs refuses to start, since it
 * would read and write notifications under other keys than the rest.
 */
import { show } from '../../src/model/errors.js';
import { type Conn, type RedisSource, isClusterSource } from './connection.js';
import { DEFAULT_CLUSTER_GROUPS, type GeoSpec, type Keys, type Layout, MAX_CLUSTER_GROUPS, MAX_MATCHER_PARTITIONS } from './keys.js';

/**
 * The layout for a source: a cluster gets `groups` device groups (default 64), a plain Redis one;
 * `partitions` matcher partitions (default 1).
 */
export function layoutFor(component: string, source: RedisSource, groups: unknown, partitions: unknown = undefined, geo: GeoSpec | undefined = undefined): Layout {
  let k = 1;
  if (geo !== undefined) {
    checkGeo(component, geo);
    if (partitions !== undefined && partitions !== geo.shards + geo.wide) throw new Error(`${component}: partitions must be left out (or ${geo.shards + geo.wide}) with sharding by space, got ${show(partitions)}`);
    partitions = geo.shards + geo.wide;
  }
  if (partitions !== undefined) {
    if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1 || partitions > MAX_MATCHER_PARTITIONS) {
      throw new Error(`${component}: partitions must be an integer in [1, ${MAX_MATCHER_PARTITIONS}], got ${show(partitions)}`);
    }
    k = partitions;
  }
  const parts = geo !== undefined ? { partitions: k, geo: { ...geo } } : k > 1 ? { partitions: k } : {};
  if (!isClusterSource(source)) {
    if (groups !== undefined && groups !== 1) throw new Error(`${component}: deviceGroups is for a Redis Cluster (a plain Redis has one), got ${show(groups)}`);
    return { cluster: false, groups: 1, ...parts };
  }
  if (groups === undefined) return { cluster: true, groups: DEFAULT_CLUSTER_GROUPS, ...parts };
  if (typeof groups !== 'number' || !Number.isInteger(groups) || groups < 1 || groups > MAX_CLUSTER_GROUPS) {
    throw new Error(`${component}: deviceGroups must be an integer in [1, ${MAX_CLUSTER_GROUPS}], got ${show(groups)}`);
  }
  return { cluster: true, groups, ...parts };
}

/** Geographic shards, wide shards, cell size and guard band of a deployment sharded by space. */
export const MAX_GEO_SHARDS = 128;
export const MAX_WIDE_SHARDS = 64;

/** Throws naming the field when a shard spec is out of range. */
export function checkGeo(component: string, geo: GeoSpec): void {
  const int = (name: string, v: unknown, lo: number, hi: number) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) throw new Error(`${component}: geo.${name} must be an integer in [${lo}, ${hi}], got ${show(v)}`);
  };
  if (typeof geo !== 'object' || geo === null) throw new Error(`${component}: geo must be an object, got ${show(geo)}`);
  int('shards', geo.shards, 1, MAX_GEO_SHARDS);
  int('wide', geo.wide, 1, MAX_WIDE_SHARDS);
  if (typeof geo.cellDeg !== 'number' || !(geo.cellDeg >= 0.001 && geo.cellDeg <= 30)) throw new Error(`${component}: geo.cellDeg must be a number of degrees in [0.001, 30], got ${show(geo.cellDeg)}`);
  if (typeof geo.guardM !== 'number' || !(geo.guardM >= 0 && geo.guardM <= 100_000)) throw new Error(`${component}: geo.guardM must be a number of metres in [0, 100000], got ${show(geo.guardM)}`);
  if (geo.layout !== 'sectors' && geo.layout !== 'stripes') throw new Error(`${component}: geo.layout must be "sectors" or "stripes", got ${show(geo.layout)}`);
}

/** What `{p}layout` holds for a layout. */
function describe(layout: Layout): string {
  const k = layout.partitions ?? 1;
  const g = layout.geo;
  const parts = g !== undefined ? ` geo=${g.shards}+${g.wide} cell=${g.cellDeg} guard=${g.guardM} ${g.layout}` : k > 1 ? ` partitions=${k}` : '';
  return (layout.cluster ? `cluster groups=${layout.groups}` : 'single') + parts;
}

/**
 * Records this process's layout if none is, then checks it against the recorded one; throws with
 * both when they differ. A plain-Redis deployment from before the record existed has none: it is
 * recorded as single by the first process that starts.
 */
export async function checkLayout(component: string, cmd: Conn, keys: Keys): Promise<void> {
  const mine = describe(keys.layout);
  await cmd.set(keys.layoutKey, mine, 'NX');
  const stored = await cmd.get(keys.layoutKey);
  if (stored !== mine) {
    throw new Error(`${component}: the deployment ${show(keys.prefix)} uses the key layout "${stored}", this process "${mine}" (every process of a deployment needs the same Redis kind, AMBIT_REDIS_DEVICE_GROUPS, AMBIT_MATCHER_PARTITIONS and AMBIT_GEO_* settings)`);
  }
}
