/**
 * The process roles server.ts starts when REDIS_URL is set: the matcher (engine fed from Redis)
 * and the gateway's hub. Thin: options come from the validated ServerConfig.
 */
import type { Logger } from 'pino';
import type { ServerConfig } from './config.js';
import type { Hub, HubStats } from '../hub/port.js';
import { RedisHub } from '../hub/redis.js';
import { hubStats } from '../matcher/core.js';
import { RedisMatcher } from '../matcher/redis.js';
import { type RedisSource, clusterSourceFromUrl } from '../redis/connection.js';

/** The Redis source of a config: REDIS_URL, or the seed nodes of a cluster it names. */
export function redisSource(config: ServerConfig): RedisSource {
  if (config.redisUrl === null) throw new Error('redis roles: REDIS_URL is not set');
  return config.redisCluster ? clusterSourceFromUrl(config.redisUrl) : config.redisUrl;
}

/** The device-group setting for the hub and matcher (cluster only). */
const groups = (config: ServerConfig) => (config.redisCluster ? { deviceGroups: config.redisDeviceGroups } : {});

export interface MatcherRole {
  engineDetail: string;
  /** The matcher's own figures, for its /metrics. */
  stats(): Promise<HubStats>;
  stop(): Promise<void>;
}

export async function startMatcherRole(config: ServerConfig, log: Logger): Promise<MatcherRole> {
  const m = await RedisMatcher.start({ redis: redisSource(config), prefix: config.redisPrefix, ...groups(config), engine: config.engine, retention: config.retention, leaseMs: config.matcherLeaseMs, dedupeWindowMs: config.dedupe.windowMs, log });
  log.info({ engine: m.core.engine.name, detail: m.engineDetail, mode: 'redis', offset: m.offset }, `engine ${m.core.engine.name}: ${m.engineDetail}`);
  // Notifications are counted by the deliver script in Redis; gateways report them.
  const stats = async (): Promise<HubStats> => {
    const s = await hubStats(m.core, { mode: 'redis', engineDetail: m.engineDetail, devices: m.devices, eventsPublished: m.eventsMatchedCount, notifications: 0, notificationsDropped: 0, locationUpdates: m.locationsApplied });
    return { ...s, extra: { ...s.extra, matcherLeader: m.role === 'leader', matcherEpoch: m.epoch, fencedWrites: m.fencedWrites } };
  };
  return { engineDetail: m.engineDetail, stats, stop: () => m.stop() };
}

export async function connectGatewayHub(config: ServerConfig, log: Logger): Promise<Hub> {
  const hub = await RedisHub.connect({ redis: redisSource(config), prefix: config.redisPrefix, ...groups(config), log, maxSubscriptionsPerDevice: config.maxSubscriptionsPerDevice });
  log.info({ gatewayId: hub.gatewayId }, `redis hub connected as gateway ${hub.gatewayId}`);
  return hub;
}
