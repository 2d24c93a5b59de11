// The SQLite writer thread (src/storage/sqlite/writer-thread.ts, docs/design.md "A writer thread for SQLite"):
// events committed by the thread keep every promise of the in-process writer: an external_id is stored once per
// product and source (across the hand-over from the in-process writer, merges and a restart), reads by subject
// find an event once it is acknowledged, and the storage closes cleanly.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { uuidv7 } from '../../../src/domain/ids.js';
import { openStorage, type OpenedStorage } from '../../../src/storage/connect.js';
import { EventKeys } from '../../../src/storage/sqlite/event-keys.js';
import { sqliteEventWriting } from '../../../src/storage/sqlite/event-writing.js';
import { semiSpaceFlag } from '../../../src/storage/sqlite/writer-thread.js';
import { eventRow, sqliteDirectWriter } from '../../event-rows.js';

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-writer-thread-'));
  return test(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

async function product(storage: OpenedStorage): Promise<string> {
  const id = uuidv7();
  await storage.products.create({ id, name: 'writer', createdAt: new Date().toISOString() });
  return id;
}

async function count(storage: OpenedStorage): Promise<number> {
  const result = await sql<{ n: number }>`SELECT count(*) AS n FROM events`.execute(storage.db);
  return result.rows[0]!.n;
}

describe('SQLite writer thread', () => {
  it('stores each external_id once across the hand-over, merges and a restart, and reads by subject see acknowledged events', () =>
    withDir(async (dir) => {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      // 30 events in-process, then the thread; a tail of 40 keys: merges in the thread too.
      let storage = await openStorage(url, { sqliteEventKeysTail: 40, sqliteWriterThreadAfter: 30 });
      const a = await product(storage);
      const first = new Map<string, string>();
      // The key index's figures are counters on /metrics: they never go down across the hand-over.
      const stats = () => storage.capabilities.telemetry.eventKeyStats!();
      let before = stats();
      const ids = Array.from({ length: 300 }, (_, i) => `e${i}`);
      for (let i = 0; i < ids.length; i += 10) {
        // Each batch repeats the previous batch's last id: a duplicate of a row committed a moment before.
        const batch = ids.slice(i, i + 10).map((id) => eventRow(a, id, { subjectId: `s${i / 10}` }));
        if (i > 0) batch.push(eventRow(a, ids[i - 1]!));
        const outcomes = await storage.events.insertMany(batch);
        outcomes.slice(0, 10).forEach((o, j) => {
          assert.equal(o.status, 'created', ids[i + j]);
          first.set(ids[i + j]!, o.event.id);
        });
        if (i > 0) {
          assert.equal(outcomes[10]!.status, 'duplicate', `${ids[i - 1]} again`);
          assert.equal(outcomes[10]!.event.id, first.get(ids[i - 1]!));
        }
        // Acknowledged, so a read by its subject finds it.
        const read = await storage.events.listBySubjects(a, 'user', [`s${i / 10}`], 100);
        assert.equal(read.length, 10, `subject s${i / 10}`);
        const now = stats();
        for (const counter of ['merges', 'mergeSeconds', 'moves', 'swept', 'sweepSeconds', 'busySeconds'] as const)
          assert.ok(now[counter] >= before[counter], `${counter} went from ${before[counter]} to ${now[counter]}`);
        before = now;
      }
      assert.ok((storage.capabilities.telemetry.eventKeyStats?.().merges ?? 0) > 0, 'the thread merged keys');
      // Two concurrent commits in flight, one id in both: stored once.
      const [x, y] = await Promise.all([
        storage.events.insertMany([eventRow(a, 'both'), eventRow(a, 'x1')]),
        storage.events.insertMany([eventRow(a, 'both'), eventRow(a, 'y1')]),
      ]);
      assert.deepEqual([x![0]!.status, y![0]!.status].sort(), ['created', 'duplicate']);
      await storage.close();

      storage = await openStorage(url, { sqliteEventKeysTail: 40, sqliteWriterThreadAfter: 0 });
      try {
        const again = await storage.events.insertMany(ids.map((id) => eventRow(a, id)));
        assert.ok(again.every((o) => o.status === 'duplicate'));
        assert.deepEqual(
          again.map((o) => o.event.id),
          ids.map((id) => first.get(id)),
        );
        assert.equal(await count(storage), 303);
        const read = await storage.events.listBySubjects(a, 'user', ['s29'], 100);
        assert.equal(read.length, 10);
      } finally {
        await storage.close();
      }
    }));
});

describe('SQLite writer thread, when it dies', () => {
  it('fails the commits it had in flight as unavailable, and the in-process writer takes over without doubling an id', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const setup = await openStorage(`sqlite:${file}`);
      const a = await product(setup);
      await setup.close();
      const { raw, db, subjects, close } = sqliteDirectWriter(file);
      const writing = sqliteEventWriting({
        db,
        raw,
        makeKeys: () =>
          new EventKeys(raw, { exclusive: (work) => db.connection().execute(async () => work()), synchronous: 'FULL' }),
        subjects,
        walSync: undefined,
        thread: { path: file, checkpointThread: false, syncOffLoop: false },
        after: 0,
      });
      try {
        // The first commit runs in-process and starts the thread; the next ones go to it once it is up.
        await writing.insertMany([eventRow(a, 'first')]);
        for (let i = 0; writing.thread() === undefined; i++) {
          assert.ok(i < 200, 'the thread started');
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        const stored = await writing.insertMany([eventRow(a, 'by-thread')]);
        assert.equal(stored[0]!.status, 'created');
        const inFlight = writing.insertMany([eventRow(a, 'in-flight')]);
        await writing.thread()!.terminate();
        await assert.rejects(inFlight, (error: { code?: string }) => error.code === 'SQLITE_IOERR');
        assert.equal(writing.thread(), undefined);
        const again = await writing.insertMany([eventRow(a, 'first'), eventRow(a, 'by-thread'), eventRow(a, 'after')]);
        assert.deepEqual(
          again.map((o) => o.status),
          ['duplicate', 'duplicate', 'created'],
        );
        assert.equal(again[1]!.event.id, stored[0]!.event.id);
      } finally {
        await writing.close();
        await close();
      }
    }));
});

describe('SQLite writer thread, its young generation', () => {
  it('reads the --max-semi-space-size the process was given', () => {
    assert.equal(semiSpaceFlag(['--max-semi-space-size=32']), '32');
    assert.equal(semiSpaceFlag(['--max_semi_space_size', '8'], '--max-semi-space-size=64'), '8');
    assert.equal(semiSpaceFlag([], '--max-semi-space-size=64 --inspect'), '64');
    assert.equal(semiSpaceFlag(['--max-old-space-size=512']), undefined);
  });

  it("is the small one asked for, not the server's --max-semi-space-size, which is put back afterwards", () =>
    withDir(async (dir) => {
      // A worker that fills its young generation and reports its committed size: V8 sizes a worker's semi-spaces
      // by the process's flag ahead of its resourceLimits unless the flag is lifted while its isolate is made.
      const writerThread = new URL('../../../src/storage/sqlite/writer-thread.ts', import.meta.url).href;
      const script = join(dir, 'young.mjs');
      writeFileSync(
        script,
        `import { Worker } from 'node:worker_threads';
        import { liftSemiSpaceFlag } from ${JSON.stringify(writerThread)};
        const filler = \`
          const { parentPort } = require('node:worker_threads');
          const v8 = require('node:v8');
          parentPort.postMessage('up');
          let keep = [];
          for (let i = 0; i < 3e6; i++) { keep.push({ a: 'x' + i, b: [i] }); if (keep.length > 2000) keep = []; }
          parentPort.postMessage(v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size);
        \`;
        const young = (lifted) => new Promise((resolve) => {
          const restore = lifted ? liftSemiSpaceFlag() : () => {};
          const worker = new Worker(filler, { eval: true, resourceLimits: { maxYoungGenerationSizeMb: 16 } });
          worker.on('message', (m) => {
            if (m === 'up') return restore();
            resolve(m / 1048576);
            void worker.terminate();
          });
        });
        const lifted = await young(true);
        const after = await young(false);
        console.log(JSON.stringify({ lifted, after }));`,
      );
      const out = execFileSync(process.execPath, ['--max-semi-space-size=32', '--import', 'tsx', script], {
        encoding: 'utf8',
      });
      const { lifted, after } = JSON.parse(out) as { lifted: number; after: number };
      assert.ok(lifted <= 16, `the thread's new space: ${lifted} MB`);
      assert.ok(after > 16, `a later worker's new space, the flag put back: ${after} MB`);
    }));
});
