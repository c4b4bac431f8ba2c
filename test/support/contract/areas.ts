/**
 * Area and distance rules (docs/semantics.md §4 A, exact for every engine: X1): fixed and
 * anchored circles at their exact boundary, event radii, the antimeridian and the poles, moving
 * devices.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { haversineM } from '../../../src/model/geo.js';
import { DEFAULT_LIMITS } from '../../../src/model/limits.js';
import { sorted } from '../assertions.js';
import { boundaryStepM, nextDown, nextUp, pointAt, smallestRadius } from '../sphere.js';
import { anchored, c, type ContractContext, ev, fixed, ids, sub } from './common.js';

export function areaRules({ open }: ContractContext): void {
  describe('areas', () => {
    const geometries = [
      { label: 'mid-latitude', lat: 45.4642, lon: 9.19, brg: 37, d: 1234.5 },
      { label: 'equator, 75 cm', lat: 0, lon: 0, brg: 90, d: 0.75 },
      { label: 'across the antimeridian', lat: -16.5, lon: 179.9999, brg: 85, d: 60 },
      { label: 'passing the north pole', lat: 89.9, lon: -120, brg: 5, d: 20_000 },
      { label: 'near the south pole', lat: -89.99995, lon: 33, brg: 200, d: 9 },
      { label: 'just under 1000 km', lat: -33.9, lon: 151.2, brg: 200, d: 999_999.5 },
    ];

    it('[A2][A1] the boundary is inclusive at the exact float64 haversine distance', () =>
      open(async (m) => {
        for (const [i, g] of geometries.entries()) {
          const p = pointAt(g.lat, g.lon, g.brg, g.d);
          const d = p.dist;
          assert.ok(d > 0 && d <= DEFAULT_LIMITS.maxRadiusM);
          m.updatePosition(`dev${i}`, g.lat, g.lon);
          m.add(sub(`on${i}`, 'nobody', { constraints: [], area: fixed(d, g.lat, g.lon) }));
          m.add(sub(`up${i}`, 'nobody', { constraints: [], area: fixed(nextUp(d), g.lat, g.lon) }));
          m.add(sub(`off${i}`, 'nobody', { constraints: [], area: fixed(nextDown(d), g.lat, g.lon) }));
          m.add(sub(`aon${i}`, `dev${i}`, { constraints: [], area: anchored(d) }));
          m.add(sub(`aoff${i}`, `dev${i}`, { constraints: [], area: anchored(nextDown(d)) }));
          assert.deepEqual(await ids(m, ev({}, p.lat, p.lon)), sorted([`on${i}`, `up${i}`, `aon${i}`]), `${g.label}: d=${d}`);
          for (const id of [`on${i}`, `up${i}`, `off${i}`, `aon${i}`, `aoff${i}`]) m.remove(id);
        }
      }));

    it('[A2][A3] with an event radius the test is d <= r_f + r_e, the sum rounded once in float64', () =>
      open(async (m) => {
        for (const [i, g] of geometries.entries()) {
          if (g.d < 10) continue;
          const p = pointAt(g.lat, g.lon, g.brg, g.d);
          for (const re of [0.1, 3.3, g.d / 3, g.d * 0.999]) {
            const rf = smallestRadius(p.dist, re);
            m.add(sub('on', 'nobody', { constraints: [], area: fixed(rf, g.lat, g.lon) }));
            m.add(sub('off', 'nobody', { constraints: [], area: fixed(nextDown(rf), g.lat, g.lon) }));
            assert.deepEqual(await ids(m, ev({}, p.lat, p.lon, re)), ['on'], `${g.label} #${i}: d=${p.dist} re=${re} rf=${rf}`);
            m.remove('on');
            m.remove('off');
          }
        }
      }));

    it('[A2] anchored circles a few metres larger or smaller than the distance: r = d ± 3·max(2 m, 0.1% of r)', () =>
      open(async (m) => {
        for (const [i, g] of geometries.entries()) {
          const p = pointAt(g.lat, g.lon, g.brg, g.d);
          const big = p.dist + 3 * boundaryStepM(p.dist * 1.01 + 10);
          const small = p.dist - 3 * boundaryStepM(p.dist);
          m.updatePosition(`dev${i}`, g.lat, g.lon);
          if (big <= DEFAULT_LIMITS.maxRadiusM) m.add(sub(`in${i}`, `dev${i}`, { constraints: [], area: anchored(big) }));
          if (small > 0) m.add(sub(`out${i}`, `dev${i}`, { constraints: [], area: anchored(small) }));
          assert.deepEqual(await ids(m, ev({}, p.lat, p.lon)), big <= DEFAULT_LIMITS.maxRadiusM ? [`in${i}`] : [], g.label);
          m.remove(`in${i}`);
          m.remove(`out${i}`);
        }
      }));

    it('[A3] an event radius reaches filters whose circle intersects its own', () =>
      open(async (m) => {
        const p = pointAt(10, 10, 45, 1500);
        m.add(sub('f', 'd', { constraints: [], area: fixed(1000, 10, 10) }));
        for (const [re, want] of [[600, ['f']], [400, []], [0, []], [undefined, []], [1e6, ['f']]] as Array<[number | undefined, string[]]>) {
          assert.deepEqual(await ids(m, ev({}, p.lat, p.lon, re)), want, `r_e = ${re}`);
        }
        m.add(sub('g', 'd', { constraints: [], area: fixed(1e6, 0, 0) }));
        const far = pointAt(0, 0, 270, 1_900_000);
        const farther = pointAt(0, 0, 270, 2_100_000);
        assert.deepEqual(await ids(m, ev({}, far.lat, far.lon, 1e6)), ['g'], 'two 1000 km circles 1900 km apart intersect');
        assert.deepEqual(await ids(m, ev({}, farther.lat, farther.lon, 1e6)), [], 'nor at 2100 km');
        assert.deepEqual(await ids(m, ev({}, 0, 0, 0)), ['g']);
      }));

    it('[A4] a content-only filter matches anywhere, whatever its owner\'s position', () =>
      open(async (m) => {
        m.add(sub('co', 'ghost', { constraints: [c('k', 'eq', 1)] }));
        const where: Array<[number, number]> = [[90, 0], [-90, 180], [0, -180], [0, 180], [45.4642, 9.19], [-33.9, 151.2], [89.99999, -179.99999]];
        for (const [lat, lon] of where) assert.deepEqual(await ids(m, ev({ k: 1 }, lat, lon, lat === 0 ? 1e6 : undefined)), ['co'], `${lat},${lon}`);
        m.updatePosition('ghost', 0, 0);
        assert.deepEqual(await ids(m, ev({ k: 1 }, 45, 45)), ['co']);
        m.removeDevice('ghost');
        assert.deepEqual(await ids(m, ev({ k: 1 }, -45, -45)), ['co']);
        assert.deepEqual(await ids(m, ev({ k: 2 }, -45, -45)), []);
      }));

    it('[A5] a fixed-centre filter ignores its owner, known or not', () =>
      open(async (m) => {
        m.add(sub('fx', 'owner', { constraints: [], area: fixed(500, 48.8566, 2.3522) }));
        assert.deepEqual(await ids(m, ev({}, 48.8566, 2.3522)), ['fx'], 'owner never seen');
        m.updatePosition('owner', -48.8566, -2.3522);
        assert.deepEqual(await ids(m, ev({}, 48.8566, 2.3522)), ['fx'], 'owner far away');
        assert.deepEqual(await ids(m, ev({}, -48.8566, -2.3522)), [], 'not at the owner');
        m.removeDevice('owner');
        assert.deepEqual(await ids(m, ev({}, 48.858, 2.3522)), ['fx']);
      }));

    it('[A6] an anchored filter of a device with unknown position matches nothing', () =>
      open(async (m) => {
        m.add(sub('a', 'unknown', { constraints: [], area: anchored(1e6) }));
        m.add(sub('b', 'unknown', { constraints: [c('x', 'exists')], area: anchored(1e6) }, { constraints: [c('x', 'eq', 1)], area: anchored(500) }));
        for (const [lat, lon] of [[0, 0], [90, 0], [-90, 0], [0, 180], [45, 9]] as Array<[number, number]>) {
          assert.deepEqual(await ids(m, ev({ x: 1 }, lat, lon, 1e6)), [], `${lat},${lon}`);
        }
        m.updatePosition('unknown', 0, 0);
        assert.deepEqual(await ids(m, ev({ x: 1 }, 0, 0)), ['a', 'b']);
        m.removeDevice('unknown');
        assert.deepEqual(await ids(m, ev({ x: 1 }, 0, 0)), []);
      }));

    it('[A7] position updates move anchored filters in and out of reach', () =>
      open(async (m) => {
        m.add(sub('s', 'd', { constraints: [c('k', 'exists')], area: anchored(200) }));
        m.add(sub('t', 'e', { constraints: [c('k', 'exists')], area: anchored(200) }));
        const A: [number, number] = [52.52, 13.405];
        const B: [number, number] = [40.4168, -3.7038];
        m.updatePosition('d', ...A);
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...A)), ['s']);
        m.updatePosition('d', ...B);
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...A)), [], 'moved away');
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...B)), ['s'], 'moved in');
        const near = pointAt(B[0], B[1], 10, 150);
        const away = pointAt(B[0], B[1], 10, 250);
        assert.deepEqual(await ids(m, ev({ k: 1 }, near.lat, near.lon)), ['s']);
        assert.deepEqual(await ids(m, ev({ k: 1 }, away.lat, away.lon)), []);
        m.updatePosition('d', away.lat, away.lon);
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...B)), []);
        m.updatePositions([
          { device: 'd', lat: A[0], lon: A[1] },
          { device: 'e', lat: A[0], lon: A[1] },
          { device: 'd', lat: B[0], lon: B[1] },
        ]);
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...B)), ['s'], 'the last entry for a device wins');
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...A)), ['t']);
        m.updatePositions([]);
        assert.deepEqual(await ids(m, ev({ k: 1 }, ...A)), ['t'], 'an empty batch changes nothing');
        // Many small steps across the boundary.
        for (let k = 0; k <= 6; k++) {
          const p = pointAt(A[0], A[1], 123, 70 * k);
          m.updatePosition('e', p.lat, p.lon);
          assert.deepEqual(await ids(m, ev({ k: 1 }, ...A)), 70 * k <= 200 ? ['t'] : [], `step ${k}: ${70 * k} m`);
        }
      }));

    it('[A8] the antimeridian is no boundary', () =>
      open(async (m) => {
        const d = haversineM(0, 179.9995, 0, -179.9995);
        assert.ok(Math.abs(d - 111.195) < 0.01, `d = ${d}`);
        m.add(sub('fixed150', 'x', { constraints: [], area: fixed(150, 0, 179.9995) }));
        m.add(sub('fixed100', 'x', { constraints: [], area: fixed(100, 0, 179.9995) }));
        m.updatePosition('dev', 0, 179.9995);
        m.add(sub('anch150', 'dev', { constraints: [], area: anchored(150) }));
        m.add(sub('anch100', 'dev', { constraints: [], area: anchored(100) }));
        assert.deepEqual(await ids(m, ev({}, 0, -179.9995)), ['anch150', 'fixed150']);
        for (const id of ['fixed150', 'fixed100', 'anch150', 'anch100']) m.remove(id);
        // lon 180 and -180 are one meridian.
        m.add(sub('east', 'x', { constraints: [], area: fixed(10, 12, 180) }));
        m.add(sub('west', 'x', { constraints: [], area: fixed(10, 12, -180) }));
        assert.deepEqual(await ids(m, ev({}, 12, -180)), ['east', 'west']);
        assert.deepEqual(await ids(m, ev({}, 12, 180)), ['east', 'west']);
        // A 1000 km circle straddling the seam.
        m.add(sub('big', 'x', { constraints: [], area: fixed(1e6, 0, 175) }));
        assert.deepEqual(await ids(m, ev({}, 0, -177)), ['big'], '8 degrees = 889.6 km');
        assert.deepEqual(await ids(m, ev({}, 0, -170)), [], '15 degrees = 1668 km');
        m.add(sub('w2', 'x', { constraints: [], area: fixed(5000, 60, -179.99) }));
        assert.deepEqual(await ids(m, ev({}, 60, 179.99)), ['w2'], '0.02 degrees at 60N = 1.1 km');
        assert.deepEqual(await ids(m, ev({}, 60, 179.99, 1)), ['w2']);
      }));

    it('[A9] near and at the poles every longitude is near', () =>
      open(async (m) => {
        const d = haversineM(89.9999, 0, 89.9999, 180);
        assert.ok(Math.abs(d - 22.239) < 0.01, `d = ${d}`);
        m.add(sub('r30', 'x', { constraints: [], area: fixed(30, 89.9999, 0) }));
        m.add(sub('r12', 'x', { constraints: [], area: fixed(12, 89.9999, 0) }));
        assert.deepEqual(await ids(m, ev({}, 89.9999, 180)), ['r30'], '22.2 m');
        assert.deepEqual(await ids(m, ev({}, 89.9999, -90)), ['r30'], '15.7 m');
        assert.deepEqual(await ids(m, ev({}, 89.9999, 30)), ['r12', 'r30'], '5.8 m');
        m.remove('r30');
        m.remove('r12');
        m.add(sub('north', 'x', { constraints: [], area: fixed(10, 90, 0) }));
        m.add(sub('south', 'x', { constraints: [], area: fixed(10, -90, 123) }));
        assert.deepEqual(await ids(m, ev({}, 90, 77)), ['north'], 'the pole is one point');
        assert.deepEqual(await ids(m, ev({}, 90, -180)), ['north']);
        assert.deepEqual(await ids(m, ev({}, -90, -150)), ['south']);
        assert.deepEqual(await ids(m, ev({}, -89.99999, 0)), ['south'], '1.1 m from the pole');
        m.remove('north');
        m.remove('south');
        // A circle containing the pole, anchored to a device there.
        m.updatePosition('polar', 89.99, 45);
        m.add(sub('cap', 'polar', { constraints: [], area: anchored(5000) }));
        assert.deepEqual(await ids(m, ev({}, 89.99, -135)), ['cap'], 'the other side, 2.2 km over the pole');
        assert.deepEqual(await ids(m, ev({}, 89.98, 170)), ['cap']);
        assert.deepEqual(await ids(m, ev({}, 89.9, -135)), [], '12.2 km');
        assert.deepEqual(await ids(m, ev({}, 89.94, 45)), [], '5.6 km, same meridian');
        m.updatePosition('polar', -89.995, 0);
        assert.deepEqual(await ids(m, ev({}, -89.995, 180)), ['cap']);
      }));

    it('[A2] radius limits: 1 m and 1000 km circles', () =>
      open(async (m) => {
        m.add(sub('tiny', 'x', { constraints: [], area: fixed(1, 1, 1) }));
        m.add(sub('huge', 'x', { constraints: [], area: fixed(1e6, 1, 1) }));
        const p10 = pointAt(1, 1, 0, 10);
        const p999 = pointAt(1, 1, 77, 999_000);
        const p1001 = pointAt(1, 1, 77, 1_001_000);
        assert.deepEqual(await ids(m, ev({}, p10.lat, p10.lon)), ['huge']);
        assert.deepEqual(await ids(m, ev({}, p999.lat, p999.lon)), ['huge']);
        assert.deepEqual(await ids(m, ev({}, p1001.lat, p1001.lon)), []);
        assert.deepEqual(await ids(m, ev({}, 1, 1)), ['huge', 'tiny']);
        const half = pointAt(1, 1, 200, 0.5);
        assert.deepEqual(await ids(m, ev({}, half.lat, half.lon)), ['huge', 'tiny']);
      }));
  });
}
