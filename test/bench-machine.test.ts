/**
 * What every benchmark result file records of its machine (bench/lib/machine.ts): the speed probes
 * that let runs on lent machines of one kind be compared, and the one-line description printed
 * with every table, for files with and without the probes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeMachine, machineInfo, speedProbe } from '../bench/lib/machine.js';

describe('benchmark machine record', () => {
  it('times the speed probes: finite and positive, rounded to a tenth', () => {
    const s = speedProbe();
    for (const v of [s.jsMs, s.memGBps]) {
      assert.ok(Number.isFinite(v) && v > 0, `${v}`);
      assert.equal(Math.round(v * 10) / 10, v);
    }
  });

  it('records the probes with the machine and prints them; a file from before the probes prints without them', () => {
    const m = machineInfo([]);
    assert.ok(m.speed !== undefined);
    const line = describeMachine({ ...m, speed: { jsMs: 42.5, memGBps: 7.1 } });
    assert.match(line, /; speed probes: JavaScript 42\.5 ms, memory 7\.1 GB\/s$/);
    const { speed: _, ...older } = m;
    assert.doesNotMatch(describeMachine(older), /speed/);
    assert.ok(describeMachine(older).startsWith(m.cpu));
  });
});
