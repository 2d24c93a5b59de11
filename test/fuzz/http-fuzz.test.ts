// The HTTP fuzz suite (issue 9): random, seeded requests on every route of the real server over a
// socket, on the dialect under test. See test/fuzz/harness.ts for what every answer must be.
// @test-alone: it bounds the process's heap and RSS growth (test/README.md).
//   INLET_FUZZ_SEED=<n>        replay a run (the seed is printed on every run and on failure)
//   INLET_FUZZ_CASES=<n>       cases (default 600 in `npm test`; test/system/fuzz-long.test.ts runs 8,000 per
//                              backend in the system tier; `npm run fuzz -- --cases 100000` for the big run)
//   INLET_FUZZ_ONLY=<i,j,…>    only these case indexes of the seed
//   INLET_FUZZ_CONCURRENCY=<n> connections at once (default 8)
//   INLET_FUZZ_MAX_FAILURES=<n> stop after this many failing cases (default 5)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dialect } from '../helpers.js';
import { freshSeed } from './random.js';
import { formatReport, runFuzz } from './harness.js';

function integerEnv(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new Error(`${name} must be a whole number, got "${raw}"`);
  return Number(raw.trim());
}

const seed = integerEnv('INLET_FUZZ_SEED') ?? freshSeed();
const cases = integerEnv('INLET_FUZZ_CASES') ?? 600;
const only = process.env.INLET_FUZZ_ONLY?.split(',')
  .map((s) => Number(s.trim()))
  .filter((n) => Number.isInteger(n));
const concurrency = integerEnv('INLET_FUZZ_CONCURRENCY');
const maxFailures = integerEnv('INLET_FUZZ_MAX_FAILURES');

test(`HTTP fuzz (${dialect}): ${only?.length ? `cases ${only.join(',')}` : `${cases} cases`} of seed ${seed} on every route`, async (t) => {
  t.diagnostic(`seed ${seed} (replay: INLET_FUZZ_SEED=${seed})`);
  const report = await runFuzz({
    seed,
    cases,
    ...(only === undefined || only.length === 0 ? {} : { only }),
    ...(concurrency === undefined ? {} : { concurrency }),
    ...(maxFailures === undefined ? {} : { maxFailures }),
    log: (line) => t.diagnostic(line),
  });
  const text = formatReport(report);
  for (const line of text.split('\n').slice(0, 4)) t.diagnostic(line);
  const failed = report.failures.length > 0 || report.runProblems.length > 0;
  if (failed) console.log(`\n${text}\n`);
  assert.ok(!failed, `HTTP fuzz failed (seed ${seed}); see the report above`);
});
