/**
 * The one pino root of a process; modules take `child({ component })`. JSON lines go to stdout;
 * nothing else in the process writes there (the GPU layer keeps Dawn's messages out of stdout).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export function rootLogger(level: string = 'info', destination?: NodeJS.WritableStream): Logger {
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Error(`log: level must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(level)}`);
  const opts = { level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime };
  return destination === undefined ? pino(opts) : pino(opts, destination as pino.DestinationStream);
}

/** A logger that drops everything (tests, library use). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
