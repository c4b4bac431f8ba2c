/**
 * A Redis matcher that rebuilds itself when its command stream was trimmed past its read position:
 * it missed commands (the gateways' cap, AMBIT_COMMAND_STREAM_MAXLEN, went past a matcher that fell
 * that far behind), so its subscriptions and positions are no longer the stream's and its answers
 * could be wrong. The matcher stops (a leader hands its lease over at once, so a standby leads
 * meanwhile), its snapshot file is removed (it would hold the same wrong state), and a new matcher
 * starts from Redis, as a restart of the process would. Starts that fail are tried again, with a
 * growing pause.
 */
import type { Matcher } from '../../src/engines/matcher.js';
import type { RedisMatcherOptions } from './redis.js';
import { RedisMatcher } from './redis.js';
import { sleep } from '../redis/connection.js';

const COMPONENT = 'redis matcher';

export class RebuildingMatcher {
  private m!: RedisMatcher;
  private rebuilding: Promise<void> | null = null;
  private stopped = false;
  /** Rebuilds so far. */
  rebuilds = 0;

  private constructor(
    private readonly options: RedisMatcherOptions,
    private readonly newEngine: (() => Matcher) | undefined,
  ) {}

  /**
   * `options.engine` is an engine choice (each start opens its own engine), or an engine instance
   * for the first start with `newEngine` making the one of each rebuild (an engine is closed with
   * its matcher).
   */
  static async start(options: RedisMatcherOptions, newEngine?: () => Matcher): Promise<RebuildingMatcher> {
    if (typeof options.engine === 'object' && newEngine === undefined) throw new Error('RebuildingMatcher: an engine instance is closed with its matcher: give an engine choice, or newEngine for the rebuilds');
    const r = new RebuildingMatcher(options, newEngine);
    r.m = await RedisMatcher.start(r.startOptions(true));
    return r;
  }

  /** The matcher running now (the one being replaced while a rebuild is under way). */
  get matcher(): RedisMatcher {
    return this.m;
  }

  /** Settles when the rebuild under way, if any, is done. */
  async settled(): Promise<void> {
    await this.rebuilding;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.rebuilding;
    await this.m.stop();
  }

  private startOptions(first = false): RedisMatcherOptions {
    const given = this.options.hooks?.onTrimmedPast;
    return {
      ...this.options,
      ...(first || this.newEngine === undefined ? {} : { engine: this.newEngine() }),
      hooks: {
        ...this.options.hooks,
        onTrimmedPast: (at: string) => {
          given?.(at);
          this.rebuild(at);
        },
      },
    };
  }

  private rebuild(at: string): void {
    if (this.rebuilding !== null || this.stopped) return;
    const log = this.options.log;
    this.rebuilding = (async () => {
      log?.warn({ readPosition: at }, `${COMPONENT}: rebuilding from Redis: the command stream was trimmed past ${at}`);
      await this.m.stopForRebuild();
      for (let attempt = 0; !this.stopped; attempt++) {
        try {
          this.m = await RedisMatcher.start(this.startOptions());
          this.rebuilds++;
          log?.info({ offset: this.m.offset, role: this.m.role }, `${COMPONENT}: rebuilt from Redis after the stream was trimmed past ${at}`);
          return;
        } catch (err) {
          log?.error({ err, attempt }, `${COMPONENT}: the rebuild from Redis failed; trying again`);
          await sleep(Math.min(30_000, 500 * 2 ** attempt));
        }
      }
    })().finally(() => (this.rebuilding = null));
  }
}
