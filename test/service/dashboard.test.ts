/**
 * The ops dashboard in a real browser (Debian's chromium driven by playwright-core) against a live
 * server under load: it asks for a token and refuses an expired one and one without the ops scope
 * (the server's reason on the page), then draws its charts, and its numbers follow the traffic
 * and agree with /metrics. With AMBIT_SCREENSHOT_DIR set it leaves a screenshot there
 * (docs/dashboard.png is made so).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { chromiumMissing, launchChromium } from '../support/browser.js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { type RunningServer, startServer } from '../../services/process/server.js';
import { AmbitDevice, AmbitPublisher } from '../../sdk/index.js';
import { redisServerMissing, startRedisServer } from '../support/redis-server.js';
import client from 'prom-client';
import { Dashboard } from '../../services/process/dashboard.js';
import { Metrics } from '../../services/process/metrics.js';
import type { HubStats } from '../../services/hub/port.js';

const SECRET = 'dashboard-test-secret-0123456789abcdef0123';

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `${name} in /metrics`);
  return Number(m[1]);
}

describe('ops dashboard in a browser', { skip: chromiumMissing() ?? false, timeout: 120_000 }, () => {
  let server: RunningServer;
  let browser: Browser;
  let base: string;
  const authority = new TokenAuthority(SECRET);

  before(async () => {
    server = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', tokenSecret: SECRET, shutdownGraceS: 1, logLevel: 'warn' });
    base = `http://127.0.0.1:${server.metricsPort}`;
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it('refuses an expired token and one without the ops scope, naming why', async () => {
    const page = await browser.newPage();
    try {
      await page.goto(`${base}/dashboard`);
      await page.waitForSelector('#login:not([hidden])');
      const expired = new TokenAuthority(SECRET, () => Date.now() / 1000 - 7200).issue({ subject: 'late', scopes: [SCOPES.ops], ttlSeconds: 60 });
      await page.fill('#token', expired);
      await page.click('#login button[type=submit]');
      await page.waitForFunction("document.getElementById('login-error').textContent !== ''");
      assert.equal(await page.textContent('#login-error'), 'refused: token has expired');
      assert.equal(await page.isHidden('#main'), true);
      await page.fill('#token', authority.issue({ subject: 'dev', scopes: [SCOPES.device] }));
      await page.click('#login button[type=submit]');
      await page.waitForFunction("/ops/.test(document.getElementById('login-error').textContent)");
      assert.match((await page.textContent('#login-error'))!, /^refused: .*ops/);
      assert.equal(await page.isHidden('#main'), true);
    } finally {
      await page.close();
    }
  });

  it('with an ops token: charts draw, numbers follow the traffic and agree with /metrics, readiness and the engine show', async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const pub = new AmbitPublisher(`127.0.0.1:${server.port}`, authority.issue({ subject: 'pub', scopes: [SCOPES.publish] }));
    const devices: AmbitDevice[] = [];
    try {
      for (let i = 0; i < 5; i++) {
        const d = await AmbitDevice.connect(`127.0.0.1:${server.port}`, authority.issue({ subject: `dash-${i}`, scopes: [SCOPES.device] }));
        await d.subscribe({ id: 'all', filters: [{ constraints: [{ name: 'kind', op: 'eq', value: 'demo' }], area: { radiusM: 5000 } }] });
        d.updateLocation(45.46 + i * 0.001, 9.19);
        devices.push(d);
        void (async () => {
          for await (const _ of d.notifications()) {
            // read and acknowledge
          }
        })().catch(() => {});
      }
      await page.goto(`${base}/dashboard`);
      await page.fill('#token', authority.issue({ subject: 'ops', scopes: [SCOPES.ops] }));
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#main:not([hidden])');
      assert.equal(await page.textContent('#state'), 'ready');
      // Four charts, each a canvas drawn by uPlot.
      await page.waitForFunction("document.querySelectorAll('figure .uplot canvas').length === 4");
      // Traffic: the events-per-second tile moves off zero while publishing.
      let published = 0;
      let sawRate = false;
      for (let round = 0; round < 40 && !sawRate; round++) {
        for (let i = 0; i < 20; i++) await pub.publish({ id: `ev-${published++}`, lat: 45.46, lon: 9.19, attributes: { kind: 'demo' } });
        const t = Number((await page.textContent('#t-events'))!.replace(/,/g, ''));
        sawRate = t > 0;
      }
      assert.ok(sawRate, 'the events/s tile showed the publishing');
      // After the traffic: the total on the page is the one /metrics reports.
      await page.waitForFunction(`document.getElementById('t-events-total').textContent === ${JSON.stringify(new Intl.NumberFormat('en').format(published))}`, undefined, { timeout: 10_000 });
      const m = await (await fetch(`${base}/metrics`)).text();
      assert.equal(metric(m, 'ambit_events_published_total'), published);
      assert.equal(await page.textContent('#t-connected'), String(metric(m, 'ambit_connected_devices')));
      // The notifications/s and p99 tiles had something to show.
      await page.waitForFunction("document.getElementById('t-p99').textContent !== '–'");
      assert.match((await page.textContent('#checks'))!, /okhubembedded: fast/);
      assert.match((await page.textContent('#engine'))!, /subscriptions5/);
      assert.match((await page.textContent('#shards'))!, /not sharded by space/);
      assert.equal(await page.isHidden('#shard-panel'), true, 'no partitions or shards: no table');
      // The map: devices connected here and the events accepted here, binned (refreshed every 5 s).
      const ops = { authorization: `Bearer ${authority.issue({ subject: 'ops', scopes: [SCOPES.ops] })}` };
      type Cells = { n: number }[];
      const sum = (c: Cells) => c.reduce((t, x) => t + x.n, 0);
      let map = null as { devices: Cells; events: Cells } | null;
      for (let i = 0; i < 100 && (map === null || sum(map.events) !== published || sum(map.devices) !== 5); i++) {
        if (i > 0) await page.waitForTimeout(100);
        map = ((await (await fetch(`${base}/dashboard/api/snapshot`, { headers: ops })).json()) as { map: typeof map }).map;
      }
      assert.ok(map !== null);
      assert.equal(sum(map.devices), 5, 'the five devices at their positions');
      assert.equal(sum(map.events), published, 'every event published here');
      await page.waitForFunction("/cells of/.test(document.getElementById('map-scale').textContent)", undefined, { timeout: 10_000 });
      const painted = await page.evaluate("(() => { const c = document.getElementById('map'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()");
      assert.ok((painted as number) > 0, 'the map is drawn');
      if (process.env.AMBIT_SCREENSHOT_DIR) await page.screenshot({ path: join(process.env.AMBIT_SCREENSHOT_DIR, 'dashboard.png'), fullPage: true });
    } finally {
      pub.close();
      await Promise.all(devices.map((d) => d.close()));
      await page.close();
    }
  });
});

describe('ops dashboard of a Redis deployment with matcher partitions', { skip: chromiumMissing() ?? redisServerMissing() ?? false, timeout: 120_000 }, () => {
  it('shows a row per partition: its leader, epoch, subscriptions and devices', async () => {
    const redis = await startRedisServer();
    const authority = new TokenAuthority(SECRET);
    let server: RunningServer | null = null;
    let browser: Browser | null = null;
    const devices: AmbitDevice[] = [];
    try {
      server = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', tokenSecret: SECRET, shutdownGraceS: 1, logLevel: 'warn', redisUrl: redis.url, matcherPartitions: 2 });
      for (let i = 0; i < 6; i++) {
        const d = await AmbitDevice.connect(`127.0.0.1:${server.port}`, authority.issue({ subject: `shard-dev-${i}`, scopes: [SCOPES.device] }));
        await d.subscribe({ id: 'all', filters: [{ constraints: [{ name: 'kind', op: 'eq', value: 'demo' }] }] });
        devices.push(d);
      }
      browser = await launchChromium();
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      await page.goto(`http://127.0.0.1:${server.metricsPort}/dashboard`);
      await page.fill('#token', authority.issue({ subject: 'ops', scopes: [SCOPES.ops] }));
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#shard-panel:not([hidden])');
      // The matchers refresh their records on a timer: the table follows within a few samples.
      await page.waitForFunction(
        "(() => { const rows = [...document.querySelectorAll('#shard-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent)); return rows.length === 2 && rows.every((r) => r[1] !== 'NO LEADER') && rows.reduce((t, r) => t + Number(r[3].replace(/,/g, '')), 0) === 6; })()",
        undefined,
        { timeout: 20_000 },
      );
      const rows = (await page.evaluate("[...document.querySelectorAll('#shard-table tbody tr')].map((r) => [...r.children].map((c) => c.textContent))")) as string[][];
      assert.deepEqual(rows.map((r) => r[0]), ['partition 0', 'partition 1']);
      for (const r of rows) assert.match(r[1], /\S/, 'a leader');
      if (process.env.AMBIT_SCREENSHOT_DIR) await page.locator('#shard-panel').screenshot({ path: join(process.env.AMBIT_SCREENSHOT_DIR, 'dashboard-shards.png') });
    } finally {
      await Promise.all(devices.map((d) => d.close()));
      await browser?.close();
      await server?.stop();
      await redis.stop();
    }
  });
});

describe('ops dashboard samples', () => {
  it('latency quantiles come from the window of cumulative buckets, interpolated within a bucket; none without publishes', async () => {
    const { quantileMs } = await import('../../services/process/dashboard.js');
    // 100 publishes: 50 under 1 ms, 40 more under 5 ms, 10 more under 10 ms.
    const b = [
      { le: 0.001, count: 50 },
      { le: 0.005, count: 90 },
      { le: 0.01, count: 100 },
      { le: Infinity, count: 100 },
    ];
    assert.equal(quantileMs(b, 0.5), 1);
    assert.equal(quantileMs(b, 0.7), 3);
    assert.ok(Math.abs(quantileMs(b, 0.99)! - 9.5) < 1e-9);
    assert.equal(quantileMs([{ le: 0.001, count: 0 }, { le: Infinity, count: 0 }], 0.5), null);
    // Beyond the last finite bucket: its bound (no more is known).
    assert.equal(quantileMs([{ le: 0.001, count: 1 }, { le: Infinity, count: 10 }], 0.99), 1);
  });
});

describe("ops dashboard: the engine's paths", () => {
  it("reports the GPU engine's paths from its figures, and none for a CPU engine", async () => {
    const registry = new client.Registry();
    const publishSeconds = new client.Histogram({ name: 'p', help: 'p', registers: [registry] });
    const counters = new Metrics(null, 'all').counters;
    let extra: HubStats['extra'] = { path: 'gpu', gpuEvents: 900, cpuEvents: 100, fallbackEvents: 7, overflowEvents: 2, deviceLosses: 1, gpuErrors: 3, rebuilds: 1, cpuReason: '' };
    const stats = async (): Promise<HubStats> => ({ mode: 'embedded', engine: 'gpu', engineDetail: 'test', subscriptions: 0, filters: 0, devices: 0, eventsPublished: 0, notifications: 0, locationUpdates: 0, notificationsDropped: 0, engineMemoryBytes: 0, extra });
    const dash = new Dashboard({ role: 'all', counters, publishSeconds, stats, readiness: null, density: () => null }, () => null);
    assert.deepEqual((await dash.sample()).gpu, { gpuEvents: 900, cpuEvents: 100, fallbackEvents: 7, overflowEvents: 2, deviceLosses: 1, errors: 3, rebuilds: 1, cpuReason: '' });
    extra = { path: '' };
    assert.equal((await dash.sample()).gpu, null);
    dash.close();
  });
});

describe('ops dashboard data', () => {
  it('the live stream sends its history then samples, and ends when the token that opened it expires', async () => {
    const server = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', tokenSecret: SECRET, shutdownGraceS: 1, logLevel: 'warn' });
    try {
      const token = new TokenAuthority(SECRET).issue({ subject: 'brief', scopes: [SCOPES.ops], ttlSeconds: 2 });
      const res = await fetch(`http://127.0.0.1:${server.metricsPort}/dashboard/api/live`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'text/event-stream');
      let text = '';
      const decoder = new TextDecoder();
      for await (const chunk of res.body!) text += decoder.decode(chunk as Uint8Array, { stream: true });
      // The stream ended by itself (the token's expiry): what came before is whole.
      const frames = text.split('\n\n').filter((f) => f !== '');
      assert.match(frames[0], /^event: history\ndata: \[/);
      const samples = frames.slice(1).map((f) => JSON.parse(f.replace(/^data: /, '')) as { role: string; ready: { ready: boolean } });
      assert.ok(samples.length >= 1, 'samples came while the token was valid');
      assert.deepEqual([samples[0].role, samples[0].ready.ready], ['all', true]);
      const late = await fetch(`http://127.0.0.1:${server.metricsPort}/dashboard/api/live`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(late.status, 401);
      assert.deepEqual(await late.json(), { error: 'token has expired' });
    } finally {
      await server.stop();
    }
  });
});
