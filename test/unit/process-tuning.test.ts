// What the server process sets on itself at start (src/main.ts): V8's old generation grows by a fixed, smaller
// factor between full collections (src/services/heap-growth.ts), and the log is written off the event loop
// (logDestination in src/http/app.ts) yet completely when the process exits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { heapGrowthFlag, HEAP_GROWING_PERCENT } from '../../src/services/heap-growth.js';

const source = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

/** Runs an ES module under tsx in a fresh node process and returns its standard output. */
function runModule(code: string): string {
  return execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
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
});

test('with the limit, promoted garbage holds less of the old generation between full collections', () => {
  // Objects that live through two scavenges are promoted and die soon after, as a request's do under load.
  const peakOldSpace = (limit: boolean) =>
    Number(
      runModule(`
        import { getHeapSpaceStatistics } from 'node:v8';
        import { limitHeapGrowth } from ${JSON.stringify(source('services/heap-growth.ts'))};
        if (${limit}) limitHeapGrowth([]);
        const live = Array.from({ length: 300000 }, (_, i) => ({ i, s: 'live' + i }));
        const ring = new Array(20000);
        let peak = 0;
        for (let round = 0; round < 100; round++) {
          for (let i = 0; i < ring.length; i++) ring[i] = { round, i, s: 'x'.repeat(20) + i, pair: [i, i + 1] };
          const old = getHeapSpaceStatistics().find((space) => space.space_name === 'old_space');
          peak = Math.max(peak, old.space_used_size);
        }
        globalThis.live = live;
        process.stdout.write(String(peak));
      `),
    );
  const without = peakOldSpace(false);
  const withLimit = peakOldSpace(true);
  assert.ok(withLimit < without * 0.8, `old space peak ${withLimit} B with the limit, ${without} B without`);
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
