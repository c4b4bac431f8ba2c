/**
 * The SDK's browser entry (sdk/web.ts) in real Chromium: the browser demo's page (demo/web/,
 * served by bench/demo-web.ts, the SDK and protobuf-es as unbundled ES modules) runs AmbitDevice
 * objects over WebSocket against a live node, through a TCP proxy the test can cut. They receive
 * exactly the events within their reach, in order; when the network drops they reconnect and
 * resume, and what was published meanwhile arrives once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { type WebDemo, startWebDemo } from '../../bench/demo-web.js';
import { haversineM } from '../../src/model/geo.js';
import { chromiumMissing, launchChromium } from '../support/browser.js';
import { TcpProxy, waitFor } from './support.js';
import { AmbitOps } from '../../sdk/index.js';
import { SCOPES } from '../../services/edge/auth.js';

const M_PER_DEG = 111_195;
const C = { lat: 45.4642, lon: 9.19 };
const north = (m: number) => ({ lat: C.lat + m / M_PER_DEG, lon: C.lon });
const east = (m: number) => ({ lat: C.lat, lon: C.lon + m / (M_PER_DEG * Math.cos((C.lat * Math.PI) / 180)) });
/** Three devices, still: one at the centre, one 800 m north, one 5 km east (reach 500 m each). */
const DEVICES = [
  { id: 'web-centre', ...C },
  { id: 'web-north', ...north(800) },
  { id: 'web-east', ...east(5000) },
];

/** A position the node reports is exactly `p` (both coordinates). */
const at = (loc: { lat: number; lon: number } | null | undefined, p: { lat: number; lon: number }): boolean => loc?.lat === p.lat && loc?.lon === p.lon;

type PageDemo = { devices: Record<string, { state: string; reconnects: number; received: string[]; subscribed?: boolean }>; errors: string[] };
/** The page's global, as the functions run in the browser see it. */
declare const window: { demo: PageDemo };

describe('the SDK in a browser: the demo page over WebSocket', { skip: chromiumMissing() ?? false, timeout: 120_000 }, () => {
  let demo: WebDemo;
  let proxy: TcpProxy;
  let browser: Browser;
  let page: Page;
  const consoleErrors: string[] = [];
  const state = (): Promise<PageDemo> => page.evaluate(() => window.demo);
  /** The ids each device should have been told of, from where the devices are. */
  const within = (events: { id: string; lat: number; lon: number }[]): Record<string, string[]> =>
    Object.fromEntries(DEVICES.map((d) => [d.id, events.filter((e) => haversineM(d.lat, d.lon, e.lat, e.lon) <= demo.radiusM).map((e) => e.id)]));

  before(async () => {
    demo = await startWebDemo({ devices: DEVICES, rate: 0, walk: false, radiusM: 500 });
    proxy = await TcpProxy.start(demo.server.webPort!);
    demo.wsUrl = `ws://${proxy.address}`;
    browser = await launchChromium();
    page = await browser.newPage();
    page.on('console', (m) => {
      // Chromium reports a refused WebSocket as a console error: expected while the proxy refuses.
      if (m.type() === 'error' && !/WebSocket connection to/.test(m.text())) consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push(e.message));
    await page.goto(demo.url);
    await page.waitForFunction((n) => {
      const d = window.demo;
      return d !== undefined && Object.values(d.devices).filter((x) => x.subscribed === true).length === n;
    }, DEVICES.length);
  });

  after(async () => {
    await browser?.close();
    await proxy?.close();
    await demo?.stop();
  });

  it('devices in the page get exactly the events within their reach, in order', async () => {
    // Each device's position reached the node (its location update follows the subscribe).
    const ops = new AmbitOps(`127.0.0.1:${demo.server.port}`, demo.server.authority!.issue({ subject: 'ops', scopes: [SCOPES.ops] }));
    try {
      for (const d of DEVICES) await waitFor(`${d.id}'s position`, async () => at((await ops.deviceSubscriptions(d.id)).location, d));
    } finally {
      ops.close();
    }
    const events = [
      { id: 'b-centre', ...C },
      { id: 'b-north', ...north(850) },
      { id: 'b-between', ...north(400) },
      { id: 'b-nowhere', ...east(2500) },
      { id: 'b-east', ...east(4900) },
    ];
    const want = within(events);
    assert.deepEqual({ ...want }, { 'web-centre': ['b-centre', 'b-between'], 'web-north': ['b-north', 'b-between'], 'web-east': ['b-east'] });
    for (const e of events) assert.equal(await demo.publish({ id: e.id, lat: e.lat, lon: e.lon, attributes: { type: 'accident', severity: 3 } }), DEVICES.filter((d) => want[d.id].includes(e.id)).length, e.id);
    await page.waitForFunction((w) => {
      const d = window.demo.devices;
      return Object.entries(w).every(([id, ids]) => d[id].received.length >= (ids as string[]).length);
    }, want);
    const s = await state();
    for (const d of DEVICES) assert.deepEqual(s.devices[d.id].received, want[d.id], d.id);
    // The page shows them too.
    assert.equal(await page.locator('li[data-event="b-between"]').count(), 2);
    // The device's unary call from the page: Connect on the web port, from another origin (CORS).
    assert.deepEqual(await page.evaluate(() => (window.demo.devices['web-centre'] as unknown as { list(): Promise<string[]> }).list()), ['accidents']);
    assert.deepEqual(s.errors, []);
  });

  it('a device that moves gets what is near its new place', async () => {
    const before = (await state()).devices['web-east'].received.length;
    await page.evaluate(([lat, lon]) => (window.demo.devices['web-east'] as unknown as { move(lat: number, lon: number): void }).move(lat, lon), [C.lat, C.lon] as const);
    const ops = new AmbitOps(`127.0.0.1:${demo.server.port}`, demo.server.authority!.issue({ subject: 'ops', scopes: [SCOPES.ops] }));
    try {
      // Both coordinates: web-east's old place shares C's latitude.
      await waitFor("web-east's new position", async () => at((await ops.deviceSubscriptions('web-east')).location, C));
    } finally {
      ops.close();
    }
    assert.equal(await demo.publish({ id: 'b-moved', lat: C.lat, lon: C.lon, attributes: { type: 'accident', severity: 2 } }), 2, 'web-centre and the moved web-east');
    await page.waitForFunction((n) => window.demo.devices['web-east'].received.length > n, before);
    assert.deepEqual((await state()).devices['web-east'].received.slice(before), ['b-moved']);
    // Back where it was, for the next test's arithmetic.
    await page.evaluate(([lat, lon]) => (window.demo.devices['web-east'] as unknown as { move(lat: number, lon: number): void }).move(lat, lon), [DEVICES[2].lat, DEVICES[2].lon] as const);
    const ops2 = new AmbitOps(`127.0.0.1:${demo.server.port}`, demo.server.authority!.issue({ subject: 'ops', scopes: [SCOPES.ops] }));
    try {
      await waitFor("web-east's old position", async () => at((await ops2.deviceSubscriptions('web-east')).location, DEVICES[2]));
    } finally {
      ops2.close();
    }
  });

  it('a dropped network: the devices reconnect and resume, and what was published meanwhile arrives once', async () => {
    const before = await state();
    proxy.refuse = true;
    proxy.cut();
    await page.waitForFunction(() => Object.values(window.demo.devices).every((d) => d.state === 'reconnecting'));
    const during = [{ id: 'b-during-1', ...C }, { id: 'b-during-2', ...north(800) }];
    for (const e of during) await demo.publish({ id: e.id, lat: e.lat, lon: e.lon, attributes: { type: 'accident', severity: 4 } });
    proxy.refuse = false;
    await page.waitForFunction(() => Object.values(window.demo.devices).every((d) => d.state === 'connected' && d.reconnects === 1));
    const want = within(during);
    await page.waitForFunction(
      ([w, b]) => {
        const d = window.demo.devices;
        return Object.entries(w).every(([id, ids]) => d[id].received.length >= (b as Record<string, number>)[id] + (ids as string[]).length);
      },
      [want, Object.fromEntries(DEVICES.map((d) => [d.id, before.devices[d.id].received.length]))] as const,
    );
    const s = await state();
    for (const d of DEVICES) assert.deepEqual(s.devices[d.id].received, [...before.devices[d.id].received, ...want[d.id]], d.id);
    assert.deepEqual(s.errors, []);
    assert.deepEqual(consoleErrors, []);
  });
});
