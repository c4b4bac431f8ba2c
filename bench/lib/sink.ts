/**
 * A sink for results so that no measured call can be optimised away: every result feeds a value
 * that is finally written to the output, where the optimiser cannot prove it unused.
 */
let acc = 0;

export function sink(ids: readonly string[]): void {
  acc = (acc + ids.length) | 0;
  if (ids.length > 0) acc = (acc ^ ids[0].length) | 0;
}

export function sinkNumber(x: number): void {
  acc = (acc + (x | 0)) | 0;
}

export function sinkValue(): number {
  return acc;
}
