// What the shared stores do differently on PostgreSQL (store-dialect.ts): many connections and instances
// write at once, so transactions that read before they write take advisory locks and are retried on a
// conflict, and a transaction that joins the identity log takes ROW EXCLUSIVE on `events` first.
import { createHash } from 'node:crypto';
import { sql, type QueryExecutorProvider, type SqlBool } from 'kysely';
import { RetryTransaction, type StoreDialect } from '../store-dialect.js';
import { DATABASE_NOW_MS } from '../database-clock.js';

/** How often a locking transaction is tried before its error is given to the caller. */
const MAX_ATTEMPTS = 8;
/** A unique violation, a serialization failure, a deadlock: the transaction is tried again. */
const RETRYABLE_CODES = new Set(['23505', '40001', '40P01']);

function isRetryable(error: unknown): boolean {
  if (error instanceof RetryTransaction) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE_CODES.has(code);
}

/** A signed 64-bit advisory lock key for the product's traffic sync (stable across instances and versions). */
export function syncLockKey(productId: string): string {
  return createHash('sha256').update(`inlet:traffic-sync:${productId}`).digest().readBigInt64BE(0).toString();
}

/** ROW EXCLUSIVE on `events`, before any write gives the transaction an xid: the read horizon of event-reads.ts
 *  waits for transactions holding a lock on `events`, so a message can never commit behind a reader. */
async function lockEvents(q: QueryExecutorProvider): Promise<void> {
  await sql`LOCK TABLE ONLY events IN ROW EXCLUSIVE MODE`.execute(q);
}

export function postgresStoreDialect(): StoreDialect {
  return {
    least: (a, b) => sql`least(${a}, ${b})`,
    greatest: (a, b) => sql`greatest(${a}, ${b})`,
    // round(x, n) takes NUMERIC only.
    round: (value, decimals) => sql`round(CAST(${value} AS NUMERIC), ${sql.lit(decimals)})`,
    jsonText: (column, field) => sql.raw(`${column}->>'${field}'`),
    nowMs: DATABASE_NOW_MS.postgres,
    timestamp: (value) => sql`${value}::timestamptz`,
    eventTime: (value) => sql`${value}::timestamptz`,
    eventProduct: (productId) => sql<string>`${productId}`,
    eventNamed: (names) => sql<SqlBool>`canonical_name IN (${sql.join(names)})`,
    identityPosition: sql<string>`tx::text || '.' || seq::text`,
    writeTransaction: (db, work) => db.transaction().execute(work),
    async lockingTransaction(db, work) {
      for (let attempt = 1; ; attempt++) {
        try {
          return await db.transaction().execute(async (trx) => {
            await lockEvents(trx);
            return work(trx, async (keys) => {
              for (const key of [...new Set(keys)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) {
                await sql`SELECT pg_advisory_xact_lock(${key.toString()}::bigint)`.execute(trx);
              }
            });
          });
        } catch (error) {
          if (attempt >= MAX_ATTEMPTS || !isRetryable(error)) throw error;
          // Jittered backoff so retrying transactions do not collide again in lockstep.
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
        }
      }
    },
    snapshot: (db, work) => db.transaction().setIsolationLevel('repeatable read').execute(work),
    lockIdentityLog: lockEvents,
    async appendIdentityMessage(q, row) {
      // tx and seq, the position, are drawn by the columns' defaults (migration 500).
      await sql`INSERT INTO identity_messages (product_id, id, type, created_at, data, user_id)
                VALUES (${row.product_id}, ${row.id}, ${row.type}, ${row.created_at}, ${row.data}, ${row.user_id})`.execute(
        q,
      );
    },
    withSyncLock(db, productId, work) {
      // A session lock on one pooled connection, held for the whole sync: it is released when the
      // connection ends, so a crashed instance never leaves the product locked.
      const key = syncLockKey(productId);
      return db.connection().execute(async (conn) => {
        const { rows } = await sql<{
          locked: boolean;
        }>`SELECT pg_try_advisory_lock(CAST(${key} AS BIGINT)) AS locked`.execute(conn);
        if (rows[0]?.locked !== true) return { acquired: false as const };
        try {
          return { acquired: true as const, value: await work() };
        } finally {
          await sql`SELECT pg_advisory_unlock(CAST(${key} AS BIGINT))`.execute(conn);
        }
      });
    },
  };
}
