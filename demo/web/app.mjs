// The browser demo's page (bench/demo-web.ts serves it): simulated devices, each an AmbitDevice of
// the SDK's browser entry over WebSocket, subscribed to accidents within their reach; a map of
// where they are and of the events they were told of, and each device's notifications in order.
// The page keeps what it saw in `window.demo` for tests to read.
import { AmbitDevice } from '/sdk/web.js';

const cfg = await (await fetch('/config.json')).json();
const svg = document.getElementById('map');
const list = document.getElementById('devices');
const statusLine = document.getElementById('status');
const NS = 'http://www.w3.org/2000/svg';

/** What tests read: per device its state, reconnects and the event ids it was told of, in order; and page errors. */
const demo = { devices: {}, errors: [], published: 0 };
window.demo = demo;
window.addEventListener('error', (e) => demo.errors.push(String(e.message)));
window.addEventListener('unhandledrejection', (e) => demo.errors.push(String(e.reason?.message ?? e.reason)));

// An equirectangular view of the demo's square, metres to pixels.
const M_PER_DEG = 111_195;
const cosLat = Math.cos((cfg.center.lat * Math.PI) / 180);
const half = cfg.viewM / 2;
const view = () => svg.getBoundingClientRect();
function xy(lat, lon) {
  const r = view();
  const s = Math.min(r.width, r.height) / cfg.viewM;
  return [r.width / 2 + (lon - cfg.center.lon) * M_PER_DEG * cosLat * s, r.height / 2 - (lat - cfg.center.lat) * M_PER_DEG * s, s];
}
function el(name, attrs, parent = svg) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  parent.appendChild(e);
  return e;
}

function status() {
  const all = Object.values(demo.devices);
  const connected = all.filter((d) => d.state === 'connected').length;
  const told = all.reduce((n, d) => n + d.received.length, 0);
  statusLine.textContent = `${connected} of ${all.length} devices connected over WebSocket · ${told} notifications`;
  document.body.dataset.connected = String(connected);
}

async function run(spec) {
  const rec = { id: spec.id, state: 'connecting', reconnects: 0, received: [], lat: spec.lat, lon: spec.lon };
  demo.devices[spec.id] = rec;
  const card = document.createElement('section');
  card.className = 'device';
  card.innerHTML = `<h2><span></span><span class="state"></span></h2><ol></ol>`;
  card.querySelector('h2 span').textContent = spec.id;
  const badge = card.querySelector('.state');
  const ol = card.querySelector('ol');
  list.appendChild(card);
  const reach = el('circle', { class: 'reach' });
  const phone = el('circle', { class: 'phone', r: 5 });
  const label = el('text', {});
  label.textContent = spec.id;
  const place = () => {
    const [x, y, s] = xy(rec.lat, rec.lon);
    reach.setAttribute('cx', x);
    reach.setAttribute('cy', y);
    reach.setAttribute('r', cfg.radiusM * s);
    phone.setAttribute('cx', x);
    phone.setAttribute('cy', y);
    label.setAttribute('x', x + 7);
    label.setAttribute('y', y - 7);
  };
  const setState = (s) => {
    rec.state = s;
    badge.textContent = s;
    badge.dataset.state = s;
    status();
  };
  place();
  setState('connecting');

  const device = new AmbitDevice(cfg.wsUrl, spec.token, { backoff: { initialMs: 100, maxMs: 1000 } });
  device.on('connected', (e) => {
    if (e.reconnect) rec.reconnects++;
    setState('connected');
  });
  device.on('reconnecting', () => setState('reconnecting'));
  device.on('closed', (e) => {
    setState('closed');
    if (e.error !== null) demo.errors.push(`${spec.id}: ${e.error.message}`);
  });
  await device.ready();
  await device.subscribe({ id: 'accidents', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }], area: { radiusM: cfg.radiusM } }] });
  device.updateLocation(rec.lat, rec.lon);
  // The device's subscriptions by its unary call (Connect on the same port, cross-origin: CORS).
  rec.list = () => device.listSubscriptions().then((subs) => subs.map((x) => x.id));
  // Moves the device (what the walk does, on demand).
  rec.move = (lat, lon) => {
    rec.lat = lat;
    rec.lon = lon;
    device.updateLocation(lat, lon);
    place();
  };
  rec.subscribed = true;
  if (cfg.walk) {
    setInterval(() => {
      // A slow random walk, kept inside the view.
      rec.lat = Math.max(cfg.center.lat - (0.8 * half) / M_PER_DEG, Math.min(cfg.center.lat + (0.8 * half) / M_PER_DEG, rec.lat + ((Math.random() - 0.5) * 40) / M_PER_DEG));
      rec.lon = Math.max(cfg.center.lon - (0.8 * half) / (M_PER_DEG * cosLat), Math.min(cfg.center.lon + (0.8 * half) / (M_PER_DEG * cosLat), rec.lon + ((Math.random() - 0.5) * 40) / (M_PER_DEG * cosLat)));
      device.updateLocation(rec.lat, rec.lon);
      place();
    }, 500);
  }
  for await (const n of device.notifications()) {
    rec.received.push(n.event.id);
    const [x, y] = xy(n.event.lat, n.event.lon);
    el('circle', { class: 'event', cx: x, cy: y, r: 4 });
    const li = document.createElement('li');
    li.textContent = `${n.event.id}: ${n.event.attributes.type} ${n.event.attributes.severity ?? ''}`;
    li.dataset.event = n.event.id;
    ol.prepend(li);
    status();
  }
}

cfg.devices.forEach((spec) => void run(spec).catch((err) => demo.errors.push(`${spec.id}: ${err?.message ?? String(err)}`)));
