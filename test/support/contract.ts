/**
 * The one contract every Matcher implementation runs (docs/semantics.md; rule ids in brackets in
 * each test name). Hand-written small cases: each operator on each type at its edges, areas at
 * their exact boundary, the lifecycle, and validation of every limit and malformed input. Every
 * engine, whatever precision it computes in internally, must pass every case exactly (X1, X2).
 *
 * The cases live in test/support/contract/, one file per rule group; this entry runs them all
 * under `contract: <name>`, so every engine runs every case under the same test names.
 */
import { describe } from 'node:test';
import { areaRules } from './contract/areas.js';
import { type MakeMatcher, contractContext } from './contract/common.js';
import { constraintRules } from './contract/constraints.js';
import { lifecycleRules } from './contract/lifecycle.js';
import { patternRules } from './contract/patterns.js';
import { resultRules } from './contract/results.js';
import { tagRules } from './contract/tags.js';
import { validationRules } from './contract/validation.js';

export { type MakeMatcher, c, ev, sub, utf8Op } from './contract/common.js';

export function runContract(name: string, make: MakeMatcher): void {
  const ctx = contractContext(make);
  describe(`contract: ${name}`, () => {
    lifecycleRules(ctx);
    constraintRules(ctx);
    patternRules(ctx);
    tagRules(ctx);
    areaRules(ctx);
    resultRules(ctx);
    validationRules(ctx);
  });
}
