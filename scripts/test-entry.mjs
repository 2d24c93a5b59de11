// One process, many test files: scripts/test.mjs starts this module (under tsx) with a label and the
// files to run. Each file is imported inside a suite of its own, so its top-level before/after hooks
// and tests belong to that file's suite (not to the process's root test, where every `after` would
// wait for the very end). Files run INLET_TEST_FILE_CONCURRENCY at a time (scripts/test.mjs sets it;
// default 1); the tests inside one file always run in order. A file that contains the marker
// `@test-alone` (in a comment) runs by itself after the others: for tests that measure the process
// (heap, RSS, CPU) or listen on process-wide events. Works the same on Node 20, 22 and 24 (the suite
// function may be async: node:test awaits it before running what it registered).
import { after, describe } from 'node:test';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [label, ...files] = process.argv.slice(2);
const concurrency = Math.max(1, Number(process.env.INLET_TEST_FILE_CONCURRENCY || 1));
/** After the last test, anything still holding the event loop is a leak: name it and fail rather than hang. */
const LEAK_GRACE_MS = 10_000;

const runsAlone = (file) => readFileSync(file, 'utf8').includes('@test-alone');
const alone = files.filter(runsAlone);
const together = files.filter((file) => !alone.includes(file));

function fileSuite(file) {
  describe(file, { concurrency: 1 }, async () => {
    await import(pathToFileURL(resolve(file)).href);
  });
}

describe(label, { concurrency: 1 }, () => {
  if (concurrency > 1 && together.length > 1) {
    describe(`${together.length} files, ${concurrency} at a time`, { concurrency }, () => together.forEach(fileSuite));
  } else {
    together.forEach(fileSuite);
  }
  alone.forEach(fileSuite);
  after(() => {
    setTimeout(() => {
      const handles = process
        ._getActiveHandles()
        .filter((handle) => handle !== process.stdout && handle !== process.stderr && handle !== process.stdin)
        .map((handle) => handle?.constructor?.name ?? typeof handle);
      console.error(
        `\n${label}: the process is still busy ${LEAK_GRACE_MS / 1000} s after its last test (open handles: ${handles.join(', ') || 'none'}). A test leaves a server, socket, pool or timer open.`,
      );
      process.exit(1);
    }, LEAK_GRACE_MS).unref();
  });
});
