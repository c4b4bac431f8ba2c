/** Writes a benchmark's JSON result (folders created, two-space indent, trailing newline). */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export function writeResultFile(file: string, value: unknown): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}
