// The WAL checkpoint thread (src/storage/sqlite/checkpointer.ts, docs/design.md "Write path"): under continuous
// writes it copies the WAL into the database file and makes the WAL start over, so the WAL stays bounded, and
// every committed row is in the file once it stopped.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { startCheckpointer, startCheckpointerOnDemand } from '../../../src/storage/sqlite/checkpointer.js';

/** A fresh WAL-mode database file (synchronous=NORMAL) with `schema`, removed after `test`. */
async function withWalDatabase(
  schema: string,
  test: (db: BetterSqlite3.Database, path: string) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-checkpointer-'));
  try {
    const db = new BetterSqlite3(join(dir, 'db.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec(schema);
    await test(db, join(dir, 'db.sqlite'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('SQLite checkpoint thread', () => {
  it('keeps the WAL bounded under continuous writes and leaves every committed row in the file', async () => {
    await withWalDatabase(
      'CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v TEXT NOT NULL)',
      async (db, path) => {
        // A restart every 200 frames (800 KiB), checked every 10 ms.
        const checkpointer = startCheckpointer(db, path, 'NORMAL', 10, 200);
        assert.equal(db.pragma('wal_autocheckpoint', { simple: true }), 0);
        const insert = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)');
        const group = db.transaction((from: number) => {
          for (let i = from; i < from + 200; i++) insert.run(`${Math.random()}-${i}`, 'x'.repeat(200));
        });
        let rows = 0;
        let walMax = 0;
        while (rows < 60_000) {
          group(rows);
          rows += 200;
          walMax = Math.max(walMax, statSync(`${path}-wal`).size);
          // Let the worker's timer and our event loop run between commits, as the server's would.
          await new Promise((resolve) => setImmediate(resolve));
        }
        // Each commit dirties ~200 random pages of the unique index (~800 KiB of WAL). Without the restart the
        // WAL holds every commit (97 MB for 66,000 rows in a version where it did not work); with it, a few
        // commits (15–37 MB seen on the loaded 2-core machine, where the worker thread waits for a core).
        assert.ok(walMax < 48 * 1024 * 1024, `WAL reached ${walMax} bytes for ${rows} rows`);
        await checkpointer.stop();
        db.close();
        const reopened = new BetterSqlite3(path, { readonly: true });
        assert.equal((reopened.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, rows);
        reopened.close();
      },
    );
  });
});

describe('SQLite checkpoint thread, behind the writer', () => {
  it('lets the WAL start over under bursts of writes, the writer copying at most twice the threshold', async (t) => {
    await withWalDatabase(
      'CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v TEXT NOT NULL)',
      async (db, path) => {
        // A restart every 6,000 frames; the writer's copy may be at most 100 frames beyond the thread's last pass.
        const checkpointer = startCheckpointer(db, path, 'NORMAL', 10, 6000, 100);
        const copies: number[] = [];
        let threadBackfilled = 0;
        let threadCopied = 0;
        // The WAL starts over by itself at the writer's next commit once the thread has copied all of it (no reader
        // in the way), or after the writer's own copy: either way its frame count drops.
        let restarts = 0;
        let lastWalFrames = 0;
        checkpointer.observe((event) => {
          if (event.walFrames < lastWalFrames) restarts++;
          lastWalFrames = event.walFrames;
          if (event.backfilled < 0) return;
          if (event.by === 'thread') {
            threadCopied +=
              event.backfilled >= threadBackfilled ? event.backfilled - threadBackfilled : event.backfilled;
            threadBackfilled = event.backfilled;
          }
          // Every copy by the writer counts, the fallback's too (a WAL past twice the threshold: on a quiet machine
          // a writer this fast keeps every pass of the thread over 64 frames, so the WAL starts over that way).
          else copies.push(event.backfilled - threadBackfilled);
        });
        const insert = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)');
        const group = db.transaction((from: number) => {
          for (let i = from; i < from + 20; i++) insert.run(`${Math.random()}-${i}`, 'x'.repeat(200));
        });
        // Bursts of small commits of random index pages (~20 frames each) with rests between them, as a server's
        // commits come in bursts and the background deletes rest between batches: the thread's pass over
        // thousands of frames takes long enough that hundreds more are committed meanwhile. (A writer that never
        // rests keeps every pass of the thread over the limit; then the WAL starts over only at twice the
        // threshold, with a copy of up to a few thousand frames by the writer: measured 9–13 % of all frames on a
        // quiet machine, bench/README "Quiet-window runs, 2026-11-26". Not solved.)
        let rows = 0;
        while (rows < 80_000) {
          // A burst of 100 commits (~2,000 frames), each followed only by a turn of the event loop, then a rest.
          for (let i = 0; i < 100; i++) {
            group(rows);
            rows += 20;
            await new Promise((resolve) => setImmediate(resolve));
          }
          await new Promise((resolve) => setTimeout(resolve, 30));
        }
        await checkpointer.stop();
        db.close();
        assert.ok(restarts > 0, 'the WAL never started over');
        // The writer's share of the frames copied is reported, not asserted: it depends on the machine's load. At
        // load 10 with a writer that never rested (h18) it was 0.3–0.5 % with the wait for the thread to catch up and
        // 8–10 % without; on a quiet machine, with these bursts, under 3 % with the wait and without it alike; with
        // three of these tests at once on 2 cores, 6 %; with a writer that never rests on a quiet machine, 9–13 %
        // (the WAL then starts over only at twice the threshold). No bound holds for all of them: issue 11's notes.
        // What is asserted is what the mechanism guarantees: the WAL starts over, and no copy by the writer exceeds
        // what the WAL may hold before the writer copies regardless (twice the threshold).
        const writer = copies.reduce((sum, n) => sum + Math.max(0, n), 0);
        t.diagnostic(
          `the writer copied ${writer} of ${writer + threadCopied} frames on the event loop (copies: ${copies.join(', ')})`,
        );
        assert.ok(
          copies.every((n) => n <= 2 * 6000),
          `a copy by the writer beyond twice the threshold: ${copies.join(', ')}`,
        );
      },
    );
  });
});

describe('SQLite checkpoint thread, room for background deletes', () => {
  it('does not hold them back while a reader keeps the WAL from starting over', async () => {
    await withWalDatabase('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)', async (db, path) => {
      const checkpointer = startCheckpointer(db, path, 'NORMAL', 10, 200, 64);
      // A reader's open snapshot: no checkpoint copies past it, so the WAL cannot start over while it lasts.
      const reader = new BetterSqlite3(path);
      reader.exec('BEGIN');
      reader.prepare('SELECT count(*) AS n FROM t').get();
      const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
      for (let i = 0; i < 2000; i++) insert.run('x'.repeat(1000));
      // The thread has long copied all it can (passes every 10 ms).
      await new Promise((resolve) => setTimeout(resolve, 300));
      const started = performance.now();
      await checkpointer.roomInWal(2000);
      const waited = performance.now() - started;
      reader.exec('COMMIT');
      reader.close();
      await checkpointer.stop();
      db.close();
      // Waiting would not let the WAL start over: only the reader can. (Before, each batch waited the whole 2 s.)
      assert.ok(waited < 500, `waited ${Math.round(waited)} ms`);
    });
  });
});

describe('SQLite checkpoint thread, room for background deletes while the WAL is due to start over', () => {
  it('holds them from the pass that finds the WAL due until the writer has copied its tail, caught up or not', async () => {
    await withWalDatabase('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)', async (db, path) => {
      const checkpointer = startCheckpointer(db, path, 'NORMAL', 10, 200, 64);
      // What the checkpointer last reported when each waiting batch was let through.
      let last = '';
      const held: Array<Promise<string>> = [];
      checkpointer.observe((event) => {
        last =
          event.by === 'writer'
            ? 'the writer copied'
            : event.walFrames >= 200
              ? `a pass found ${event.walFrames} frames`
              : 'the WAL started over';
        // A pass that finds the WAL due: a batch asking now must wait until the writer has copied its tail (or the
        // WAL started over by itself), even when this pass caught up: a batch let through then is what the writer
        // would copy on the event loop.
        if (event.by === 'thread' && event.walFrames >= 200 && held.length < 5)
          held.push(checkpointer.roomInWal(5_000).then(() => last));
      });
      const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
      const deadline = Date.now() + 10_000;
      while (held.length < 5 && Date.now() < deadline) {
        // ~250 frames a transaction: more than the threshold between two passes, also when the thread keeps up
        // (with 50 rows, ~15 frames, the WAL started over by itself and on a quiet machine never came due again).
        db.transaction(() => {
          for (let i = 0; i < 1000; i++) insert.run('x'.repeat(1000));
        })();
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      const released = await Promise.all(held);
      await checkpointer.stop();
      db.close();
      assert.equal(released.length, 5, 'the WAL never came due');
      for (const reason of released)
        assert.ok(
          !reason.startsWith('a pass found'),
          `a batch was let through while the WAL was due: ${JSON.stringify(released)}`,
        );
    });
  });
});

describe("SQLite checkpoint thread, the writer's restart copy", () => {
  it("waits for a WAL sync off the event loop before it copies (the copy's own sync then finds little to write)", async () => {
    await withWalDatabase('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)', async (db, path) => {
      let synced = 0;
      let pending: (() => void) | undefined;
      // A sync that finishes only when the test lets it: the writer must not copy before.
      const syncWal = () => new Promise<void>((resolve) => (pending = () => (synced++, resolve())));
      const checkpointer = startCheckpointer(db, path, 'NORMAL', 10, 200, 64, syncWal);
      const copies: number[] = [];
      checkpointer.observe((event) => {
        if (event.by === 'writer') copies.push(synced);
      });
      const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
      const deadline = Date.now() + 10_000;
      while (pending === undefined && Date.now() < deadline) {
        // ~250 frames a transaction: more than the threshold between two passes, also when the thread keeps up
        // (with 50 rows, ~15 frames, the WAL started over by itself and on a quiet machine never came due again).
        db.transaction(() => {
          for (let i = 0; i < 1000; i++) insert.run('x'.repeat(1000));
        })();
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      assert.ok(pending !== undefined, 'the WAL never came due');
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(copies, [], 'the writer copied before its WAL sync finished');
      pending!();
      while (copies.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      await checkpointer.stop();
      db.close();
      assert.deepEqual(copies.slice(0, 1), [1], 'one copy, right after the sync');
    });
  });
});

describe('SQLite checkpoint thread, started on demand', () => {
  it('starts no thread while the WAL stays small, starts one once it holds the threshold, and checkpoints then', async () => {
    await withWalDatabase('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)', async (db, path) => {
      const passes: string[] = [];
      // Started at 256 KiB of WAL, looked at every 10 ms.
      const checkpointer = startCheckpointerOnDemand(db, path, 'NORMAL', { startBytes: 256 * 1024, intervalMs: 10 });
      checkpointer.observe((event) => passes.push(event.by));
      assert.equal(db.pragma('wal_autocheckpoint', { simple: true }), 0, 'the writer never checkpoints by itself');
      const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
      insert.run('small');
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(checkpointer.started, false, 'a WAL of a few pages starts no thread');
      await checkpointer.roomInWal(1_000); // resolves at once without a thread
      db.transaction(() => {
        for (let i = 0; i < 400; i++) insert.run('x'.repeat(1_000));
      })();
      assert.ok(statSync(`${path}-wal`).size >= 256 * 1024);
      const deadline = Date.now() + 10_000;
      while (!(checkpointer.started && passes.includes('thread')) && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      assert.equal(checkpointer.started, true, 'the thread starts once the WAL holds the threshold');
      assert.ok(passes.includes('thread'), 'its passes reach a listener registered before it started');
      await checkpointer.stop();
      db.close();
      const reopened = new BetterSqlite3(path, { readonly: true });
      assert.equal((reopened.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 401);
      reopened.close();
    });
  });

  it('stops cleanly when it never started', async () => {
    await withWalDatabase('CREATE TABLE t (id INTEGER PRIMARY KEY)', async (db, path) => {
      const checkpointer = startCheckpointerOnDemand(db, path, 'NORMAL', { startBytes: 1024 * 1024, intervalMs: 10 });
      await checkpointer.stop();
      assert.equal(checkpointer.started, false);
      db.close();
    });
  });
});
