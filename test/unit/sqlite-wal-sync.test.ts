// Event commits synced off the event loop (src/storage/sqlite/wal-sync.ts, docs/design.md "Write path"):
// a caller's promise settles only after an fdatasync of the WAL that began after the call, callers arriving
// during one sync share the next, a failed sync is never retried into a false success, and the connection
// stays synchronous=FULL for every other write.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { uuidv7 } from '../../src/domain/ids.js';
import { openStorage } from '../../src/storage/connect.js';
import { WalSync } from '../../src/storage/sqlite/wal-sync.js';
import { eventRow, sqliteDirectWriter } from '../event-rows.js';

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-wal-sync-'));
  return test(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

describe('WAL sync off the event loop', () => {
  it('gives callers that arrive while a sync runs the next sync, shared, and not the one already running', () =>
    withDir(async (dir) => {
      const path = join(dir, 'db-wal');
      writeFileSync(path, 'x');
      const sync = new WalSync(path);
      const first = sync.sync();
      // These arrive after the first sync began: it may predate their commits, so they must wait for another.
      const later = Array.from({ length: 20 }, () => sync.sync());
      await first;
      assert.equal(sync.syncs, 1);
      await Promise.all(later);
      assert.equal(sync.syncs, 2, 'twenty callers during one sync share exactly one more');
      await sync.sync();
      assert.equal(sync.syncs, 3, 'a caller with nothing running gets a sync of its own');
      await sync.close();
    }));

  it('fails with SQLITE_IOERR (503, not a retry) and keeps failing once a sync failed, even if the file is back', () =>
    withDir(async (dir) => {
      const path = join(dir, 'missing-wal');
      const sync = new WalSync(path);
      const error = await sync.sync().then(
        () => assert.fail('a sync of a missing file succeeded'),
        (e: unknown) => e as { code?: string; message: string },
      );
      assert.equal(error.code, 'SQLITE_IOERR');
      assert.match(error.message, /fdatasync of the SQLite WAL .*missing-wal/);
      writeFileSync(path, 'x');
      await assert.rejects(sync.sync(), (e: unknown) => e === error);
      assert.equal(sync.syncs, 0);
      await sync.close();
    }));

  it('answers a write only once its WAL sync has finished, duplicates too, and fails it with the sync', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const storage = await openStorage(`sqlite:${file}`);
      const productId = uuidv7();
      await storage.products.create({ id: productId, name: 'ack-after-sync', createdAt: new Date().toISOString() });
      await storage.close();
      // A sync that finishes when the test says so.
      const pending: Array<{ resolve: () => void; reject: (error: Error) => void }> = [];
      const walSync = {
        sync: () => new Promise<void>((resolve, reject) => pending.push({ resolve, reject })),
      } as unknown as WalSync;
      const { writer, close } = sqliteDirectWriter(file, { walSync });
      const settled = (promise: Promise<unknown>) => {
        const state = { done: false };
        promise.then(
          () => (state.done = true),
          () => (state.done = true),
        );
        return state;
      };
      const turns = async () => {
        for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
      };
      for (const [label, externalId] of [
        ['created', 'a'],
        ['duplicate', 'a'],
      ] as const) {
        const write = writer.insertMany([eventRow(productId, externalId)]);
        const state = settled(write);
        await turns();
        assert.equal(pending.length, 1, `${label}: the commit asked for a sync`);
        assert.equal(state.done, false, `${label}: not answered before the sync finished`);
        pending.shift()!.resolve();
        assert.equal((await write)[0]!.status, label);
      }
      const failing = writer.insertMany([eventRow(productId, 'b')]);
      await turns();
      pending.shift()!.reject(Object.assign(new Error('EIO'), { code: 'SQLITE_IOERR' }));
      await assert.rejects(failing, /EIO/);
      await close();
    }));

  it('stores a group through the real writer, answers duplicates, and leaves the connection at synchronous=FULL', () =>
    withDir(async (dir) => {
      const storage = await openStorage(`sqlite:${join(dir, 'inlet.db')}`);
      try {
        const product = { id: uuidv7() };
        await storage.products.create({ id: product.id, name: 'wal-sync', createdAt: new Date().toISOString() });
        const row = (externalId: string) => eventRow(product.id, externalId);
        const first = await storage.events.insertMany([row('a'), row('b')]);
        assert.deepEqual(
          first.map((o) => o.status),
          ['created', 'created'],
        );
        const again = await storage.events.insertMany([row('b'), row('c')]);
        assert.deepEqual(
          again.map((o) => o.status),
          ['duplicate', 'created'],
        );
        assert.equal(again[0]!.event.id, first[1]!.event.id);
        const level = await sql<{ synchronous: number }>`PRAGMA synchronous`.execute(storage.db);
        assert.equal(level.rows[0]!.synchronous, 2, 'FULL for every write that is not an event commit');
        const count = await sql<{ n: number }>`SELECT count(*) AS n FROM events`.execute(storage.db);
        assert.equal(count.rows[0]!.n, 3);
      } finally {
        await storage.close();
      }
    }));
});
