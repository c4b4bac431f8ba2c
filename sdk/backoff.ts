/**
 * Reconnect delays: exponential with random jitter (the shape of gRPC's connection-backoff
 * document), so devices dropped together do not come back together.
 */
import { invalid } from './errors.js';

export interface BackoffOptions {
  /** First delay, ms. */
  initialMs: number;
  /** Ceiling, ms. */
  maxMs: number;
  multiplier: number;
  /** Each delay is scaled by a random factor in [1 - jitter, 1 + jitter]. */
  jitter: number;
  /** A connection that stayed up this long resets the delay to initialMs. */
  resetAfterMs: number;
}

export const DEFAULT_BACKOFF: Readonly<BackoffOptions> = Object.freeze({ initialMs: 250, maxMs: 30_000, multiplier: 2, jitter: 0.2, resetAfterMs: 5_000 });

export function resolveBackoff(partial: Partial<BackoffOptions> = {}): BackoffOptions {
  const o: BackoffOptions = { ...DEFAULT_BACKOFF };
  for (const [k, v] of Object.entries(partial)) {
    if (v === undefined) continue;
    if (!(k in DEFAULT_BACKOFF)) throw invalid(`backoff.${k}`, 'unknown option');
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw invalid(`backoff.${k}`, `must be a finite number >= 0, got ${String(v)}`);
    o[k as keyof BackoffOptions] = v;
  }
  if (o.jitter > 1) throw invalid('backoff.jitter', `must be within [0, 1], got ${o.jitter}`);
  if (o.multiplier < 1) throw invalid('backoff.multiplier', `must be >= 1, got ${o.multiplier}`);
  if (o.maxMs < o.initialMs) throw invalid('backoff.maxMs', `must be >= initialMs (${o.initialMs}), got ${o.maxMs}`);
  return o;
}

/** The delay before reconnect attempt `attempt` (0-based). */
export function backoffDelay(o: BackoffOptions, attempt: number, random: () => number = Math.random): number {
  const base = Math.min(o.maxMs, o.initialMs * Math.pow(o.multiplier, attempt));
  return Math.max(0, Math.round(base * (1 + o.jitter * (2 * random() - 1))));
}
