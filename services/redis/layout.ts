/**
 * Which key layout a process uses (keys.ts), from its Redis source and the configured device-group
 * count, and the check that every process of a deployment agrees: the first process to start
 * records the layout in `{p}layout`; a process whose layout differs refuses to start, since it
 * would read and write notifications under other keys than the rest.
 */
import { show } from '../../src/model/errors.js';
import { type Conn, type RedisSource, isClusterSource } from './connection.js';
import { DEFAULT_CLUSTER_GROUPS, type Keys, type Layout, MAX_CLUSTER_GROUPS, MAX_MATCHER_PARTITIONS } from './keys.js';

/**
 * The layout for a source: a cluster gets `groups` device groups (default 64), a plain Redis one;
 * `partitions` matcher partitions (default 1).
 */
export function layoutFor(component: string, source: RedisSource, groups: unknown, partitions: unknown = undefined): Layout {
  let k = 1;
  if (partitions !== undefined) {
    if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1 || partitions > MAX_MATCHER_PARTITIONS) {
      throw new Error(`${component}: partitions must be an integer in [1, ${MAX_MATCHER_PARTITIONS}], got ${show(partitions)}`);
    }
    k = partitions;
  }
  const parts = k > 1 ? { partitions: k } : {};
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

/** What `{p}layout` holds for a layout. */
function describe(layout: Layout): string {
  const k = layout.partitions ?? 1;
  return (layout.cluster ? `cluster groups=${layout.groups}` : 'single') + (k > 1 ? ` partitions=${k}` : '');
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
    throw new Error(`${component}: the deployment ${show(keys.prefix)} uses the key layout "${stored}", this process "${mine}" (every process of a deployment needs the same Redis kind, AMBIT_REDIS_DEVICE_GROUPS and AMBIT_MATCHER_PARTITIONS)`);
  }
}
