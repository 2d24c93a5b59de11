// The end of an erasure on SQLite empties the WAL into the file (TRUNCATE checkpoint, governance.md §3). It
// runs on the server's connection, between ingest's commits: while a reader on another connection holds
// the WAL, it must wait without holding the event loop (SQLite's busy handler sleeps synchronously).
import { strict as assert } from 'node:assert';
import { after, before, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import type { Services } from '../src/services.js';
import { createTestServices, dialect, testDatabase } from './helpers.js';

const skip = dialect === 'sqlite' ? false : 'SQLite only: PostgreSQL reclaims with VACUUM';
const database = testDatabase();
let services: Services;
let close: () => Promise<void>;

before(async () => {
  const created = await createTestServices({}, database);
  services = created.services;
  close = created.close;
});
after(() => close());

it(
  'waits for a reader that holds the WAL without blocking the event loop, then empties the WAL',
  { skip },
  async () => {
    const file = database.databaseUrl.slice('sqlite:'.length);
    await services.storage.products.create({
      id: 'prd_reclaim',
      name: 'reclaim',
      createdAt: new Date().toISOString(),
      retentionEventsDays: null,
    });
    // A reader with an open snapshot: no checkpoint may copy past it or start the WAL over while it lasts.
    const reader = new BetterSqlite3(file, { readonly: true });
    reader.exec('BEGIN');
    reader.prepare('SELECT count(*) FROM products').get();
    // The WAL has frames after the reader's snapshot.
    await services.storage.products.create({
      id: 'prd_reclaim2',
      name: 'reclaim 2',
      createdAt: new Date().toISOString(),
      retentionEventsDays: null,
    });

    let last = Date.now();
    let longestGap = 0;
    const ticker = setInterval(() => {
      const now = Date.now();
      longestGap = Math.max(longestGap, now - last);
      last = now;
    }, 10);
    setTimeout(() => reader.exec('COMMIT'), 400);
    try {
      await services.storage.erasure.reclaim();
    } finally {
      clearInterval(ticker);
      reader.close();
    }
    // Blocked, the loop would stand still until the busy handler gave up (5 s) and the reader, released by a
    // timer on this same loop, could not let go in the meantime.
    assert.ok(longestGap < 300, `the event loop stood still for ${longestGap} ms`);
    const probe = new BetterSqlite3(file);
    try {
      const [row] = probe.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number }>;
      assert.equal(row!.log, 0, 'the WAL was emptied');
    } finally {
      probe.close();
    }
  },
);
