/** Seeded workload generation (CLCB / CCM default scenarios), mobility and selectivity measurement. */
export { Prng, Zipf, splitmix32, streamSeed, sampleCumulative } from './prng.js';
export { REGIONS, makeRegion, radiusForAreaFraction, areaFractionForRadius, type Region, type RegionName, type RegionSpec } from './region.js';
export { SpatialModel, type SpatialKind, type SpatialOptions } from './spatial.js';
export { ContentModel, SYLLABLES, NUMERIC_OPS, STRING_OPS, buildVocabulary, type OpWeights, type NameDistribution } from './content.js';
export {
  DEFAULT_WORKLOAD,
  DEFAULT_CCM,
  WorkloadSource,
  generateWorkload,
  generateCcmWorkload,
  measureSelectivity,
  resolveWorkloadOptions,
  type CcmOptions,
  type Device,
  type SelectivityReport,
  type Workload,
  type WorkloadOptions,
  type WorkloadParams,
  type WorkloadStats,
} from './generator.js';
export { RandomWaypoint, randomWaypoint, DEFAULT_RANDOM_WAYPOINT, type RandomWaypointOptions } from './mobility.js';
