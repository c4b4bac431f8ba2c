/**
 * The protocol each process of a Redis deployment speaks, and the check that they agree. Every
 * gateway and matcher records itself in `{p}procs` (a field per process: its protocol and until when
 * it counts as live, by Redis's clock), renews the record while it runs and removes it when it
 * stops; one that dies is forgotten once its record lapses. A process whose protocol differs from a
 * live one's refuses to start: it would misread what the other writes, or write what the other
 * misreads (deploy/README.md, "Upgrading a Redis deployment"). Processes of builds from before this
 * record are not seen by it.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { show } from '../../src/model/errors.js';
import type { Conn } from './connection.js';
import { runScript } from './scripts.js';

/**
 * The protocol this build speaks: what crosses between processes through Redis (the command
 * stream's entries, stored subscriptions and notifications, the pushes on a device's channel,
 * publish replies, the matchers' stats record, a device's delivery state). It goes up with any
 * change that a process of the previous value would misread or write in a form this one misreads.
 */
export const PROTOCOL_VERSION = 1;

/** How long a record counts as live without being renewed (renewed three times in it). */
export const PRESENCE_TTL_MS = 15_000;

export interface PresenceOptions {
  /** @internal The protocol to record (tests stand in for a process of another build). */
  protocol?: number;
  /** @internal The record's life (ms; renewed every third of it). */
  ttlMs?: number;
  /** @internal A clock (ms) in place of Redis's. */
  now?: () => number;
  log?: Logger;
}

/** A process's record in `{p}procs`, renewed until `leave()`. */
export class Presence {
  private timer: NodeJS.Timeout | null = null;
  private warned = '';

  private constructor(
    private readonly cmd: Conn,
    private readonly key: string,
    /** `<role>:<host>:<pid>:<random>`: what another process's refusal names. */
    readonly field: string,
    readonly protocol: number,
    private readonly ttlMs: number,
    private readonly component: string,
    private readonly log: Logger | undefined,
    private readonly now: (() => number) | undefined,
  ) {}

  /**
   * Records a process (`role`: gateway, matcher) of the deployment whose record is `key`; throws,
   * recording nothing, when a live process speaks another protocol.
   */
  static async join(component: string, cmd: Conn, key: string, role: string, options: PresenceOptions = {}): Promise<Presence> {
    const protocol = options.protocol ?? PROTOCOL_VERSION;
    const ttlMs = options.ttlMs ?? PRESENCE_TTL_MS;
    const field = `${role}:${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    const other = (await runScript(cmd, 'ambitPresence', key, field, protocol, ttlMs, 'join', options.now?.() ?? '')) as string[];
    if (other.length === 2) {
      throw new Error(
        `${component}: a live process of this deployment (${show(other[0])}) speaks protocol ${other[1]}, this one ${protocol}: they cannot share a deployment; stop every process of the other version first (deploy/README.md, "Upgrading a Redis deployment"), or wait ${Math.ceil(ttlMs / 1000)} s after one that died`,
      );
    }
    const p = new Presence(cmd, key, field, protocol, ttlMs, component, options.log, options.now);
    p.timer = setInterval(() => void p.beat(), Math.max(1, Math.floor(ttlMs / 3)));
    p.timer.unref();
    return p;
  }

  /** Renews the record; a live process of another protocol (one that started while this one's record had lapsed) is logged once. */
  async beat(): Promise<void> {
    try {
      const other = (await runScript(this.cmd, 'ambitPresence', this.key, this.field, this.protocol, this.ttlMs, 'beat', this.now?.() ?? '')) as string[];
      if (other.length === 2 && other[0] !== this.warned) {
        this.warned = other[0];
        this.log?.error({ other: other[0], protocol: other[1] }, `${this.component}: a live process of this deployment (${other[0]}) speaks protocol ${other[1]}, this one ${this.protocol}: stop one of the two versions`);
      }
    } catch (err) {
      this.log?.warn({ err }, `${this.component}: its record in ${this.key} not renewed`);
    }
  }

  /** Stops renewing; `remove`: the record goes too (a clean stop; a crash leaves it to lapse). */
  async leave(remove = true): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (remove) await runScript(this.cmd, 'ambitPresence', this.key, this.field, this.protocol, this.ttlMs, 'leave', '').catch(() => {});
  }
}
