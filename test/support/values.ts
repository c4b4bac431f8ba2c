/** Edge values shared by the contract cases and the workload generator (C5, C8-C12). */

export const NUMBER_EDGES: readonly number[] = [
  -Number.MAX_VALUE, -1, -1e-300, -Number.MIN_VALUE, -0, 0, Number.MIN_VALUE, 1e-300, 0.1 + 0.2, 0.3, 1, 2 ** 53, 2 ** 53 + 2, Number.MAX_VALUE,
];

export const STRING_EDGES: readonly string[] = [
  '', 'a', 'A', 'ab', 'b', 'é', 'e\u0301', 'café', '東', '京', '東京', '東京タワー', '😀', 'a😀b', '😀b', '😀😁', '\u00ff', '\u0100', '\uffff', '\u{10000}',
];
