/**
 * The CPU benchmark's baselines (bench/lib/baselines.ts: rbush and flatbush with exact tests, what
 * users would build instead) must give the reference's answers, or comparing their times with the
 * engines' would compare different work: the differential suite runs them as it runs the engines.
 */
import { describe } from 'node:test';
import { BASELINES } from '../bench/lib/baselines.js';
import { runDifferential } from './support/differential.js';

describe('benchmark baselines', () => {
  for (const [name, make] of Object.entries(BASELINES)) runDifferential(`${name} baseline`, make);
});

