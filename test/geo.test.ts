/**
 * src/model/geo.ts: the reference distance (A1) and the bounding boxes that index-based engines
 * use as a superset of each circle. Property tests use the seeded test PRNG: the same points
 * every run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Box, EARTH_RADIUS_M, circleBoxes, haversineM, unitVector } from '../src/model/geo.js';
import { Rng } from './support/rng.js';
import { boundaryStepM, destination, nextDown, nextUp, pointAt, wrapLon } from './support/sphere.js';
import { extremePoint } from './support/workloads.js';

const R = EARTH_RADIUS_M;
const near = (got: number, want: number, tol: number, what: string) => assert.ok(Math.abs(got - want) <= tol, `${what}: got ${got}, want ${want} ± ${tol}`);

describe('haversineM', () => {
  it('[A1] uses the IUGG mean Earth radius, 6 371 008.8 m', () => {
    assert.equal(EARTH_RADIUS_M, 6_371_008.8);
  });

  it('[A1] known distances', () => {
    near(haversineM(45.4642, 9.19, 41.9028, 12.4964), 476_885, 50, 'Milan-Rome');
    near(haversineM(51.5074, -0.1278, 48.8566, 2.3522), 343_560, 500, 'London-Paris');
    near(haversineM(0, 0, 0, 1), (R * Math.PI) / 180, 1e-6, 'one degree of longitude on the equator');
    near(haversineM(0, 0, 1, 0), (R * Math.PI) / 180, 1e-6, 'one degree of latitude');
    near(haversineM(0, 0, 90, 0), (R * Math.PI) / 2, 1e-6, 'equator to pole');
    near(haversineM(12, 34, 12, 34), 0, 0, 'a point to itself');
  });

  it('[A1] antipodes and the poles are pi·R apart', () => {
    near(haversineM(0, 0, 0, 180), Math.PI * R, 1e-6, 'antipodal on the equator');
    near(haversineM(90, 0, -90, 0), Math.PI * R, 1e-6, 'pole to pole');
    near(haversineM(30, 40, -30, -140), Math.PI * R, 1e-3, 'antipodal pair');
    near(haversineM(-90, 45, 90, -135), Math.PI * R, 1e-6, 'pole to pole, other longitudes');
  });

  it('[A8] the antimeridian is no seam', () => {
    near(haversineM(0, 179.9995, 0, -179.9995), 111.195, 0.001, '0.001 degree across it');
    near(haversineM(0, 180, 0, -180), 0, 1e-6, 'lon 180 and -180 are one meridian');
    near(haversineM(-45, 180, -45, -180), 0, 1e-6, 'also at 45S');
    near(haversineM(60, 179.99, 60, -179.99), haversineM(60, -0.01, 60, 0.01), 1e-6, 'as far as the same gap at Greenwich');
  });

  it('[A9] near the poles every longitude is near', () => {
    near(haversineM(90, 0, 90, 123), 0, 1e-6, 'the north pole is one point');
    near(haversineM(-90, -180, -90, 77), 0, 1e-6, 'and the south pole');
    near(haversineM(89.9999, 0, 89.9999, 180), 22.239, 0.001, 'across the pole at 89.9999');
    near(haversineM(89.9999, 0, 89.9999, 90), 22.239 / Math.SQRT2, 0.001, 'a quarter turn at 89.9999');
  });

  it('[A1] is symmetric bit for bit, non-negative, at most pi·R, and obeys the triangle inequality (seeded)', () => {
    const rng = new Rng(20240501);
    const pt = () => ({ lat: rng.chance(0.1) ? rng.pick([90, -90, 0, -0]) : (Math.asin(2 * rng.next() - 1) * 180) / Math.PI, lon: rng.chance(0.1) ? rng.pick([180, -180, 0]) : rng.range(-180, 180) });
    for (let i = 0; i < 20_000; i++) {
      const a = pt();
      const b = rng.chance(0.3) ? destination(a.lat, a.lon, rng.range(0, 360), rng.logUniform(1e-3, 2e7)) : pt();
      const c = pt();
      const ab = haversineM(a.lat, a.lon, b.lat, b.lon);
      assert.ok(Object.is(ab, haversineM(b.lat, b.lon, a.lat, a.lon)), `symmetry at ${JSON.stringify([a, b])}`);
      assert.ok(ab >= 0 && ab <= Math.PI * R * (1 + 1e-15), `range: ${ab}`);
      const ac = haversineM(a.lat, a.lon, c.lat, c.lon);
      const cb = haversineM(c.lat, c.lon, b.lat, b.lon);
      assert.ok(ab <= ac + cb + 1e-6, `triangle inequality at ${JSON.stringify([a, b, c])}`);
    }
  });
});

describe('test helpers on the sphere', () => {
  it('destination places points at the requested reference distance', () => {
    const rng = new Rng(7);
    for (let i = 0; i < 5000; i++) {
      const lat = rng.range(-89.999, 89.999);
      const lon = rng.range(-180, 180);
      const d = rng.logUniform(0.01, 1.5e7);
      const p = pointAt(lat, lon, rng.range(0, 360), d);
      assert.ok(p.lon >= -180 && p.lon <= 180 && p.lat >= -90 && p.lat <= 90);
      near(p.dist, d, Math.max(1e-6, d * 1e-9), `destination(${lat}, ${lon}, d=${d})`);
    }
  });

  it('nextUp/nextDown step one ulp; wrapLon folds into [-180, 180]', () => {
    assert.equal(nextUp(1), 1 + 2 ** -52);
    assert.equal(nextDown(1), 1 - 2 ** -53);
    assert.equal(nextUp(0), Number.MIN_VALUE);
    assert.equal(nextDown(0), -Number.MIN_VALUE);
    assert.equal(nextUp(-Number.MIN_VALUE), -0);
    assert.equal(wrapLon(181), -179);
    assert.equal(wrapLon(-181), 179);
    assert.equal(wrapLon(180), 180);
    assert.equal(wrapLon(540), -180);
  });

  it('boundaryStepM, the boundary probes\' step, is max(2 m, 0.1% of r)', () => {
    assert.equal(boundaryStepM(0), 2);
    assert.equal(boundaryStepM(1), 2);
    assert.equal(boundaryStepM(2000), 2);
    assert.ok(boundaryStepM(nextUp(2000)) > 2);
    assert.equal(boundaryStepM(2500), 2.5);
    assert.equal(boundaryStepM(1e6), 1000);
    assert.equal(boundaryStepM(2e6), 2000);
  });

  it('extremePoint lies on the circle, at its box edge', () => {
    const rng = new Rng(99);
    for (let i = 0; i < 2000; i++) {
      const c = { lat: rng.range(-85, 85), lon: rng.range(-180, 180) };
      const d = rng.logUniform(1, 1e6);
      for (let w = 0; w < 4; w++) {
        const p = extremePoint(c, d, w);
        near(haversineM(c.lat, c.lon, p.lat, p.lon), d, d * 1e-9 + 1e-6, `extreme ${w} of ${JSON.stringify(c)} d=${d}`);
      }
    }
  });
});

/** Whether some box contains the point, lon 180 and -180 being one meridian. */
function covered(boxes: readonly Box[], lat: number, lon: number): boolean {
  const lons = Math.abs(lon) === 180 ? [180, -180] : [lon];
  return boxes.some(([x0, y0, x1, y1]) => lat >= y0 && lat <= y1 && lons.some((x) => x >= x0 && x <= x1));
}

describe('circleBoxes', () => {
  const PAD = 1e-7;

  function checkShape(boxes: readonly Box[], lat: number, lon: number, r: number): void {
    const ctx = `circleBoxes(${lat}, ${lon}, ${r}) = ${JSON.stringify(boxes)}`;
    assert.ok(boxes.length === 1 || boxes.length === 2, ctx);
    for (const [x0, y0, x1, y1] of boxes) {
      assert.ok(x0 >= -180 && x1 <= 180 && x0 <= x1, `lon range: ${ctx}`);
      assert.ok(y0 >= -90 && y1 <= 90 && y0 <= y1, `lat range: ${ctx}`);
    }
    const deg = ((r / R) * 180) / Math.PI;
    const polar = haversineM(lat, lon, 90, 0) <= r || haversineM(lat, lon, -90, 0) <= r;
    if (polar) {
      assert.equal(boxes.length, 1, `a circle around a pole is one full-longitude band: ${ctx}`);
      assert.deepEqual([boxes[0][0], boxes[0][2]], [-180, 180], ctx);
    }
    if (boxes.length === 2) {
      // Split at the antimeridian: one box ends at 180, the other starts at -180.
      const [a, b] = boxes;
      assert.ok((a[2] === 180 && b[0] === -180) || (b[2] === 180 && a[0] === -180), `split: ${ctx}`);
    }
    if (!polar && Math.abs(lat) < 80 && deg < 5) {
      // Tight: a small circle away from the poles gets a box of about its own size.
      for (const [x0, y0, x1, y1] of boxes) {
        assert.ok(y1 - y0 <= 2 * deg + 2 * PAD + 1e-9, `lat span: ${ctx}`);
        assert.ok(x1 - x0 <= (2 * deg) / Math.cos(((Math.abs(lat) + deg) * Math.PI) / 180) + 2 * PAD + 1e-9, `lon span: ${ctx}`);
      }
    }
  }

  const regimes: Array<[string, (rng: Rng) => { lat: number; lon: number }]> = [
    ['anywhere', (g) => ({ lat: (Math.asin(2 * g.next() - 1) * 180) / Math.PI, lon: g.range(-180, 180) })],
    ['near the antimeridian', (g) => ({ lat: g.range(-80, 80), lon: (g.chance(0.5) ? 1 : -1) * (180 - g.logUniform(1e-9, 5)) })],
    ['on the antimeridian', (g) => ({ lat: g.range(-80, 80), lon: g.pick([180, -180]) })],
    ['near the north pole', (g) => ({ lat: 90 - g.logUniform(1e-9, 2), lon: g.range(-180, 180) })],
    ['near the south pole', (g) => ({ lat: -90 + g.logUniform(1e-9, 2), lon: g.range(-180, 180) })],
    ['at a pole', (g) => ({ lat: g.pick([90, -90]), lon: g.range(-180, 180) })],
    ['equator and Greenwich', (g) => ({ lat: g.pick([0, -0, 1e-9, -1e-9]), lon: g.pick([0, -0, 1e-9, 90, -90]) })],
  ];

  for (const [label, centre] of regimes) {
    it(`covers every point of the circle, boundary included: centres ${label} (seeded)`, () => {
      const rng = new Rng(label.length * 7919 + 13);
      let checked = 0;
      for (let i = 0; i < 1500; i++) {
        const c = centre(rng);
        // r_f + r_e reaches 2000 km; a few larger circles exercise the general case.
        const r = rng.chance(0.02) ? rng.range(2e6, 1.9e7) : rng.chance(0.05) ? rng.pick([1e-6, 1e-3, 1, 1e6, 2e6]) : rng.logUniform(1e-3, 2e6);
        const boxes = circleBoxes(c.lat, c.lon, r);
        checkShape(boxes, c.lat, c.lon, r);
        assert.ok(covered(boxes, c.lat, c.lon), `the centre itself: ${JSON.stringify(c)} r=${r}`);
        for (let k = 0; k < 24; k++) {
          // On the boundary (random bearings and the four extreme points), and inside.
          let p = k < 4 ? extremePoint(c, r, k) : destination(c.lat, c.lon, rng.range(0, 360), k < 16 ? r : r * rng.next());
          let d = haversineM(c.lat, c.lon, p.lat, p.lon);
          // Pull a boundary point just inside if placement rounded it out: the exact test admits d <= r only.
          for (let eps = 1e-15; d > r && eps < 1e-6; eps *= 4) {
            p = k < 4 ? extremePoint(c, r * (1 - eps), k) : destination(c.lat, c.lon, 0, r * (1 - eps));
            d = haversineM(c.lat, c.lon, p.lat, p.lon);
          }
          if (d > r) continue;
          checked++;
          assert.ok(covered(boxes, p.lat, p.lon), `point ${JSON.stringify(p)} at d=${d} <= r=${r} from ${JSON.stringify(c)} is outside ${JSON.stringify(boxes)}`);
        }
      }
      assert.ok(checked > 30_000, `only ${checked} points checked`);
    });
  }

  it('splits at the antimeridian and caps the poles (fixed cases)', () => {
    assert.equal(circleBoxes(0, 179.9995, 150).length, 2);
    assert.equal(circleBoxes(0, -179.9995, 150).length, 2);
    assert.equal(circleBoxes(0, 180, 1).length, 2);
    assert.equal(circleBoxes(0, 179, 1000).length, 1);
    assert.deepEqual(circleBoxes(89.99, 45, 5000), [[-180, 89.99 - (5000 / R) * (180 / Math.PI) - PAD, 180, 90]]);
    assert.deepEqual(circleBoxes(-90, 0, 10)[0].slice(0, 3), [-180, -90, 180]);
    assert.ok(covered(circleBoxes(0, 179.9995, 150), 0, -179.9995));
    assert.ok(covered(circleBoxes(89.9999, 0, 30), 89.9999, 180));
  });
});

describe('unitVector', () => {
  it('gives unit vectors, with the axes where expected', () => {
    const out = new Float64Array(6);
    unitVector(0, 0, out);
    assert.deepEqual([...out.slice(0, 3)].map((x) => Math.round(x * 1e12) / 1e12), [1, 0, 0]);
    unitVector(90, 123, out, 3);
    near(out[5], 1, 1e-15, 'north pole z');
    near(Math.hypot(out[3], out[4]), 0, 1e-15, 'north pole xy');
    const rng = new Rng(3);
    for (let i = 0; i < 1000; i++) {
      const lat = rng.range(-90, 90);
      const lon = rng.range(-180, 180);
      unitVector(lat, lon, out);
      near(Math.hypot(out[0], out[1], out[2]), 1, 1e-15, 'norm');
      // The chord between two unit vectors gives back the haversine distance.
      const lat2 = rng.range(-90, 90);
      const lon2 = rng.range(-180, 180);
      unitVector(lat2, lon2, out, 3);
      const chord = Math.hypot(out[0] - out[3], out[1] - out[4], out[2] - out[5]);
      near(2 * R * Math.asin(Math.min(1, chord / 2)), haversineM(lat, lon, lat2, lon2), 1e-3, 'chord vs arc');
    }
  });
});
