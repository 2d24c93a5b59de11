// The delivery worker's store calls retried on the event loop when SQLite is busy (storage/busy-retry.ts):
// with busy_timeout 0, a state write that finds the write lock held by another connection fails at once and
// is retried after a timer; the thread's event loop runs meanwhile, and the write lands once the lock is free.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { isSqliteBusy, retryingBusy } from '../../src/storage/busy-retry.js';
import { openStorage } from '../../src/storage/connect.js';

describe('retryingBusy', () => {
  it('retries a method while it fails with SQLITE_BUSY, and passes other errors and sync results through', async () => {
    let calls = 0;
    const stats = { retries: 0 };
    const store = retryingBusy(
      {
        async write(value: number) {
          calls++;
          if (calls < 3) throw Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
          return value * 2;
        },
        async broken() {
          throw Object.assign(new Error('no such table'), { code: 'SQLITE_ERROR' });
        },
        plain: (x: string) => x.length,
      },
      stats,
    );
    assert.equal(await store.write(21), 42);
    assert.equal(calls, 3);
    assert.equal(stats.retries, 2);
    await assert.rejects(store.broken(), /no such table/);
    assert.equal(stats.retries, 2);
    assert.equal(store.plain('abc'), 3);
    assert.ok(isSqliteBusy({ cause: { code: 'SQLITE_BUSY_SNAPSHOT' } }));
  });

  it('a state write on a busy_timeout 0 connection waits for the lock on the event loop, not in SQLite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'inlet-busy-'));
    try {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      const main = await openStorage(url, { sqliteCheckpointThread: false });
      const worker = await openStorage(url, { migrate: false, sqliteCheckpointThread: false, sqliteBusyTimeoutMs: 0 });
      try {
        const now = new Date().toISOString();
        // A destination row to write to, leased by 'me'.
        const id = 'dst_busy';
        const raw = new BetterSqlite3(join(dir, 'inlet.db'));
        raw.pragma('busy_timeout = 5000');
        const columns = (
          raw.prepare('PRAGMA table_info(destinations)').all() as Array<{
            name: string;
            notnull: number;
            dflt_value: unknown;
          }>
        ).filter((c) => c.notnull === 1 && c.dflt_value === null);
        const values: Record<string, unknown> = {
          id,
          product_id: 'prod_busy',
          type: 'webhook',
          name: 'n',
          status: 'active',
          config: '{}',
          filter: '{}',
          batch: '{}',
          consecutive_failures: 0,
          delivered: 0,
          created_at: now,
          updated_at: now,
          lease_holder: 'me',
          lease_until: Date.now() + 60_000,
        };
        for (const c of columns) if (!(c.name in values)) values[c.name] = '';
        const names = Object.keys(values);
        raw.pragma('foreign_keys = OFF');
        raw
          .prepare(`INSERT INTO destinations (${names.join(', ')}) VALUES (${names.map(() => '?').join(', ')})`)
          .run(...names.map((n) => values[n]));
        // openStorage wraps the destination store of a busy_timeout 0 connection in retryingBusy itself.
        const store = worker.destinations;
        // Another connection holds the write lock for 150 ms.
        raw.prepare('BEGIN IMMEDIATE').run();
        // The lock is released by a timer on this event loop: a write that waited inside SQLite (its busy
        // handler sleeps synchronously) would hold the loop, the timer could not run, and the write would fail.
        // (Counting interval ticks instead was flaky: on a loaded CI machine a descheduled process gets one
        // tick for a long pause.)
        let committedAt = 0;
        const release = setTimeout(() => {
          raw.prepare('COMMIT').run();
          committedAt = Date.now();
        }, 150);
        const started = Date.now();
        const ok = await store.writeState(id, 'me', { cursor: { event: '7', identity: null }, deliveredAdd: 3 }, now, [
          {
            productId: 'prod_busy',
            destinationId: id,
            attemptedAt: now,
            attempt: 1,
            webhookId: 'msg_1',
            messageIds: ['a', 'b', 'c'],
            outcome: 'success',
            status: 200,
            error: null,
            durationMs: 2,
          },
        ]);
        const doneAt = Date.now();
        clearTimeout(release);
        assert.equal(ok, true);
        assert.ok(doneAt - started >= 140, 'the write waited for the lock');
        assert.ok(
          committedAt > 0 && committedAt <= doneAt,
          'the other connection committed (a timer on this event loop) while the write waited',
        );
        // A first attempt that slept in SQLite's busy handler (busy_timeout 5 s, the server's) would end only then.
        assert.ok(
          doneAt - started < 4000,
          `the write was done soon after the lock was free (${doneAt - started} ms), not after a busy_timeout`,
        );
        const row = raw.prepare('SELECT event_cursor, delivered FROM destinations WHERE id = ?').get(id) as {
          event_cursor: string;
          delivered: number;
        };
        assert.equal(String(row.event_cursor), '7');
        assert.equal(row.delivered, 3);
        assert.equal(
          (
            raw.prepare('SELECT count(*) AS n FROM destination_deliveries WHERE destination_id = ?').get(id) as {
              n: number;
            }
          ).n,
          1,
        );
        raw.close();
      } finally {
        await worker.close();
        await main.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
