// The failover pool against the test server: a dead host in front of the live one, no host up, a
// session check that refuses, and Inlet storage on a multi-host URL (PostgreSQL run only).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { parsePostgresUrl } from '../../src/storage/postgres/connection-url.js';
import { sql } from 'kysely';
import { createFailoverPool } from '../../src/storage/postgres/pool.js';
import { isPostgresUnavailable } from '../../src/storage/postgres/errors.js';
import { openStorage } from '../../src/storage/connect.js';
import { eventRow } from '../event-rows.js';
import { dialect, postgresUrl, testDatabase } from '../helpers.js';

async function deadPort(): Promise<number> {
  // A port that was free a moment ago and refuses connections now.
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('failover pool against a real server', { skip: dialect !== 'postgres' }, () => {
  const base = new URL(postgresUrl);
  const userPart = base.username === '' ? '' : `${base.username}@`;
  const database = base.pathname.slice(1);

  it('skips a dead host and lands on the live one (read-write, sslmode=prefer falls back to plain)', async () => {
    const dead = await deadPort();
    const url = `postgres://${userPart}127.0.0.1:${dead},${base.hostname}:${base.port || 5432}/${database}?target_session_attrs=read-write&sslmode=prefer`;
    const { pool, ring } = createFailoverPool(parsePostgresUrl(url), { max: 2 });
    try {
      const { rows } = await pool.query<{ one: number }>('SELECT 1 AS one');
      assert.deepEqual(rows, [{ one: 1 }]);
      assert.equal(ring.currentHost.port, Number(base.port || 5432));
    } finally {
      await pool.end();
    }
  });

  it('fails with a connection error, fast, when no host is up; storage maps it to unavailable', async () => {
    const url = `postgres://${userPart}127.0.0.1:${await deadPort()},127.0.0.1:${await deadPort()}/${database}?target_session_attrs=read-write`;
    const { pool } = createFailoverPool(parsePostgresUrl(url), { max: 2 });
    const started = Date.now();
    try {
      await assert.rejects(pool.query('SELECT 1'), (error: unknown) => isPostgresUnavailable(error));
      assert.ok(Date.now() - started < 3000);
    } finally {
      await pool.end();
    }
  });

  it('target_session_attrs=standby refuses a primary (the session check runs)', async () => {
    const url = `postgres://${userPart}${base.hostname}:${base.port || 5432}/${database}?target_session_attrs=standby`;
    const { pool } = createFailoverPool(parsePostgresUrl(url), { max: 1 });
    try {
      await assert.rejects(pool.query('SELECT 1'), /is a primary, not standby/);
    } finally {
      await pool.end();
    }
  });

  it('Inlet storage opens on a multi-host URL and is ready', async () => {
    const db = testDatabase();
    const url = `postgres://${userPart}127.0.0.1:${await deadPort()},${base.hostname}:${base.port || 5432}/${database}?target_session_attrs=primary`;
    const storage = await openStorage(url, { postgresSchema: db.postgresSchema! });
    try {
      await storage.ping();
      assert.equal(storage.isUnavailable({ code: '25006' }), true);
    } finally {
      await storage.close();
      await db.drop();
    }
  });

  it('close() ends every connection, also of a storage that never ran a query through Kysely', async () => {
    // Opened without migrations (as the delivery worker opens it) and closed at once: the pool's only
    // connection so far was CREATE SCHEMA's. Kysely ends a pool only after its own first query, so close()
    // must end it; otherwise the connection stayed open and held its thread (a worker's shutdown hung).
    const db = testDatabase();
    const name = `inlet_close_${process.pid}_${Date.now()}`;
    const url = `${postgresUrl}${postgresUrl.includes('?') ? '&' : '?'}application_name=${name}`;
    const open = async () => {
      const { rows } = await probe.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
        [name],
      );
      return rows[0]!.n;
    };
    const probe = createFailoverPool(parsePostgresUrl(postgresUrl), { max: 1 }).pool;
    try {
      const storage = await openStorage(url, { postgresSchema: db.postgresSchema!, migrate: false });
      assert.ok((await open()) >= 1, 'the storage holds a connection before close()');
      await storage.close();
      let left = await open();
      for (let i = 0; i < 40 && left > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        left = await open();
      }
      assert.equal(left, 0, 'a connection of the closed storage is still open');
    } finally {
      await probe.end();
      await db.drop();
    }
  });

  it('runs a statement marked inlet:prepare as a named prepared statement, once per connection; others stay unnamed', async () => {
    const { pool } = createFailoverPool(parsePostgresUrl(postgresUrl), { max: 1 });
    const marked = '/* inlet:prepare probe */ SELECT $1::int + 1 AS v';
    const other = '/* inlet:prepare other_probe */ SELECT $1::int + 2 AS v';
    try {
      for (const n of [1, 2, 3]) assert.deepEqual((await pool.query<{ v: number }>(marked, [n])).rows, [{ v: n + 1 }]);
      assert.deepEqual((await pool.query<{ v: number }>(other, [1])).rows, [{ v: 3 }]);
      await pool.query('SELECT $1::int AS unmarked', [1]);
      const { rows } = await pool.query<{ name: string; statement: string }>(
        'SELECT name, statement FROM pg_prepared_statements ORDER BY prepare_time',
      );
      // One statement per mark, named after it; the unmarked one is not kept.
      assert.deepEqual(rows, [
        { name: 'inlet_probe', statement: marked },
        { name: 'inlet_other_probe', statement: other },
      ]);
      // A mark's name belongs to one text: another text under it is refused, not prepared beside it.
      await assert.rejects(
        pool.query('/* inlet:prepare probe */ SELECT $1::int + 3 AS v', [1]),
        /Prepared statements must be unique/,
      );
      assert.deepEqual((await pool.query<{ v: number }>(marked, [4])).rows, [{ v: 5 }]);
    } finally {
      await pool.end();
    }
  });

  it('stores events through the prepared ingest statement: one per connection, duplicates still found', async () => {
    const db = testDatabase();
    const storage = await openStorage(postgresUrl, { postgresSchema: db.postgresSchema!, postgresPoolSize: 1 });
    try {
      const first = await storage.events.insertMany([eventRow('prd_prepared', 'a'), eventRow('prd_prepared', 'b')]);
      const again = [eventRow('prd_prepared', 'b'), eventRow('prd_prepared', 'c'), eventRow('prd_prepared', null)];
      const second = await storage.events.insertMany(again);
      assert.deepEqual(
        first.map((o) => o.status),
        ['created', 'created'],
      );
      assert.deepEqual(
        second.map((o) => o.status),
        ['duplicate', 'created', 'created'],
      );
      assert.equal(second[0]!.event.id, first[1]!.event.id);
      const { rows } = await sql<{ name: string }>`SELECT name FROM pg_prepared_statements`.execute(storage.db);
      assert.deepEqual(
        rows.map((r) => r.name).filter((name) => name.startsWith('inlet_')),
        ['inlet_event_insert'],
      );
    } finally {
      await storage.close();
      await db.drop();
    }
  });

  it('the prepared ingest statement routes rows into partitions attached and dropped after it was prepared', async () => {
    // PostgreSQL invalidates a cached plan when a relation it uses changes; this checks it for the writer's
    // statement across inlet_ensure_event_partitions (attach) and inlet_drop_event_partitions_before (drop).
    const db = testDatabase();
    const storage = await openStorage(postgresUrl, { postgresSchema: db.postgresSchema!, postgresPoolSize: 1 });
    const at = (monthsAhead: number) => {
      const now = new Date();
      return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + monthsAhead, 15, 12)).toISOString();
    };
    const row = (externalId: string, receivedAt: string) => ({ ...eventRow('prd_prepared', externalId), receivedAt });
    const count = async (table: string) =>
      Number(
        (await sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql.table(table)}`.execute(storage.db)).rows[0]!.n,
      );
    const partition = (monthsAhead: number) => `events_p${at(monthsAhead).slice(0, 7).replace('-', '_')}`;
    try {
      // Prepared, with a row six months ahead: no partition yet, so it lands in the default one.
      for (const id of ['p1', 'p2']) await storage.events.insertMany([row(id, at(6))]);
      assert.equal(await count('events_default'), 2);
      await sql`SELECT inlet_ensure_event_partitions(8)`.execute(storage.db);
      assert.equal(await count('events_default'), 0);
      assert.equal(await count(partition(6)), 2);
      // The same connection's prepared statement now routes such a row into the new partition.
      assert.deepEqual(
        (await storage.events.insertMany([row('p3', at(6))])).map((o) => o.status),
        ['created'],
      );
      assert.equal(await count(partition(6)), 3);
      assert.equal(await count('events_default'), 0);
      // This month's partition dropped: this month's rows go to the default partition.
      await storage.events.insertMany([row('p4', at(0))]);
      await sql`SELECT inlet_drop_event_partitions_before(${at(1)}::timestamptz)`.execute(storage.db);
      assert.deepEqual(
        (await storage.events.insertMany([row('p5', at(0))])).map((o) => o.status),
        ['created'],
      );
      assert.equal(await count('events_default'), 1);
      const { rows } = await sql<{ name: string }>`SELECT name FROM pg_prepared_statements`.execute(storage.db);
      assert.deepEqual(
        rows.map((r) => r.name).filter((name) => name.startsWith('inlet_')),
        ['inlet_event_insert'],
      );
    } finally {
      await storage.close();
      await db.drop();
    }
  });
});
