/**
 * What deploy/ gives monitoring: the Prometheus alert rules pass `promtool check rules` and their
 * unit tests (`promtool test rules`), the Grafana dashboard is well formed and its queries parse,
 * and every metric the rules and the dashboard name is one a live process exports (an embedded
 * server, and a Redis-mode process running a gateway and a matcher).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { startServer } from '../../services/process/server.js';
import { useRedisServer } from '../support/redis-deployment.js';

const DEPLOY = fileURLToPath(new URL('../../../deploy/', import.meta.url));
const RULES = join(DEPLOY, 'prometheus/ambit-alerts.yaml');
const DASHBOARD = join(DEPLOY, 'grafana/ambit-dashboard.json');

function promtoolMissing(): string | null {
  // CI installs Debian's prometheus package: there a missing promtool fails instead of skipping.
  if (process.env.AMBIT_REQUIRE_TOOLS === '1') return null;
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return null;
  } catch {
    return 'no promtool (Debian package prometheus)';
  }
}

function promtool(args: string[], cwd: string): string {
  try {
    return execFileSync('promtool', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    assert.fail(`promtool ${args.join(' ')} failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

interface Panel {
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: { expr: string; datasource: { uid: string } }[];
}
const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { uid: string; panels: Panel[]; templating: { list: { name: string }[] }; __inputs: { name: string }[] };
const dashboardExprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
const ruleExprs = [...readFileSync(RULES, 'utf8').matchAll(/^\s+expr: (.+)$/gm)].map((m) => m[1]);
/** The queries as Prometheus sees them once Grafana fills in its variables. */
const concrete = (e: string) => e.replaceAll('$__rate_interval', '1m').replaceAll('$job', '.*');
const metricNames = (exprs: string[]) => new Set(exprs.flatMap((e) => [...e.matchAll(/\bambit_[a-z_]+/g)].map((m) => m[0])));

describe('monitoring: Prometheus rules and the Grafana dashboard', () => {
  const missing = promtoolMissing();

  it('the alert rules pass promtool check rules and their unit tests', { skip: missing ?? false }, () => {
    assert.match(promtool(['check', 'rules', 'ambit-alerts.yaml'], join(DEPLOY, 'prometheus')), /SUCCESS: 11 rules found/);
    assert.match(promtool(['test', 'rules', 'ambit-alerts.test.yaml'], join(DEPLOY, 'prometheus')), /SUCCESS/);
  });

  it('every dashboard query parses (checked by promtool as recording rules)', { skip: missing ?? false }, () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-dash-'));
    try {
      const rules = dashboardExprs.map((e, i) => `      - record: ambit:dashboard_${i}\n        expr: ${JSON.stringify(concrete(e))}`).join('\n');
      writeFileSync(join(dir, 'dashboard-rules.yaml'), `groups:\n  - name: dashboard\n    rules:\n${rules}\n`);
      assert.match(promtool(['check', 'rules', 'dashboard-rules.yaml'], dir), new RegExp(`SUCCESS: ${dashboardExprs.length} rules found`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the dashboard is well formed: a datasource input, a job variable, panels that do not overlap, each query on that datasource', () => {
    assert.equal(dashboard.uid, 'ambit-overview');
    assert.deepEqual(dashboard.__inputs.map((i) => i.name), ['DS_PROMETHEUS']);
    assert.deepEqual(dashboard.templating.list.map((v) => v.name), ['job']);
    assert.ok(dashboardExprs.length >= 20, `${dashboardExprs.length} queries`);
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      const g = p.gridPos;
      assert.ok(g.x >= 0 && g.w > 0 && g.x + g.w <= 24, `${p.title}: within the 24 columns`);
      for (let x = g.x; x < g.x + g.w; x++) {
        for (let y = g.y; y < g.y + g.h; y++) {
          assert.ok(!cells.has(`${x},${y}`), `${p.title} overlaps another panel at ${x},${y}`);
          cells.add(`${x},${y}`);
        }
      }
      if (p.type === 'row') continue;
      assert.ok((p.targets ?? []).length > 0, `${p.title} has a query`);
      for (const t of p.targets!) assert.equal(t.datasource.uid, '${DS_PROMETHEUS}');
    }
  });
});

describe('monitoring: the metrics the rules and the dashboard use exist', () => {
  const { missing, url } = useRedisServer();

  it('every metric they name is exported by an embedded server or a Redis-mode gateway with its matcher', { skip: missing ?? false, timeout: 60_000 }, async () => {
    const exported = new Set<string>();
    const scrape = async (port: number | null) => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      for (const line of text.split('\n')) if (line !== '' && !line.startsWith('#')) exported.add(line.split(/[{ ]/)[0]);
    };
    const embedded = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', dev: true, shutdownGraceS: 1 });
    try {
      await scrape(embedded.metricsPort);
    } finally {
      await embedded.stop();
    }
    const redis = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', dev: true, shutdownGraceS: 1, redisUrl: url(), redisPrefix: 'monitoring:' });
    try {
      await scrape(redis.metricsPort);
    } finally {
      await redis.stop();
    }
    const used = metricNames([...ruleExprs, ...dashboardExprs]);
    assert.ok(used.size >= 20, `${used.size} metrics used`);
    for (const name of used) assert.ok(exported.has(name), `${name} is used by the rules or the dashboard but no process exports it`);
  });
});
