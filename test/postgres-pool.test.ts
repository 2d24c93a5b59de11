// The failover pool against the test server: a dead host in front of the live one, no host up, a
// session check that refuses, and Inlet storage on a multi-host URL (PostgreSQL run only).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { parsePostgresUrl } from '../src/storage/postgres/connection-url.js';
import { createFailoverPool } from '../src/storage/postgres/pool.js';
import { isPostgresUnavailable } from '../src/storage/postgres/errors.js';
import { openStorage } from '../src/storage/connect.js';
import { dialect, postgresUrl, testDatabase } from './helpers.js';

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
      const { rows } = await probe.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [name]);
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
});
