/** The Redis deployment: gateways' hub, the matcher role, and the shared layouts. */
export { RedisHub, type RedisHubOptions, type MatcherStatsRecord } from './hub.js';
export { RedisMatcher, type RedisMatcherOptions } from './matcher.js';
export { Keys, DEFAULT_PREFIX } from './keys.js';
export { type RedisSource, DEFAULT_REDIS } from './connection.js';
