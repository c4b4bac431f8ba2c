/**
 * Validation of pattern subscriptions against docs/semantics.md E19: the first violation in
 * document order is reported, and a negation's fields come in the order `.filter…`, `.between`,
 * `.between[k]`, `.before`, `.withinMs`, `.parameters[j]`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_PATTERN_LIMITS, type PatternSubscription, validatePatternSubscription } from '../../src/model/event-patterns.js';
import { ValidationError } from '../../src/model/errors.js';
import { resolveLimits } from '../../src/model/limits.js';

const LIMITS = resolveLimits();
const F = { constraints: [{ name: 'k', op: 'exists' as const }] };

function withNegation(negation: unknown): PatternSubscription {
  return {
    id: 'x',
    owner: 'o',
    pattern: {
      steps: [
        { name: 't', filter: F },
        { name: 'a', filter: F, withinMs: 5 },
      ],
      negations: [negation as never],
    },
  };
}

function fieldOf(s: unknown): string {
  try {
    validatePatternSubscription(s, LIMITS, DEFAULT_PATTERN_LIMITS);
  } catch (e) {
    assert.ok(e instanceof ValidationError, String(e));
    return e.field ?? '(no field)';
  }
  return '(accepted)';
}

describe('E19 document order within a negation', () => {
  it('a between that is not an array is reported before a before given beside it', () => {
    assert.equal(fieldOf(withNegation({ filter: F, between: 'a', before: 't', withinMs: 3 })), 'subscription.pattern.negations[0].between');
  });

  it('a between naming no step is reported before a withinMs given beside it', () => {
    assert.equal(fieldOf(withNegation({ filter: F, between: ['t', 'nope'], withinMs: 3 })), 'subscription.pattern.negations[0].between[1]');
  });
});
