#!/usr/bin/env node
// Runs the whole test suite once per storage backend: SQLite always, PostgreSQL when a server is
// reachable (INLET_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test).
//   INLET_TEST_DIALECTS=sqlite|postgres|sqlite,postgres   choose explicitly
//   INLET_TEST_REQUIRE_POSTGRES=1                         fail instead of skipping PostgreSQL (CI)
//   npm test -- test/events-v2.test.ts                    run some files only
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

const postgresUrl = process.env.INLET_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const requirePostgres = process.env.INLET_TEST_REQUIRE_POSTGRES === '1';

function findTests(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return findTests(path);
      return name.endsWith('.test.ts') ? [path] : [];
    });
}

async function postgresReachable() {
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

async function dialects() {
  if (process.env.INLET_TEST_DIALECTS) return process.env.INLET_TEST_DIALECTS.split(',').map((d) => d.trim()).filter(Boolean);
  const problem = await postgresReachable();
  if (problem === undefined) return ['sqlite', 'postgres'];
  if (requirePostgres) {
    console.error(`PostgreSQL is required (INLET_TEST_REQUIRE_POSTGRES=1) but ${postgresUrl} is not reachable: ${problem}`);
    process.exit(1);
  }
  console.log(`\n*** PostgreSQL at ${postgresUrl} is not reachable (${problem}): SKIPPING the PostgreSQL run; only SQLite is tested. ***\n`);
  return ['sqlite'];
}

function run(dialect, files) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files],
      { env: { ...process.env, INLET_TEST_DIALECT: dialect, INLET_TEST_POSTGRES_URL: postgresUrl }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      output += chunk.toString();
      if (output.length > 1_000_000) output = output.slice(-100_000);
    });
    child.on('close', (code) => {
      const count = (label) => Number(output.match(new RegExp(`ℹ ${label} (\\d+)`))?.[1] ?? 0);
      resolve({ code: code ?? 1, pass: count('pass'), fail: count('fail') });
    });
  });
}

const argFiles = process.argv.slice(2);
const files = argFiles.length > 0 ? argFiles : findTests('test');
let failed = 0;
let passed = 0;
let exitCode = 0;
for (const dialect of await dialects()) {
  console.log(`\n=== ${dialect}: ${files.length} test files ===\n`);
  const result = await run(dialect, files);
  passed += result.pass;
  failed += result.fail;
  if (result.code !== 0) exitCode = 1;
  console.log(`${dialect}: ${result.pass} passed, ${result.fail} failed`);
}
if (exitCode !== 0 && failed === 0) failed = 1;
console.log(`\ntotal: ${passed} passed, ${failed} failed`);
process.exit(exitCode);
