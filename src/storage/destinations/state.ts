// Destinations' delivery state (events-out §6): the deliverer's fenced state write with the attempts of its
// delivery log, and the log's reads. Every write of delivery state is fenced by `lease_holder = me` (and, for a
// cycle, by the cursor it started from), so an instance that lost its lease cannot move the cursor.
//
// PostgreSQL: the write's transaction holds the destination's row lock from its UPDATE to its COMMIT, and
// another instance's lease takeover (rows.ts) needs that lock. A holder stopped between the two (a process
// stopped, a VM paused, a network gone) would keep it, and the takeover would wait for as long. So the
// transaction sets `idle_in_transaction_session_timeout` to the lease's length: the server ends a session
// left idle in it that long, which rolls the write back and frees the row by the time the lease has run out
// (a stopped holder is taken over like a dead one). The holder, if it wakes, finds its session gone: nothing
// of the cycle is committed. A legitimate gap is one turn of the event loop; one as long as the lease would
// have lost the lease anyway.
import type BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
import type { DestinationDb, DestinationRow } from './tables.js';
import type { DeliveryRecord, DeliveryStatePatch, DestinationCursor, Dialect } from '../types.js';
import { uuidv7 } from '../../domain/ids.js';

type Attempts = ReadonlyArray<Omit<DeliveryRecord, 'id'>>;

/**
 * A delivery's message ids as the JSON stored in the log, made once per list: a state write that finds the
 * database busy is called again (../busy-retry.ts), and a NATS cycle's list holds up to 1,000 ids.
 */
const idsJsonCache = new WeakMap<readonly string[], string>();
function idsJson(ids: readonly string[]): string {
  let json = idsJsonCache.get(ids);
  if (json === undefined) idsJsonCache.set(ids, (json = JSON.stringify(ids)));
  return json;
}

/** The delivery-state columns of a patch (cursor, failures, next attempt): shared by the admin edit and the deliverer. */
export function deliveryStateColumns(
  patch: Pick<DeliveryStatePatch, 'cursor' | 'consecutiveFailures' | 'failingSince' | 'nextAttemptAt'>,
): Record<string, unknown> {
  const set: Record<string, unknown> = {};
  if (patch.cursor !== undefined) {
    set.event_cursor = patch.cursor.event;
    set.identity_cursor = patch.cursor.identity;
  }
  if (patch.consecutiveFailures !== undefined) set.consecutive_failures = patch.consecutiveFailures;
  if (patch.failingSince !== undefined) set.failing_since = patch.failingSince;
  if (patch.nextAttemptAt !== undefined) set.next_attempt_at = patch.nextAttemptAt;
  return set;
}

/** The columns a deliverer's state write sets: the delivery state, the outcome and the time. */
function writtenColumns(patch: DeliveryStatePatch, now: string): Record<string, unknown> {
  const set: Record<string, unknown> = { updated_at: now, ...deliveryStateColumns(patch) };
  if (patch.lastSuccessAt !== undefined) set.last_success_at = patch.lastSuccessAt;
  if (patch.lastError !== undefined) set.last_error = patch.lastError;
  if (patch.lastErrorAt !== undefined) set.last_error_at = patch.lastErrorAt;
  if (patch.status !== undefined) set.status = patch.status;
  if (patch.disabledReason !== undefined) set.disabled_reason = patch.disabledReason;
  return set;
}

type StateWrite = (
  id: string,
  holder: string,
  set: Record<string, unknown>,
  deliveredAdd: number,
  deliveries: Attempts,
  from: DestinationCursor | undefined,
) => boolean;

/**
 * SQLite: the deliverer's state write as one synchronous transaction of prepared statements. Kysely's
 * transaction awaits between its statements, holding the write lock across turns of the loop, while the
 * server's ingest writer, wanting the same lock, sleeps in SQLite's busy handler (1 ms at least, on the
 * request loop). Synchronous, the lock is held for the few microseconds of the writes themselves.
 */
function sqliteStateWrite(raw: BetterSqlite3.Database): StateWrite {
  const insertDelivery = raw.prepare(
    'INSERT INTO destination_deliveries (product_id, id, destination_id, attempted_at, attempt, webhook_id, message_ids, outcome, status, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
  );
  // One statement per shape of update (the columns set, whether delivered grows, whether fenced by a cursor).
  const stateUpdates = new Map<string, BetterSqlite3.Statement>();
  const updateFor = (columns: string[], deliveredAdd: number, fenced: boolean): BetterSqlite3.Statement => {
    const key = `${columns.join(',')}|${deliveredAdd > 0}|${fenced}`;
    let update = stateUpdates.get(key);
    if (update === undefined) {
      const assignments = columns.map((c) => `${c} = ?`);
      if (deliveredAdd > 0) assignments.push('delivered = delivered + ?');
      const fence = fenced ? ' AND event_cursor IS ? AND identity_cursor IS ?' : '';
      update = raw.prepare(
        `UPDATE destinations SET ${assignments.join(', ')} WHERE id = ? AND lease_holder = ?${fence}`,
      );
      stateUpdates.set(key, update);
    }
    return update;
  };
  const write: StateWrite = (id, holder, set, deliveredAdd, deliveries, from) => {
    for (const delivery of deliveries) {
      insertDelivery.run(
        delivery.productId,
        uuidv7(),
        delivery.destinationId,
        delivery.attemptedAt,
        delivery.attempt,
        delivery.webhookId,
        idsJson(delivery.messageIds),
        delivery.outcome,
        delivery.status,
        delivery.error,
        Math.round(delivery.durationMs),
      );
    }
    const columns = Object.keys(set);
    const values = columns.map((c) => set[c]);
    if (deliveredAdd > 0) values.push(deliveredAdd);
    values.push(id, holder);
    if (from !== undefined) values.push(from.event, from.identity);
    // False: not ours to write (lease lost, cursor moved by a replay); the attempts stay in the log.
    return updateFor(columns, deliveredAdd, from !== undefined).run(...values).changes > 0;
  };
  return raw.transaction(write);
}

/** The same write through Kysely: PostgreSQL, and SQLite inside another open transaction. */
async function kyselyStateWrite(
  db: DestinationDb,
  dialect: Dialect,
  idleLimitMs: number | undefined,
  ...[id, holder, set, deliveredAdd, deliveries, from]: Parameters<StateWrite>
): Promise<boolean> {
  const write = async (q: DestinationDb): Promise<boolean> => {
    if (deliveries.length > 0) {
      if (idleLimitMs !== undefined) await idleInTransactionLimit(q, idleLimitMs);
      await q
        .insertInto('destination_deliveries')
        .values(
          deliveries.map((delivery) => ({
            product_id: delivery.productId,
            id: uuidv7(),
            destination_id: delivery.destinationId,
            attempted_at: delivery.attemptedAt,
            attempt: delivery.attempt,
            webhook_id: delivery.webhookId,
            message_ids: idsJson(delivery.messageIds),
            outcome: delivery.outcome,
            status: delivery.status,
            error: delivery.error,
            duration_ms: Math.round(delivery.durationMs),
          })),
        )
        .execute();
    }
    let query = q.updateTable('destinations').set(set as Partial<DestinationRow>);
    if (deliveredAdd > 0) query = query.set({ delivered: sql<number>`delivered + ${deliveredAdd}` });
    query = query.where('id', '=', id).where('lease_holder', '=', holder);
    if (from !== undefined) {
      const same = sql.raw(dialect === 'postgres' ? 'IS NOT DISTINCT FROM' : 'IS');
      query = query
        .where(sql<boolean>`event_cursor ${same} ${from.event}`)
        .where(sql<boolean>`identity_cursor ${same} ${from.identity}`);
    }
    // False: not ours to write (lease lost, cursor moved by a replay); the attempts stay in the log.
    const result = await query.executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  };
  return deliveries.length === 0 ? write(db) : db.transaction().execute(write);
}

/**
 * PostgreSQL: ends the session should it stay idle in this transaction for `ms` (see the header), which
 * rolls the transaction back and releases its locks; with `lockWaitMs`, a statement of the transaction also
 * waits at most that long for a lock (lock_timeout). One round trip, for this transaction only.
 */
export async function idleInTransactionLimit(q: DestinationDb, ms: number, lockWaitMs?: number): Promise<void> {
  const idle = String(Math.max(1, Math.floor(ms)));
  await (
    lockWaitMs === undefined
      ? sql`SELECT set_config('idle_in_transaction_session_timeout', ${idle}, true)`
      : sql`SELECT set_config('idle_in_transaction_session_timeout', ${idle}, true),
          set_config('lock_timeout', ${String(Math.max(1, Math.floor(lockWaitMs)))}, true)`
  ).execute(q);
}

/**
 * The DestinationStore's delivery state and delivery log. `idleLimitMs` (PostgreSQL): the longest a state
 * write's transaction may sit idle before the server ends its session, the lease's length.
 */
export function deliveryState(
  db: DestinationDb,
  dialect: Dialect,
  rawSqlite?: BetterSqlite3.Database,
  idleLimitMs?: number,
) {
  const rawWrite = rawSqlite === undefined ? undefined : sqliteStateWrite(rawSqlite);
  const limit = dialect === 'postgres' ? idleLimitMs : undefined;
  return {
    /**
     * Writes delivery state if `holder` still holds the lease (false when it lost it), and the attempts of
     * the delivery log, in one transaction: a delivery cycle costs one commit, not one per attempt.
     */
    async writeState(
      id: string,
      holder: string,
      patch: DeliveryStatePatch,
      now: string,
      deliveries: Attempts = [],
      from?: DestinationCursor,
    ): Promise<boolean> {
      const set = writtenColumns(patch, now);
      const deliveredAdd = patch.deliveredAdd ?? 0;
      if (rawWrite !== undefined && !rawSqlite!.inTransaction)
        return rawWrite(id, holder, set, deliveredAdd, deliveries, from);
      return kyselyStateWrite(db, dialect, limit, id, holder, set, deliveredAdd, deliveries, from);
    },

    /** Newest first; `before` is the id of the last row of the previous page. */
    async listDeliveries(
      productId: string,
      destinationId: string,
      limit: number,
      before?: string,
    ): Promise<DeliveryRecord[]> {
      let query = db
        .selectFrom('destination_deliveries')
        .selectAll()
        .where('product_id', '=', productId)
        .where('destination_id', '=', destinationId);
      if (before !== undefined) query = query.where('id', '<', before);
      const rows = await query.orderBy('id', 'desc').limit(limit).execute();
      return rows.map((row) => ({
        id: row.id,
        productId: row.product_id,
        destinationId: row.destination_id,
        attemptedAt: row.attempted_at,
        attempt: Number(row.attempt),
        webhookId: row.webhook_id,
        messageIds: JSON.parse(row.message_ids) as string[],
        outcome: row.outcome as 'success' | 'failure',
        status: row.status === null ? null : Number(row.status),
        error: row.error,
        durationMs: Number(row.duration_ms),
      }));
    },

    async pruneDeliveries(olderThan: string): Promise<void> {
      await db.deleteFrom('destination_deliveries').where('attempted_at', '<', olderThan).execute();
    },
  };
}
