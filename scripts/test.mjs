#!/usr/bin/env node
// The test runner. Two tiers (test/README.md says which file goes where):
//   npm test                   default tier: every test/**/*.test.ts outside test/system/.
//                              test/unit/** (dialect-free) runs once, in one process; every other file is a
//                              database test and runs once per backend, all of them in ONE process per backend
//                              (scripts/test-entry.mjs), the backends side by side.
//   npm run test:system        system tier: test/system/**/*.test.ts (servers as child processes, kill -9, own
//                              PostgreSQL or NATS, long runs), one process per file, one file at a time, per backend
//                              (test/system/unit/**: dialect-free long runs, once);
//                              the time limit (INLET_TEST_JOB_TIMEOUT_S) is each file's.
//   npm test -- FILE...        only these files, each run the way its tier runs it.
// Backends: SQLite always, PostgreSQL when reachable (INLET_TEST_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/test).
//   INLET_TEST_DIALECTS=sqlite|postgres|sqlite,postgres   choose explicitly
//   INLET_TEST_REQUIRE_POSTGRES=1                         fail instead of skipping PostgreSQL (CI)
//   INLET_TEST_FILE_CONCURRENCY=N                         database test files run N at a time inside their process
//                                                         (default: 3 on PostgreSQL, whose process mostly waits on the
//                                                         server; 1 on SQLite, which is CPU-bound in-process)
//   INLET_TEST_RESULT_FILE=path                           also write {"passed","failed","skipped"} there (.ci/run)
//   INLET_TEST_TMPDIR=dir                                 where the default tier's test databases (SQLite files) go
// The default tier must stay under 90 s (clarifications §6) and checks behaviour, not durability, so it is spared
// the disk's flushes: its SQLite test databases go to /dev/shm when that has 2 GiB free, and the PostgreSQL test
// database commits with synchronous_commit=off and plans no parallel query. Why each, with the figures:
// docs/design.md, "The default tier stays under 90 s".
// The last line is always "total: N passed, N failed"; the exit code is non-zero when anything failed.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { findTests } from './find-tests.mjs';
import pg from 'pg';

const postgresUrl = process.env.INLET_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const requirePostgres = process.env.INLET_TEST_REQUIRE_POSTGRES === '1';
/** A run that takes longer than this is stuck: it is killed and counted as failed. */
const JOB_TIMEOUT_MS = Number(process.env.INLET_TEST_JOB_TIMEOUT_S || 900) * 1000;
const entry = join('scripts', 'test-entry.mjs');

/**
 * 'system' (test/system/**), 'systemUnit' (test/system/unit/**: dialect-free and long, run once), 'unit'
 * (test/unit/**: dialect-free) or 'database' (every other test file).
 */
function tierOf(file) {
  const parts = relative('test', file).split(sep);
  if (parts[0] === 'system') return parts[1] === 'unit' ? 'systemUnit' : 'system';
  if (parts[0] === 'unit') return 'unit';
  return 'database';
}

async function postgresProblem() {
  const client = new pg.Client({ connectionString: postgresUrl, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (error) {
    return error.message;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Test schemas older than this were left by a run that was killed (test/helpers.ts names them by time). */
const STALE_SCHEMA_SECONDS = 3 * 3600;

/**
 * The PostgreSQL test database, before a run: commits without waiting for their WAL flush (see the header), and
 * the schemas that killed runs left behind dropped. Each holds ~33 relations; hundreds of them made the catalog
 * 100 times larger (41,144 rows in pg_class) and cost the default tier's PostgreSQL server 34 s of CPU instead
 * of 16 (measured 2026-11-26). A note instead when either is not allowed.
 */
async function preparePostgres() {
  const client = new pg.Client({ connectionString: postgresUrl, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    const { rows } = await client.query('SELECT current_database() AS name');
    const name = rows[0].name.replace(/"/g, '""');
    await client.query(`ALTER DATABASE "${name}" SET synchronous_commit = off`);
    await client.query(`ALTER DATABASE "${name}" SET max_parallel_workers_per_gather = 0`);
  } catch (error) {
    console.log(`(PostgreSQL test database keeps synchronous_commit and parallel query: ${error.message})`);
  }
  try {
    const { rows } = await client.query(`SELECT nspname AS name FROM pg_namespace WHERE nspname LIKE 'test\\_%'`);
    const now = Date.now() / 1000;
    // test_<base-36 seconds>_<hex>, or the older test_<12 hex> and test_traffic_<12 hex> (before names
    // carried their time; the traffic suites now take theirs from test/helpers.ts like every other suite).
    const stale = rows
      .map((row) => row.name)
      .filter((name) => {
        if (/^test_(traffic_)?[0-9a-f]{12}$/.test(name)) return true;
        const timed = /^test_([0-9a-z]+)_[0-9a-f]+$/.exec(name);
        return timed !== null && now - parseInt(timed[1], 36) > STALE_SCHEMA_SECONDS;
      });
    for (const name of stale) await client.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`).catch(() => {});
    if (stale.length > 0) console.log(`dropped ${stale.length} test schemas left by earlier runs that were killed`);
  } catch (error) {
    console.log(`(could not look for stale test schemas: ${error.message})`);
  } finally {
    await client.end().catch(() => {});
  }
}

/** A fresh directory in /dev/shm (memory) for the default tier's test databases, or undefined for the usual one. */
function fastTempDir() {
  if (process.env.INLET_TEST_TMPDIR) return undefined;
  try {
    const fs = statfsSync('/dev/shm');
    if (fs.bavail * fs.bsize < 2 * 1024 ** 3) return undefined;
    return mkdtempSync('/dev/shm/inlet-test-');
  } catch {
    return undefined;
  }
}

async function dialects() {
  if (process.env.INLET_TEST_DIALECTS)
    return process.env.INLET_TEST_DIALECTS.split(',')
      .map((d) => d.trim())
      .filter(Boolean);
  const problem = await postgresProblem();
  if (problem === undefined) return ['sqlite', 'postgres'];
  if (requirePostgres) {
    console.error(
      `PostgreSQL is required (INLET_TEST_REQUIRE_POSTGRES=1) but ${postgresUrl} is not reachable: ${problem}`,
    );
    process.exit(1);
  }
  console.log(
    `\n*** PostgreSQL at ${postgresUrl} is not reachable (${problem}): SKIPPING the PostgreSQL run; only SQLite is tested. ***\n`,
  );
  return ['sqlite'];
}

/**
 * Runs one node process; `live` streams its output, otherwise it is printed in one piece when the
 * process ends (several run side by side). Resolves with the counts from node's closing summary.
 */
function run(job, live) {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, job.args, {
      // No test connects beyond loopback (clarifications §4): the outbound guard allows loopback only.
      env: {
        ...process.env,
        INLET_TEST_POSTGRES_URL: postgresUrl,
        INLET_OUTBOUND_ALLOW: '127.0.0.0/8,::1',
        INLET_OUTBOUND_ALLOW_PRIVATE: 'true',
        ...job.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const collect = (stream) => (chunk) => {
      if (live) stream.write(chunk);
      output += chunk.toString();
    };
    child.stdout.on('data', collect(process.stdout));
    child.stderr.on('data', collect(process.stderr));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, JOB_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      if (!live) process.stdout.write(`\n=== ${job.title} ===\n${output}`);
      const count = (label) =>
        [...output.matchAll(new RegExp(`^ℹ ${label} (\\d+)$`, 'gm'))].reduce((sum, m) => sum + Number(m[1]), 0);
      const summarised = /^ℹ pass \d+$/m.test(output);
      const result = { pass: count('pass'), fail: count('fail') + count('cancelled'), skipped: count('skipped') };
      let failed = code !== 0 || !summarised || timedOut;
      if (timedOut) console.log(`${job.title}: killed after ${JOB_TIMEOUT_MS / 1000} s (INLET_TEST_JOB_TIMEOUT_S)`);
      else if (!summarised)
        console.log(`${job.title}: ended (code ${code}, signal ${signal}) without node's test summary`);
      if (failed && result.fail === 0) result.fail = 1;
      console.log(
        `${job.title}: ${result.pass} passed, ${result.fail} failed, ${result.skipped} skipped in ${seconds} s`,
      );
      resolve({ ...result, failed });
    });
  });
}

const tsx = ['--import', 'tsx'];
const reporter = ['--test-reporter=spec'];

function inOneProcess(title, label, files, env) {
  return {
    title: `${title}: ${files.length} files in one process`,
    args: [...tsx, ...reporter, entry, label, ...files],
    env,
  };
}

/** One job per file, so that the time limit is a file's (a stuck file is named, and a slow machine does not
 *  fail a whole tier of files that each finish in time). */
function onePerFile(title, files, env) {
  return files.map((file) => ({
    title: `${title}: ${relative('test', file)}`,
    args: [...tsx, '--test', ...reporter, file],
    env,
  }));
}

const args = process.argv.slice(2);
const systemTier = args.includes('--system');
const named = args.filter((a) => !a.startsWith('--'));
const files =
  named.length > 0
    ? named
    : systemTier
      ? findTests(join('test', 'system'))
      : findTests('test').filter((f) => !tierOf(f).startsWith('system'));
const byTier = { unit: [], database: [], system: [], systemUnit: [] };
for (const file of files) byTier[tierOf(file)].push(file);
const backends = byTier.database.length + byTier.system.length > 0 ? await dialects() : [];

if (backends.includes('postgres')) await preparePostgres();
// The default tier's test databases (see the header); the system tier's stay on disk.
const defaultTierTemp = byTier.unit.length + byTier.database.length > 0 ? fastTempDir() : undefined;
const tempEnv = defaultTierTemp ? { INLET_TEST_TMPDIR: defaultTierTemp } : {};
if (defaultTierTemp)
  console.log(`default tier: SQLite test databases in ${defaultTierTemp} (memory; INLET_TEST_TMPDIR=dir to choose)`);

// Side by side: the dialect-free process and one database process per backend.
const parallel = [];
if (byTier.unit.length > 0)
  parallel.push(inOneProcess('dialect-free', 'unit', byTier.unit, { INLET_TEST_DIALECT: undefined, ...tempEnv }));
if (byTier.database.length > 0) {
  for (const dialect of backends) {
    const concurrency = process.env.INLET_TEST_FILE_CONCURRENCY || (dialect === 'postgres' ? '3' : '1');
    parallel.push(
      inOneProcess(`${dialect}`, dialect, byTier.database, {
        INLET_TEST_DIALECT: dialect,
        INLET_TEST_FILE_CONCURRENCY: concurrency,
        ...tempEnv,
      }),
    );
  }
}
// System tests start servers, kill them and time things: one backend after the other, one file at a time.
const sequential = [
  ...onePerFile('system, dialect-free', byTier.systemUnit, { INLET_TEST_DIALECT: undefined }),
  ...(byTier.system.length === 0
    ? []
    : backends.flatMap((dialect) => onePerFile(`system ${dialect}`, byTier.system, { INLET_TEST_DIALECT: dialect }))),
];

if (files.length === 0) {
  console.log('no test files found');
}
const started = Date.now();
const results = await Promise.all(parallel.map((job) => run(job, parallel.length === 1)));
if (defaultTierTemp) rmSync(defaultTierTemp, { recursive: true, force: true });
for (const job of sequential) results.push(await run(job, true));

const total = results.reduce(
  (sum, r) => ({ pass: sum.pass + r.pass, fail: sum.fail + r.fail, skipped: sum.skipped + r.skipped }),
  { pass: 0, fail: 0, skipped: 0 },
);
const failed = results.some((r) => r.failed);
if (process.env.INLET_TEST_RESULT_FILE)
  writeFileSync(
    process.env.INLET_TEST_RESULT_FILE,
    JSON.stringify({ passed: total.pass, failed: total.fail, skipped: total.skipped }),
  );
console.log(`\nwall ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`total: ${total.pass} passed, ${total.fail} failed, ${total.skipped} skipped`);
process.exit(failed ? 1 : 0);
