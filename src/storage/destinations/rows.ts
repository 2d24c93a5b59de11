// The destinations' rows: their settings, and the lease a deliverer holds on its row. Each function runs on the
// database it is given.
//
// PostgreSQL: a lease is taken by an UPDATE of the row, which waits for any transaction holding the row's lock
// (a holder's state write, state.ts). It waits at most a quarter of the lease (`lock_timeout`, 1 s at most):
// a pass that finds the row locked learns nothing about that lease and goes on to the next destination,
// instead of holding up the renewal of every other lease of the instance behind one stuck holder. Its own
// transaction is bounded like a state write's, should its instance stop between the UPDATE and the COMMIT.
//
// Lease times are the database's clock, never an instance's: a lease's end is set, and compared with now, in
// the statement that takes it, so an instance whose clock runs ahead cannot take over a live lease (nor one
// whose clock lags hold on to a dead one). The instances read that clock (`databaseNow`) to judge their own.
import { sql } from 'kysely';
import { DATABASE_NOW_MS as DATABASE_NOW } from '../database-clock.js';
import { deliveryStateColumns, idleInTransactionLimit } from './state.js';
import type { DestinationDb, DestinationRow } from './tables.js';
import type {
  DestinationBatch,
  DestinationConfig,
  DestinationCredentials,
  DestinationFilter,
  DestinationPatch,
  DestinationRecord,
  DestinationStatus,
  DestinationTransformation,
  DestinationType,
  DestinationWarning,
  Dialect,
} from '../types.js';

/** The longest a lease's UPDATE waits for the row's lock (PostgreSQL), given the lease's length. */
export function leaseLockWaitMs(leaseMs: number): number {
  return Math.max(1, Math.min(1000, Math.floor(leaseMs / 4)));
}

/** PostgreSQL's "lock not available": lock_timeout passed. */
function isLockTimeout(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '55P03';
}

function fromRow(row: DestinationRow): DestinationRecord {
  return {
    id: row.id,
    productId: row.product_id,
    type: row.type as DestinationType,
    name: row.name,
    status: row.status as DestinationStatus,
    disabledReason: row.disabled_reason,
    config: JSON.parse(row.config) as DestinationConfig,
    credentials: row.credentials === null ? null : (JSON.parse(row.credentials) as DestinationCredentials),
    filter: JSON.parse(row.filter) as DestinationFilter,
    batch: JSON.parse(row.batch) as DestinationBatch,
    secret: row.secret,
    previousSecret: row.previous_secret,
    previousSecretUntil: row.previous_secret_until === null ? null : Number(row.previous_secret_until),
    cursor: { event: row.event_cursor, identity: row.identity_cursor },
    consecutiveFailures: Number(row.consecutive_failures),
    failingSince: row.failing_since === null ? null : Number(row.failing_since),
    nextAttemptAt: row.next_attempt_at === null ? null : Number(row.next_attempt_at),
    lastSuccessAt: row.last_success_at,
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
    delivered: Number(row.delivered),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    leaseHolder: row.lease_holder,
    leaseUntil: Number(row.lease_until),
    warnings: row.warnings === null ? [] : (JSON.parse(row.warnings) as DestinationWarning[]),
    columnsAdded: Number(row.columns_added),
    typeWidenings: Number(row.type_widenings),
    transformation: row.transformation == null ? null : (JSON.parse(row.transformation) as DestinationTransformation),
  };
}

/** Warnings a destination keeps (the latest). */
const WARNINGS_KEPT = 20;

function toRow(record: DestinationRecord): DestinationRow {
  return {
    id: record.id,
    product_id: record.productId,
    type: record.type,
    name: record.name,
    status: record.status,
    disabled_reason: record.disabledReason,
    config: JSON.stringify(record.config),
    credentials: record.credentials === null ? null : JSON.stringify(record.credentials),
    filter: JSON.stringify(record.filter),
    batch: JSON.stringify(record.batch),
    secret: record.secret,
    previous_secret: record.previousSecret,
    previous_secret_until: record.previousSecretUntil,
    event_cursor: record.cursor.event,
    identity_cursor: record.cursor.identity,
    consecutive_failures: record.consecutiveFailures,
    failing_since: record.failingSince,
    next_attempt_at: record.nextAttemptAt,
    last_success_at: record.lastSuccessAt,
    last_error: record.lastError,
    last_error_at: record.lastErrorAt,
    delivered: record.delivered,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
    lease_holder: record.leaseHolder,
    lease_until: record.leaseUntil,
    warnings: record.warnings.length === 0 ? null : JSON.stringify(record.warnings),
    columns_added: record.columnsAdded,
    type_widenings: record.typeWidenings,
    transformation: record.transformation === null ? null : JSON.stringify(record.transformation),
  };
}

/**
 * The DestinationStore's destinations and their leases. `idleLimitMs` (PostgreSQL): how long a transaction
 * that locked a destination's row may sit idle before the server ends its session (state.ts).
 */
export function destinationRows(db: DestinationDb, dialect: Dialect, idleLimitMs?: number) {
  return {
    async insert(record: DestinationRecord): Promise<void> {
      await db.insertInto('destinations').values(toRow(record)).execute();
    },

    async get(productId: string, id: string): Promise<DestinationRecord | undefined> {
      const row = await db
        .selectFrom('destinations')
        .selectAll()
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && fromRow(row as DestinationRow);
    },

    async getById(id: string): Promise<DestinationRecord | undefined> {
      const row = await db.selectFrom('destinations').selectAll().where('id', '=', id).executeTakeFirst();
      return row && fromRow(row as DestinationRow);
    },

    async list(productId: string): Promise<DestinationRecord[]> {
      const rows = await db
        .selectFrom('destinations')
        .selectAll()
        .where('product_id', '=', productId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
      return (rows as DestinationRow[]).map(fromRow);
    },

    /** Every destination of every product (the deliverers' scheduler; the health summary). */
    async listAll(): Promise<DestinationRecord[]> {
      const rows = await db.selectFrom('destinations').selectAll().orderBy('id').execute();
      return (rows as DestinationRow[]).map(fromRow);
    },

    async any(): Promise<boolean> {
      return (await db.selectFrom('destinations').select('id').limit(1).executeTakeFirst()) !== undefined;
    },

    async update(productId: string, id: string, patch: DestinationPatch): Promise<DestinationRecord | undefined> {
      const set: Partial<DestinationRow> = { updated_at: patch.updatedAt };
      if (patch.name !== undefined) set.name = patch.name;
      if (patch.config !== undefined) set.config = JSON.stringify(patch.config);
      if (patch.credentials !== undefined)
        set.credentials = patch.credentials === null ? null : JSON.stringify(patch.credentials);
      if (patch.filter !== undefined) set.filter = JSON.stringify(patch.filter);
      if (patch.batch !== undefined) set.batch = JSON.stringify(patch.batch);
      if (patch.transformation !== undefined)
        set.transformation = patch.transformation === null ? null : JSON.stringify(patch.transformation);
      if (patch.status !== undefined) set.status = patch.status;
      if (patch.disabledReason !== undefined) set.disabled_reason = patch.disabledReason;
      if (patch.secret !== undefined) set.secret = patch.secret;
      if (patch.previousSecret !== undefined) set.previous_secret = patch.previousSecret;
      if (patch.previousSecretUntil !== undefined) set.previous_secret_until = patch.previousSecretUntil;
      Object.assign(set, deliveryStateColumns(patch));
      await db.updateTable('destinations').set(set).where('product_id', '=', productId).where('id', '=', id).execute();
      const row = await db
        .selectFrom('destinations')
        .selectAll()
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && fromRow(row as DestinationRow);
    },

    async delete(productId: string, id: string): Promise<boolean> {
      await db
        .deleteFrom('destination_deliveries')
        .where('product_id', '=', productId)
        .where('destination_id', '=', id)
        .execute();
      const result = await db
        .deleteFrom('destinations')
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },

    /** The database's time (epoch ms), which leases are taken and judged by. */
    async databaseNow(): Promise<number> {
      const result = await sql<{ now: number | string }>`SELECT ${DATABASE_NOW[dialect]} AS now`.execute(db);
      return Number(result.rows[0]!.now);
    },

    /**
     * Takes or renews the lease of a destination for `leaseMs` from the database's now; true when `holder` has
     * it. PostgreSQL: undefined when the row stayed locked by another transaction past leaseLockWaitMs
     * (nothing is known).
     */
    async acquireLease(id: string, holder: string, leaseMs: number): Promise<boolean | undefined> {
      const now = DATABASE_NOW[dialect];
      const take = async (q: DestinationDb) => {
        const result = await q
          .updateTable('destinations')
          .set({ lease_holder: holder, lease_until: sql<number>`${now} + ${leaseMs}` })
          .where('id', '=', id)
          .where((eb) =>
            eb.or([eb('lease_holder', '=', holder), eb('lease_holder', 'is', null), eb('lease_until', '<', now)]),
          )
          .executeTakeFirst();
        return Number(result.numUpdatedRows) > 0;
      };
      if (dialect !== 'postgres') return take(db);
      try {
        return await db.transaction().execute(async (tx) => {
          // This transaction, too, holds the row's lock between its UPDATE and its COMMIT (state.ts).
          await idleInTransactionLimit(tx, idleLimitMs ?? leaseMs, leaseLockWaitMs(leaseMs));
          return take(tx);
        });
      } catch (error) {
        if (isLockTimeout(error)) return undefined;
        throw error;
      }
    },

    async releaseLease(id: string, holder: string): Promise<void> {
      await db
        .updateTable('destinations')
        .set({ lease_holder: null, lease_until: 0 })
        .where('id', '=', id)
        .where('lease_holder', '=', holder)
        .execute();
    },
  };
}

/** What deliveries report onto a destination: its warnings, and the columns a warehouse's loads changed. */
export function destinationFigures(db: DestinationDb, dialect: Dialect, idleLimitMs?: number) {
  return {
    /** Adds warnings (a message once: a repeat only moves its time), keeping the latest WARNINGS_KEPT. */
    async addWarnings(id: string, messages: string[], at: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (dialect === 'postgres' && idleLimitMs !== undefined) await idleInTransactionLimit(tx, idleLimitMs);
        const row = await tx.selectFrom('destinations').select('warnings').where('id', '=', id).executeTakeFirst();
        if (row === undefined) return;
        const kept = (row.warnings === null ? [] : (JSON.parse(row.warnings) as DestinationWarning[])).filter(
          (w) => !messages.includes(w.message),
        );
        for (const message of new Set(messages)) kept.push({ at, message });
        const warnings = JSON.stringify(kept.slice(-WARNINGS_KEPT));
        await tx.updateTable('destinations').set({ warnings }).where('id', '=', id).execute();
      });
    },

    async countLayoutChanges(id: string, columnsAdded: number, typeWidenings: number): Promise<void> {
      await db
        .updateTable('destinations')
        .set((eb) => ({
          columns_added: eb('columns_added', '+', columnsAdded),
          type_widenings: eb('type_widenings', '+', typeWidenings),
        }))
        .where('id', '=', id)
        .execute();
    },
  };
}
