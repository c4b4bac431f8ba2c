/**
 * Progress on stderr (stdout carries the tables). On a terminal: one bar redrawn in place at most
 * 10 times a second. Otherwise (CI logs, files): once a loop has run 2 s, a plain line every 10% or
 * 15 s, whichever comes first, and one line at the end.
 */

const BAR = 24;

export class Progress {
  private readonly label: string;
  private readonly total: number;
  private readonly tty: boolean;
  private readonly start = performance.now();
  private done = 0;
  private lastDraw = 0;
  private lastTenth = 0;
  private finished = false;

  constructor(label: string, total: number, tty = process.stderr.isTTY === true) {
    this.label = label;
    this.total = Math.max(1, total);
    this.tty = tty;
    this.lastDraw = this.start;
  }

  /** Advances by n; cheap enough to call per item (it looks at the clock once every 256 items). */
  tick(n = 1): void {
    this.done += n;
    if ((this.done & 255) !== 0 && this.done < this.total) return;
    const now = performance.now();
    if (this.tty) {
      if (now - this.lastDraw >= 100) {
        this.lastDraw = now;
        this.draw(now);
      }
    } else {
      // Short loops stay quiet; long ones report every 10% or 15 s.
      const tenth = Math.floor((this.done * 10) / this.total);
      if (now - this.start >= 2000 && this.done < this.total && (tenth > this.lastTenth || now - this.lastDraw >= 15_000)) {
        this.lastTenth = tenth;
        this.lastDraw = now;
        process.stderr.write(`  ${this.label}: ${this.done}/${this.total} (${Math.round((100 * this.done) / this.total)}%, ${secs(now - this.start)})\n`);
      }
    }
  }

  /** Clears the bar (TTY) and returns the elapsed milliseconds. */
  end(note = ''): number {
    const ms = performance.now() - this.start;
    if (this.finished) return ms;
    this.finished = true;
    if (this.tty) process.stderr.write(`\r\x1b[2K  ${this.label}: done in ${secs(ms)}${note ? ` ${note}` : ''}\n`);
    else process.stderr.write(`  ${this.label}: done in ${secs(ms)}${note ? ` ${note}` : ''}\n`);
    return ms;
  }

  private draw(now: number): void {
    const f = Math.min(1, this.done / this.total);
    const full = Math.round(f * BAR);
    const elapsed = now - this.start;
    const eta = f > 0 ? (elapsed / f) * (1 - f) : NaN;
    const tail = ` [${'#'.repeat(full)}${'.'.repeat(BAR - full)}] ${(100 * f).toFixed(0)}% ${secs(elapsed)}${Number.isFinite(eta) ? ` eta ${secs(eta)}` : ''}`;
    // Never wrap: a wrapped line cannot be redrawn in place.
    const room = (process.stderr.columns ?? 120) - tail.length - 3;
    const label = this.label.length <= room ? this.label : `${this.label.slice(0, Math.max(0, room - 1))}…`;
    process.stderr.write(`\r\x1b[2K  ${label}${tail}`);
  }
}

/** A line of status on stderr. */
export function note(msg: string): void {
  process.stderr.write(`${msg}\n`);
}

function secs(ms: number): string {
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : ms < 600_000 ? `${Math.round(ms / 1000)}s` : `${Math.floor(ms / 60_000)}m${Math.round((ms % 60_000) / 1000)}s`;
}
