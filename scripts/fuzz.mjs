#!/usr/bin/env node
// npm run fuzz -- [--cases N] [--seed N] [--only i,j,…] [--concurrency N] [FILE…]
// Runs the fuzz suites (test/fuzz/**/*.test.ts, or the files named) through the test runner, on both
// backends like `npm test` (INLET_TEST_DIALECTS narrows it), with the options passed on as INLET_FUZZ_*.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { findTests } from './find-tests.mjs';

const OPTIONS = {
  '--cases': 'INLET_FUZZ_CASES',
  '--seed': 'INLET_FUZZ_SEED',
  '--only': 'INLET_FUZZ_ONLY',
  '--concurrency': 'INLET_FUZZ_CONCURRENCY',
};

const env = { ...process.env };
const files = [];
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const [flag, inline] = args[i].split('=', 2);
  if (flag in OPTIONS) {
    const value = inline ?? args[++i];
    if (value === undefined) {
      console.error(`${flag} needs a value`);
      process.exit(2);
    }
    env[OPTIONS[flag]] = value;
  } else if (args[i].startsWith('--')) {
    console.error(`unknown option ${args[i]} (known: ${Object.keys(OPTIONS).join(', ')})`);
    process.exit(2);
  } else {
    files.push(args[i]);
  }
}
if (files.length === 0) files.push(...findTests(join('test', 'fuzz')));
if (files.length === 0) {
  console.error('no fuzz suites found in test/fuzz/');
  process.exit(2);
}
// A long run (100,000 cases) must not be taken for a stuck one.
env.INLET_TEST_JOB_TIMEOUT_S ??= '7200';
const child = spawn(process.execPath, ['scripts/test.mjs', ...files], { env, stdio: 'inherit' });
child.on('close', (code) => process.exit(code ?? 1));
