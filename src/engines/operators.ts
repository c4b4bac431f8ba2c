/**
 * Numeric codes of constraint operators and value types: the one table the engines that store
 * constraints in typed arrays share (the fast CPU engine, the GPU engine's host mirror, and its
 * WGSL kernels through the generated prelude of src/engines/gpu/bindings.ts).
 *
 * Why here and not in src/model/: the model defines operators by name and meaning (types.ts,
 * semantics.ts) and has no storage encoding; these codes are an engine-side encoding that could
 * change without changing any semantics. Why not in matcher.ts: that is the interface every engine
 * imports, and most engines (reference, rtree) store no codes.
 */
import type { Op } from '../model/types.js';

export const OP_EQ = 0;
export const OP_NE = 1;
export const OP_LT = 2;
export const OP_LE = 3;
export const OP_GT = 4;
export const OP_GE = 5;
export const OP_PREFIX = 6;
export const OP_SUFFIX = 7;
export const OP_CONTAINS = 8;
export const OP_EXISTS = 9;
export const OP_LIKE = 10;
export const OP_REGEX = 11;

export const OP_CODE: Readonly<Record<Op, number>> = Object.freeze({
  eq: OP_EQ,
  ne: OP_NE,
  lt: OP_LT,
  le: OP_LE,
  gt: OP_GT,
  ge: OP_GE,
  prefix: OP_PREFIX,
  suffix: OP_SUFFIX,
  contains: OP_CONTAINS,
  exists: OP_EXISTS,
  like: OP_LIKE,
  regex: OP_REGEX,
});

/** Operator of each code (the inverse of OP_CODE). */
export const OP_NAME: readonly Op[] = Object.freeze(
  (Object.keys(OP_CODE) as Op[]).reduce<Op[]>((names, op) => ((names[OP_CODE[op]] = op), names), []),
);

/** Value type codes of a constraint or attribute; T_ANY is the type of `exists` (no value). */
export const T_NUM = 0;
export const T_STR = 1;
export const T_BOOL = 2;
export const T_ANY = 3;
