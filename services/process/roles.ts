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

function redisUrl(config: ServerConfig): string {
  if (config.redisUrl === null) throw new Error('redis roles: REDIS_URL is not set');
  return config.redisUrl;
}

export interface MatcherRole {
  engineDetail: string;
  /** The matcher's own figures, for its /metrics. */
  stats(): Promise<HubStats>;
  stop(): Promise<void>;
}

export async function startMatcherRole(config: ServerConfig, log: Logger): Promise<MatcherRole> {
  const m = await RedisMatcher.start({ redis: redisUrl(config), prefix: config.redisPrefix, engine: config.engine, retention: config.retention, leaseMs: config.matcherLeaseMs, dedupeWindowMs: config.dedupe.windowMs, log });
  log.info({ engine: m.core.engine.name, detail: m.engineDetail, mode: 'redis', offset: m.offset }, `engine ${m.core.engine.name}: ${m.engineDetail}`);
  // Notifications are counted by the deliver script in Redis; gateways report them.
  const stats = async (): Promise<HubStats> => {
    const s = await hubStats(m.core, { mode: 'redis', engineDetail: m.engineDetail, devices: m.devices, eventsPublished: m.eventsMatchedCount, notifications: 0, notificationsDropped: 0, locationUpdates: m.locationsApplied });
    return { ...s, extra: { ...s.extra, matcherLeader: m.role === 'leader', matcherEpoch: m.epoch, fencedWrites: m.fencedWrites } };
  };
  return { engineDetail: m.engineDetail, stats, stop: () => m.stop() };
}

export async function connectGatewayHub(config: ServerConfig, log: Logger): Promise<Hub> {
  const hub = await RedisHub.connect({ redis: redisUrl(config), prefix: config.redisPrefix, log, maxSubscriptionsPerDevice: config.maxSubscriptionsPerDevice });
  log.info({ gatewayId: hub.gatewayId }, `redis hub connected as gateway ${hub.gatewayId}`);
  return hub;
}
