/**
 * The matcher lease of a Redis deployment: whoever holds `{p}matcher:lease` leads. Every quarter
 * of the lease a holder renews it and anyone else tries to take it; taking it gives a token one
 * above the last (`{p}matcher:epoch`), which the leader's writes carry so Redis can refuse those
 * of an older one (scripts.ts, FENCE). A holder that cannot renew for a whole lease, or finds it
 * someone else's, lets it go.
 */
import type { Conn } from '../redis/connection.js';
import type { Logger } from 'pino';
import type { Keys } from '../redis/keys.js';
import { runScript } from '../redis/scripts.js';

export interface LeaseEvents {
  /** The lease was taken, with `token`. */
  taken(token: string): void;
  /** The lease was lost (someone else has it, or it could not be renewed for a whole lease). */
  lost(why: string): void;
}

export class MatcherLease {
  /** The token of the lease held (or last held); '' before the first. */
  token = '';
  private holding = false;
  private at = 0;
  private busy = false;
  private suspended = false;
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly cmd: Conn,
    private readonly keys: Keys,
    private readonly holder: string,
    private readonly leaseMs: number,
    private readonly events: LeaseEvents,
    private readonly log: Logger | undefined,
    private readonly component: string,
  ) {}

  /** Whether this process holds the lease (as far as it knows). */
  get held(): boolean {
    return this.holding;
  }

  private get value(): string {
    return `${this.token} ${this.holder}`;
  }

  /** One try now, then every quarter lease. */
  async start(): Promise<void> {
    await this.tick();
    this.timer = setInterval(() => void this.tick(), Math.max(25, Math.floor(this.leaseMs / 4)));
    this.timer.unref();
  }

  /** Renews a held lease, or tries to take it. */
  async tick(): Promise<void> {
    if (this.busy || this.suspended || this.stopped) return;
    this.busy = true;
    const k = this.keys;
    try {
      if (this.holding) {
        let still: boolean;
        try {
          still = (await runScript(this.cmd, 'ambitLeaseRenew', k.matcherLease, this.value, this.leaseMs)) === 1;
          if (still) this.at = performance.now();
        } catch (err) {
          still = performance.now() - this.at < this.leaseMs;
          if (!still) this.log?.warn({ err }, `${this.component}: lease not renewed for ${this.leaseMs} ms`);
        }
        if (!still && this.holding && !this.stopped) this.lose('the lease passed to another matcher or lapsed');
      } else {
        const [taken, value] = (await runScript(this.cmd, 'ambitLeaseAcquire', k.matcherLease, k.matcherEpoch, this.holder, this.leaseMs)) as [number, string];
        if (taken === 1 && !this.stopped) {
          this.token = String(value);
          this.at = performance.now();
          this.holding = true;
          this.events.taken(this.token);
        }
      }
    } catch (err) {
      this.log?.warn({ err }, `${this.component}: lease check failed`);
    } finally {
      this.busy = false;
    }
  }

  /** Stops holding (a write was refused: someone newer has it). */
  lose(why: string): void {
    if (!this.holding) return;
    this.holding = false;
    this.events.lost(why);
  }

  /** Test hook: no more renewals nor tries, as if the process were paused for the lease timer only. */
  suspend(): void {
    this.suspended = true;
  }

  /** Ends the timer; `release` also gives a held lease up at once (a clean stop hands over). */
  async stop(release: boolean): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    if (release && this.holding) {
      this.holding = false;
      await runScript(this.cmd, 'ambitLeaseRelease', this.keys.matcherLease, this.value);
    }
  }
}
