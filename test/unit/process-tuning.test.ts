// What the server process sets on itself at start (src/main.ts): V8's old generation grows by a fixed, smaller
// factor between full collections (src/services/heap-growth.ts), and the log is written off the event loop
// (logDestination in src/http/app.ts) yet completely when the process exits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { heapGrowthFlag, HEAP_GROWING_PERCENT } from '../../src/services/heap-growth.js';
import { nodeFlagValue } from '../../src/domain/node-flags.js';

const source = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

/** Runs an ES module under tsx in a fresh node process and returns its standard output. */
function runModule(code: string, nodeFlags: string[] = []): string {
  return execFileSync(process.execPath, [...nodeFlags, '--import', 'tsx', '--input-type=module', '-e', code], {
    encoding: 'utf8',
    timeout: 60_000,
  });
}

test('the server asks for a fixed heap growth unless its command line chooses one', () => {
  const flag = `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
  assert.equal(heapGrowthFlag([]), flag);
  assert.equal(heapGrowthFlag(['--max-semi-space-size=32', '--enable-source-maps']), flag);
  assert.equal(heapGrowthFlag(['--heap-growing-percent=100']), undefined);
  assert.equal(heapGrowthFlag(['--heap_growing_percent=20']), undefined);
  assert.equal(heapGrowthFlag(['--heap-growing-percent', '30']), undefined);
});

test('a flag is read as Node and V8 read it: NODE_OPTIONS first, the command line last, either spelling', () => {
  assert.equal(nodeFlagValue('max-semi-space-size', ['--max-semi-space-size=32']), '32');
  assert.equal(nodeFlagValue('max-semi-space-size', ['--max_semi_space_size', '8'], '--max-semi-space-size=64'), '8');
  assert.equal(nodeFlagValue('max-semi-space-size', [], '  --inspect   --max-semi-space-size=64 '), '64');
  assert.equal(nodeFlagValue('max-semi-space-size', ['--max-semi-space-size', '--inspect']), '');
  assert.equal(nodeFlagValue('max-semi-space-size', ['--max-semi-space-size-extra=1']), undefined);
  assert.equal(nodeFlagValue('max-semi-space-size', ['--max-old-space-size=512']), undefined);
});

test("once set, V8 computes the old generation's limit with the fixed factor", () => {
  // V8's own trace after each full collection: "[HeapController] Limit: old size: … KB, new limit: … KB (factor)".
  // Its own factor depends on how fast the collector and the program run (up to 4.0); with the flag it is fixed.
  const trace = runModule(
    `
      import { limitHeapGrowth } from ${JSON.stringify(source('services/heap-growth.ts'))};
      limitHeapGrowth([]);
      globalThis.kept = Array.from({ length: 200000 }, (_, i) => ({ i, s: 'kept' + i }));
      globalThis.gc();
      globalThis.gc();
    `,
    ['--expose-gc', '--trace-gc-verbose'],
  );
  const factors = [...trace.matchAll(/\[HeapController\] Limit: old size: \d+ KB, new limit: \d+ KB \(([\d.]+)\)/g)]
    .map((match) => match[1])
    .slice(-2);
  assert.equal(factors.length, 2, trace.slice(-2000));
  assert.deepEqual(factors, Array(2).fill((1 + HEAP_GROWING_PERCENT / 100).toFixed(1)));
});

test('the log is written asynchronously, and every line is out when the process exits', () => {
  const lines = 5000;
  const output = runModule(`
    import { pino } from 'pino';
    import { logDestination, loggerOptions } from ${JSON.stringify(source('http/app.ts'))};
    const destination = logDestination();
    const log = pino(loggerOptions('info'), destination);
    for (let i = 0; i < ${lines}; i++) log.info({ i }, 'request');
    log.info({ sync: destination.sync }, 'last');
    process.exit(0);
  `);
  const written = output.trim().split('\n');
  assert.equal(written.length, lines + 1);
  assert.deepEqual(
    written.slice(0, 3).map((line) => (JSON.parse(line) as { i: number }).i),
    [0, 1, 2],
  );
  assert.equal((JSON.parse(written.at(-1)!) as { sync: boolean }).sync, false);
});
