// What the shared stores do differently on SQLite (store-dialect.ts). One connection serves the process and
// Kysely's mutex serialises its use, so a transaction never waits for a lock another of ours holds: locks
// are no-ops, and the only other writer is another process (the CLI), kept out by BEGIN IMMEDIATE.
import { sql, type Kysely } from 'kysely';
import { positionSql } from '../event-position.js';
import { DATABASE_NOW_MS } from '../database-clock.js';
import type { StoreDialect } from '../store-dialect.js';

/**
 * A write transaction that reads first: BEGIN IMMEDIATE takes the write lock up front, so another process
 * cannot make it fail half-way with SQLITE_BUSY between its reads and its writes.
 */
export function immediateTransaction<DB, R>(db: Kysely<DB>, work: (q: Kysely<DB>) => Promise<R>): Promise<R> {
  return db.connection().execute(async (conn) => {
    await sql`BEGIN IMMEDIATE`.execute(conn);
    try {
      const result = await work(conn);
      await sql`COMMIT`.execute(conn);
      return result;
    } catch (error) {
      await sql`ROLLBACK`.execute(conn).catch(() => {});
      throw error;
    }
  });
}

export function sqliteStoreDialect(): StoreDialect {
  // Traffic syncs of this process: no other process syncs (one server per SQLite file).
  const syncing = new Set<string>();
  return {
    least: (a, b) => sql`min(${a}, ${b})`,
    greatest: (a, b) => sql`max(${a}, ${b})`,
    round: (value, decimals) => sql`round(${value}, ${sql.lit(decimals)})`,
    jsonText: (column, field) => sql.raw(`json_extract(${column}, '$.${field}')`),
    nowMs: DATABASE_NOW_MS.sqlite,
    timestamp: (value) => sql`${value}`,
    eventTime: (value) => sql`${Date.parse(value)}`,
    eventProduct: positionSql('sqlite').product,
    eventNamed: positionSql('sqlite').named,
    identityPosition: sql<string>`position`,
    writeTransaction: immediateTransaction,
    lockingTransaction: (db, work) => immediateTransaction(db, (q) => work(q, async () => {})),
    snapshot: (db, work) => db.transaction().execute(work),
    async lockIdentityLog() {},
    async appendIdentityMessage(q, row) {
      // The message's place among the events: after the last event position drawn (the events' AUTOINCREMENT).
      await sql`INSERT INTO identity_messages (after_event, product_id, id, type, created_at, data, user_id)
                VALUES (COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), ${row.product_id}, ${row.id}, ${row.type}, ${row.created_at}, ${row.data}, ${row.user_id})`.execute(
        q,
      );
    },
    async withSyncLock(_db, productId, work) {
      if (syncing.has(productId)) return { acquired: false };
      syncing.add(productId);
      try {
        return { acquired: true, value: await work() };
      } finally {
        syncing.delete(productId);
      }
    },
  };
}
