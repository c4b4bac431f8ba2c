/** Debian's chromium driven by playwright-core, for the tests that need a real browser. */
import { execFileSync } from 'node:child_process';
import { type Browser, chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** Why a browser test cannot run here (null: it can). AMBIT_REQUIRE_TOOLS=1 makes a missing browser a failure instead. */
export function chromiumMissing(): string | null {
  if (process.env.AMBIT_REQUIRE_TOOLS === '1') return null;
  try {
    execFileSync(CHROMIUM, ['--version'], { stdio: 'ignore' });
    return null;
  } catch {
    return `no ${CHROMIUM} (Debian package chromium)`;
  }
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
