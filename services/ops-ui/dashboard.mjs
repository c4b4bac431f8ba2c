// The ops dashboard's page: asks for an ops token, then reads one sample a second from
// /dashboard/api/live (server-sent events over fetch, so the token travels in a header, never in
// a URL) and draws it with uPlot.
const $ = (id) => document.getElementById(id);
const KEY = 'ambit-ops-token';
const WINDOW = 300;
const fmt = new Intl.NumberFormat('en', { maximumFractionDigits: 1 });
const int = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });
const mib = (b) => b / 1048576;
let charts = null;
let abort = null;
let retry = null;

/** Tries again later with the token of now (none after signing out). */
function again(ms) {
  clearTimeout(retry);
  retry = setTimeout(() => {
    const token = sessionStorage.getItem(KEY);
    if (token) void connect(token);
  }, ms);
}

function state(text, cls) {
  const s = $('state');
  s.textContent = text;
  s.className = `badge ${cls ?? ''}`;
}

function showLogin(error) {
  clearTimeout(retry);
  if (abort !== null) abort.abort();
  sessionStorage.removeItem(KEY);
  $('main').hidden = true;
  $('signout').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = error ?? '';
  state(error ? 'signed out' : 'token needed');
}

function makeCharts() {
  const width = (el) => Math.max(300, el.clientWidth - 16);
  const chart = (el, series, scale) =>
    new uPlot({ width: width($(el)), height: 220, series: [{}, ...series], scales: { x: { time: true }, y: scale ?? {} }, axes: [{}, { size: 60 }] }, [[], ...series.map(() => [])], $(el));
  return {
    rates: chart('c-rates', [
      { label: 'events', stroke: '#2e90fa', width: 2 },
      { label: 'notifications', stroke: '#12b76a', width: 2 },
      { label: 'location updates', stroke: '#f79009', width: 2 },
    ]),
    latency: chart('c-latency', [
      { label: 'p50', stroke: '#12b76a', width: 2 },
      { label: 'p90', stroke: '#f79009', width: 2 },
      { label: 'p99', stroke: '#f04438', width: 2 },
    ]),
    streams: chart('c-streams', [
      { label: 'connected', stroke: '#2e90fa', width: 2 },
      { label: 'send queue', stroke: '#f04438', width: 2 },
      { label: 'held back', stroke: '#7a5af8', width: 2 },
    ]),
    memory: chart('c-memory', [
      { label: 'process RSS', stroke: '#2e90fa', width: 2 },
      { label: 'heap', stroke: '#12b76a', width: 2 },
      { label: 'engine', stroke: '#f79009', width: 2 },
      { label: 'GPU', stroke: '#7a5af8', width: 2 },
    ]),
  };
}

const samples = [];
function draw() {
  const t = samples.map((s) => s.at / 1000);
  const col = (f) => samples.map(f);
  charts.rates.setData([t, col((s) => s.rates.events), col((s) => s.rates.notifications), col((s) => s.rates.locations)]);
  charts.latency.setData([t, col((s) => s.latencyMs.p50), col((s) => s.latencyMs.p90), col((s) => s.latencyMs.p99)]);
  charts.streams.setData([t, col((s) => s.gauges.connectedDevices), col((s) => s.gauges.sendQueue), col((s) => s.gauges.streamsHeldBack)]);
  charts.memory.setData([t, col((s) => mib(s.memory.rss)), col((s) => mib(s.memory.heapUsed)), col((s) => mib(s.memory.engine)), col((s) => mib(s.memory.gpu))]);
}

let lastMap = null;
// The map: cells on an equirectangular projection fitted to what is shown (longitude scaled by the
// cosine of the middle latitude), shade by count on a log scale; no tiles (none can be fetched).
function drawMap(map) {
  if (map === null || map === lastMap) return;
  lastMap = map;
  const cv = $('map');
  const ctx = cv.getContext('2d');
  ctx.clearRect(0, 0, cv.width, cv.height);
  const all = [...map.devices, ...map.events];
  $('map-window').textContent = String(Math.round(map.windowMs / 60000));
  $('map-scale').textContent = all.length === 0 ? '(nothing yet)' : `(cells of ${map.cellDeg}°)`;
  if (all.length === 0) return;
  const half = map.cellDeg / 2;
  const minLat = Math.min(...all.map((c) => c.lat)) - half;
  const maxLat = Math.max(...all.map((c) => c.lat)) + half;
  const minLon = Math.min(...all.map((c) => c.lon)) - half;
  const maxLon = Math.max(...all.map((c) => c.lon)) + half;
  const k = Math.cos((((minLat + maxLat) / 2) * Math.PI) / 180);
  const pad = 20;
  const scale = Math.min((cv.width - 2 * pad) / Math.max((maxLon - minLon) * k, 1e-9), (cv.height - 2 * pad) / Math.max(maxLat - minLat, 1e-9));
  const x = (lon) => pad + (lon - minLon) * k * scale;
  const y = (lat) => cv.height - pad - (lat - minLat) * scale;
  const side = Math.max(2, map.cellDeg * scale * Math.min(k, 1));
  const layer = (cells, rgb) => {
    const top = Math.log1p(Math.max(...cells.map((c) => c.n), 1));
    for (const c of cells) {
      ctx.fillStyle = `rgba(${rgb}, ${0.25 + (0.75 * Math.log1p(c.n)) / top})`;
      ctx.fillRect(x(c.lon) - side / 2, y(c.lat) - side / 2, side, side);
    }
  };
  layer(map.devices, '46, 144, 250');
  layer(map.events, '240, 68, 56');
}

function dl(el, rows) {
  el.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = String(v);
    return [dt, dd];
  }));
}

function show(s) {
  samples.push(s);
  if (samples.length > WINDOW) samples.shift();
  $('process').textContent = `${s.role} · pid ${s.pid} · up ${s.uptimeS} s · ${s.mode}`;
  if (s.ready === null) state('no checks');
  else state(s.ready.ready ? 'ready' : s.ready.draining ? 'draining' : 'NOT READY', s.ready.ready ? 'ok' : 'bad');
  $('t-events').textContent = fmt.format(s.rates.events);
  $('t-notifications').textContent = fmt.format(s.rates.notifications);
  $('t-locations').textContent = fmt.format(s.rates.locations);
  $('t-p99').textContent = s.latencyMs.p99 === null ? '–' : `${fmt.format(s.latencyMs.p99)} ms`;
  $('t-events-total').textContent = int.format(s.totals.eventsPublished);
  $('t-connected').textContent = int.format(s.gauges.connectedDevices);
  $('t-queue').textContent = int.format(s.gauges.sendQueue);
  $('t-dropped').textContent = int.format(s.totals.dropped);
  const rows = Object.entries(s.ready?.checks ?? {}).map(([name, c]) => {
    const tr = document.createElement('tr');
    const a = document.createElement('td');
    a.textContent = c.ok ? 'ok' : c.required ? 'FAIL' : 'warn';
    a.className = c.ok ? 'ok' : c.required ? 'bad' : 'warn';
    const b = document.createElement('td');
    b.textContent = name;
    const d = document.createElement('td');
    d.textContent = c.detail;
    tr.append(a, b, d);
    return tr;
  });
  $('checks').replaceChildren(...rows);
  drawMap(s.map);
  dl($('engine'), [
    ['engine', `${s.engine}${s.enginePath ? ` (${s.enginePath})` : ''}`],
    ['detail', s.engineDetail],
    ['subscriptions', int.format(s.gauges.subscriptions)],
    ['filters', int.format(s.gauges.filters)],
    ['devices', int.format(s.gauges.devices)],
    ['engine memory', `${fmt.format(mib(s.memory.engine))} MiB`],
    ...gpuRows(s.gpu ?? null),
  ]);
  drawShards(s.shardTable ?? null);
  const m = s.matchers;
  dl($('shards'), [
    ['matchers alive', m.alive === null ? 'n/a (embedded)' : m.alive ? 'yes' : 'NO'],
    ...(m.leading === null ? [] : [['leading here', m.leading]]),
    ...(m.epoch === null ? [] : [['lease epoch', m.epoch]]),
    ...(s.shards === null
      ? [['shards', 'not sharded by space']]
      : [
          ['shards alive', `${s.shards.alive} of ${s.shards.geo + s.shards.wide}`],
          ['shard map version', s.shards.mapVersion],
          ['cells moving', s.shards.moving ? 'yes' : 'no'],
        ]),
  ]);
}

/** The GPU engine's paths: the share of events it matched, fallbacks, losses (none for a CPU engine). */
function gpuRows(g) {
  if (g === null) return [];
  const all = g.gpuEvents + g.cpuEvents;
  return [
    ['on the GPU', all === 0 ? 'no events yet' : `${fmt.format((100 * g.gpuEvents) / all)}% of ${int.format(all)} events`],
    ['CPU fallbacks', `${int.format(g.fallbackEvents)} events${g.cpuReason ? ` (now: ${g.cpuReason})` : ''}`],
    ['GPU overflows', `${int.format(g.overflowEvents)} events`],
    ['device losses', `${int.format(g.deviceLosses)} (${int.format(g.errors)} GPU errors, ${int.format(g.rebuilds)} rebuilds)`],
  ];
}

/** One row per matcher partition or shard (Redis mode); the panel hides without them. */
function drawShards(table) {
  const panel = $('shard-panel');
  panel.hidden = table === null;
  if (table === null) return;
  const rows = table.map((x) => {
    const tr = document.createElement('tr');
    const cells = [
      [x.name, ''],
      [x.alive ? x.matcherId : 'NO LEADER', x.alive ? 'ok' : 'bad'],
      [x.alive ? String(x.epoch) : '–', ''],
      [int.format(x.subscriptions), ''],
      [int.format(x.devices), ''],
      [int.format(x.streamLength), ''],
      [x.offset, ''],
      [`${int.format(x.handOversIn)} / ${int.format(x.handOversOut)}`, ''],
    ];
    for (const [text, cls] of cells) {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls !== '') td.className = cls;
      tr.append(td);
    }
    return tr;
  });
  panel.querySelector('tbody').replaceChildren(...rows);
}

async function connect(token) {
  if (abort !== null) abort.abort();
  const mine = new AbortController();
  abort = mine;
  let res;
  try {
    res = await fetch('/dashboard/api/live', { headers: { authorization: `Bearer ${token}` }, signal: mine.signal });
  } catch (err) {
    if (mine.signal.aborted) return;
    state('unreachable', 'bad');
    again(2000);
    return;
  }
  if (res.status === 401 || res.status === 403) {
    const body = await res.json().catch(() => ({ error: res.statusText }));
    showLogin(`refused: ${body.error}`);
    return;
  }
  if (!res.ok) {
    state(`error ${res.status}`, 'bad');
    again(2000);
    return;
  }
  $('login').hidden = true;
  $('main').hidden = false;
  $('signout').hidden = false;
  if (charts === null) charts = makeCharts();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const event = /^event: (.*)$/m.exec(frame)?.[1] ?? 'message';
        const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        if (data === '') continue;
        if (event === 'history') {
          samples.length = 0;
          for (const s of JSON.parse(data)) show(s);
        } else show(JSON.parse(data));
        draw();
      }
    }
  } catch (err) {
    if (mine.signal.aborted) return;
  }
  if (mine.signal.aborted) return;
  state('reconnecting', 'bad');
  again(1000);
}

$('login').addEventListener('submit', (e) => {
  e.preventDefault();
  const token = $('token').value.trim();
  if (token === '') return;
  sessionStorage.setItem(KEY, token);
  $('token').value = '';
  $('login-error').textContent = '';
  void connect(token);
});
$('signout').addEventListener('click', () => showLogin());
const saved = sessionStorage.getItem(KEY);
if (saved) void connect(saved);
else showLogin();
