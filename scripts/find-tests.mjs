// The test files below a folder, sorted: shared by the test runner and `npm run fuzz`.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Every `*.test.ts` below `dir`, in a stable order; none when the folder does not exist. */
export function findTests(dir) {
  let names;
  try {
    names = readdirSync(dir).sort();
  } catch {
    return [];
  }
  return names.flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return findTests(path);
    return name.endsWith('.test.ts') ? [path] : [];
  });
}
