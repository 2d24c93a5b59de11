// Destinations storage (events-out §6): the destinations, their cursors and leases, the delivery log,
// and the one read deliverers make: the product's messages (events and identity messages) after a
// destination's cursor, in one position order, never skipping one.
//
// The cursor is two positions: the last event delivered (or passed over by the filter) and the last
// identity message. Both logs share one order:
// - PostgreSQL: (tx, seq) in both tables (identity messages draw `seq` from the events' sequence), read
//   below one read horizon (event-position.ts), so nothing below it can still commit.
// - SQLite: events by position; an identity message sorts after the event `after_event` and before the
//   next (writes are serialised, so `after_event` is exact). Both tables are read in one transaction
//   (one snapshot), so a write between the two reads cannot interleave wrongly.
// A page of each log is read, merged, and only the part of the merge below both pages' ends is
// returned (what lies beyond a full page's end may still be missing from the other).
//
// Leases: `lease_holder` and `lease_until` (epoch ms) on the destination row. A holder renews its lease
// while it delivers; another instance takes it once `lease_until` has passed. Every write of delivery
// state is fenced by `lease_holder = me`, so an instance that lost its lease cannot move the cursor.
import type BetterSqlite3 from 'better-sqlite3';
import { sql, type Kysely } from 'kysely';
import type { Database } from './database.js';
import {
  EVENT_COLUMN_LIST,
  EVENT_TEXT_COLUMN_LIST,
  eventFromRawRow,
  eventFromRow,
  RAW_EVENT_COLUMNS,
  type EventRow,
} from './event-columns.js';
import { inPositionOrder, positionSql } from './event-position.js';
import type {
  EventRecord,
  DeliveryRecord,
  DeliveryStatePatch,
  Dialect,
  DestinationBatch,
  DestinationConfig,
  DestinationCredentials,
  DestinationCursor,
  DestinationFilter,
  DestinationPatch,
  DestinationRecord,
  DestinationStatus,
  DestinationStore,
  DestinationType,
  IdentityMessageData,
  StoredMessage,
} from './types.js';
import { uuidv7 } from '../domain/ids.js';

export type DestinationTables = {
  destinations: {
    id: string;
    product_id: string;
    type: string;
    name: string;
    status: string;
    disabled_reason: string | null;
    config: string;
    credentials: string | null;
    filter: string;
    batch: string;
    secret: string | null;
    previous_secret: string | null;
    previous_secret_until: number | null;
    event_cursor: string | null;
    identity_cursor: string | null;
    consecutive_failures: number;
    failing_since: number | null;
    next_attempt_at: number | null;
    last_success_at: string | null;
    last_error: string | null;
    last_error_at: string | null;
    delivered: number;
    created_at: string;
    updated_at: string;
    lease_holder: string | null;
    lease_until: number;
  };
  destination_deliveries: {
    product_id: string;
    id: string;
    destination_id: string;
    attempted_at: string;
    attempt: number;
    webhook_id: string;
    message_ids: string;
    outcome: string;
    status: number | null;
    error: string | null;
    duration_ms: number;
  };
};

type Row = DestinationTables['destinations'];
type Db = Kysely<Database & DestinationTables>;

function fromRow(row: Row): DestinationRecord {
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
  };
}

function toRow(record: DestinationRecord): Row {
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
  };
}

type IdentityRow = {
  position: string | number;
  after_event?: number | string;
  id: string;
  type: string;
  created_at: string;
  data: string;
};

// The JSON columns are read as their stored text (cast on PostgreSQL, where node-postgres would parse json): a message is only ever
// written out as JSON, so the text goes into it as it is instead of a parse and a stringify.
const EVENT_COLUMNS_SQLITE = sql.raw(EVENT_COLUMN_LIST);
const EVENT_COLUMNS_POSTGRES = sql.raw(EVENT_TEXT_COLUMN_LIST);

/**
 * A delivery's message ids as the JSON stored in the log, made once per list: a state write that finds the
 * database busy is called again (busy-retry.ts), and a NATS cycle's list holds up to 1,000 ids.
 */
const idsJsonCache = new WeakMap<readonly string[], string>();
function idsJson(ids: readonly string[]): string {
  let json = idsJsonCache.get(ids);
  if (json === undefined) idsJsonCache.set(ids, (json = JSON.stringify(ids)));
  return json;
}

function compareBig(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The delivery-state columns of a patch (cursor, failures, next attempt): shared by the admin edit and the deliverer. */
function stateColumns(
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

export function destinationStore(
  database: Kysely<Database>,
  dialect: Dialect,
  rawSqlite?: BetterSqlite3.Database,
): DestinationStore {
  const db = database.withTables<DestinationTables>() as Db;
  const position = positionSql(dialect);
  const pg = dialect === 'postgres';

  /** Sort key of a message in the one order of both logs (see the header). */
  function keyOf(message: { kind: 'event' | 'identity'; position: string; afterEvent?: string }): bigint[] {
    if (pg) {
      const [tx, seq] = message.position.split('.') as [string, string];
      return [BigInt(tx), BigInt(seq)];
    }
    return message.kind === 'event'
      ? [BigInt(message.position), 0n, 0n]
      : [BigInt(message.afterEvent!), 1n, BigInt(message.position)];
  }
  const compareKeys = (a: bigint[], b: bigint[]) => {
    for (let i = 0; i < a.length; i++) {
      const c = compareBig(a[i]!, b[i]!);
      if (c !== 0) return c;
    }
    return 0;
  };

  function identityPositionSelect() {
    return pg ? sql<string>`tx::text || '.' || seq::text` : sql<string>`position`;
  }
  function identityAfter(cursor: string) {
    if (pg) {
      const [tx, seq] = cursor.split('.') as [string, string];
      return sql`(tx, seq) > (${tx}::xid8, ${seq}::bigint)`;
    }
    return sql`position > ${Number(cursor)}`;
  }

  async function readBoth<T>(
    work: (q: Kysely<Database & DestinationTables>, horizon: string | undefined) => Promise<T>,
  ): Promise<T> {
    if (pg) {
      // Rows below the horizon are final: two statements after it see the same rows below it. In position order
      // without a sort of the whole backlog (inPositionOrder, event-position.ts).
      return inPositionOrder(db, async (trx) => work(trx, await position.horizon!(trx as unknown as Kysely<Database>)));
    }
    return db.transaction().execute((trx) => work(trx, undefined));
  }

  // SQLite: one prepared statement returning arrays (as the export reads), run inside readBoth's transaction.
  const rawEvents = rawSqlite
    ?.prepare(`SELECT ${RAW_EVENT_COLUMNS} FROM events WHERE product_id = ? AND position > ? ORDER BY position LIMIT ?`)
    .raw(true);
  const rawIdentity = rawSqlite?.prepare(
    'SELECT id, type, created_at, data, position, after_event FROM identity_messages WHERE product_id = ? AND position > ? ORDER BY position LIMIT ?',
  );
  /**
   * SQLite: both logs read in one synchronous transaction of prepared statements (Kysely prepared them anew
   * on every read, with its own BEGIN and COMMIT: ~8 % of the deliverer's CPU). Only when no transaction is
   * open on the connection: a Kysely transaction that awaits between its statements would otherwise take this
   * read in as a savepoint and show it its uncommitted rows. Nothing can interleave with a synchronous one.
   */
  const readBothRaw =
    rawSqlite === undefined || rawEvents === undefined || rawIdentity === undefined
      ? undefined
      : rawSqlite.transaction((productId: string, cursor: DestinationCursor, limit: number) => ({
          events: (
            rawEvents.all(productId, cursor.event === null ? -1 : Number(cursor.event), limit) as unknown[][]
          ).map(eventFromRawRow),
          identity: rawIdentity.all(
            productId,
            cursor.identity === null ? -1 : Number(cursor.identity),
            limit,
          ) as IdentityRow[],
        }));

  // SQLite: the deliverer's state write as one synchronous transaction of prepared statements. Kysely's
  // transaction awaits between its statements, holding the write lock across turns of the loop, while the
  // server's ingest writer, wanting the same lock, sleeps in SQLite's busy handler (1 ms at least, on the
  // request loop). Synchronous, the lock is held for the few microseconds of the writes themselves.
  const insertDelivery = rawSqlite?.prepare(
    'INSERT INTO destination_deliveries (product_id, id, destination_id, attempted_at, attempt, webhook_id, message_ids, outcome, status, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const stateUpdates = new Map<string, BetterSqlite3.Statement>();
  const writeStateRaw =
    rawSqlite === undefined || insertDelivery === undefined
      ? undefined
      : rawSqlite.transaction(
          (
            id: string,
            holder: string,
            set: Record<string, unknown>,
            deliveredAdd: number,
            deliveries: ReadonlyArray<Omit<DeliveryRecord, 'id'>>,
            from: DestinationCursor | undefined,
          ): boolean => {
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
            const key = `${columns.join(',')}|${deliveredAdd > 0}|${from !== undefined}`;
            let update = stateUpdates.get(key);
            if (update === undefined) {
              const assignments = columns.map((c) => `${c} = ?`);
              if (deliveredAdd > 0) assignments.push('delivered = delivered + ?');
              const fence = from === undefined ? '' : ' AND event_cursor IS ? AND identity_cursor IS ?';
              update = rawSqlite.prepare(
                `UPDATE destinations SET ${assignments.join(', ')} WHERE id = ? AND lease_holder = ?${fence}`,
              );
              stateUpdates.set(key, update);
            }
            const values = columns.map((c) => set[c]);
            if (deliveredAdd > 0) values.push(deliveredAdd);
            values.push(id, holder);
            if (from !== undefined) values.push(from.event, from.identity);
            // False: not ours to write (lease lost, cursor moved by a replay); the attempts stay in the log.
            return update.run(...values).changes > 0;
          },
        );

  async function readEvents(
    q: Db,
    productId: string,
    after: string | null,
    horizon: string | undefined,
    limit: number,
  ): Promise<EventRecord[]> {
    if (rawEvents !== undefined)
      return (rawEvents.all(productId, after === null ? -1 : Number(after), limit) as unknown[][]).map(eventFromRawRow);
    const conditions = [sql`product_id = ${productId}`];
    if (after !== null) conditions.push(sql`${position.compare('>', after)}`);
    if (horizon !== undefined) conditions.push(sql`${position.visible(horizon)}`);
    const order = sql.raw(position.orderColumns.join(', '));
    const result =
      await sql<EventRow>`SELECT ${pg ? EVENT_COLUMNS_POSTGRES : EVENT_COLUMNS_SQLITE}, ${position.select} AS position FROM events
      WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${order} LIMIT ${limit}`.execute(q);
    return result.rows.map((row) => eventFromRow(row, true));
  }

  async function readIdentity(
    q: Db,
    productId: string,
    after: string | null,
    horizon: string | undefined,
    limit: number,
  ): Promise<IdentityRow[]> {
    const conditions = [sql`product_id = ${productId}`];
    if (after !== null) conditions.push(identityAfter(after));
    if (horizon !== undefined) conditions.push(sql`tx < ${horizon}::xid8`);
    const order = sql.raw(pg ? 'tx, seq' : 'position');
    const extra = pg ? sql`` : sql`, after_event`;
    const result =
      await sql<IdentityRow>`SELECT id, type, created_at, data, ${identityPositionSelect()} AS position${extra} FROM identity_messages
      WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${order} LIMIT ${limit}`.execute(q);
    return result.rows;
  }

  return {
    isEventPosition: position.valid,

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
      return row && fromRow(row as Row);
    },

    async getById(id: string): Promise<DestinationRecord | undefined> {
      const row = await db.selectFrom('destinations').selectAll().where('id', '=', id).executeTakeFirst();
      return row && fromRow(row as Row);
    },

    async list(productId: string): Promise<DestinationRecord[]> {
      const rows = await db
        .selectFrom('destinations')
        .selectAll()
        .where('product_id', '=', productId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
      return (rows as Row[]).map(fromRow);
    },

    /** Every destination of every product (the deliverers' scheduler; the health summary). */
    async listAll(): Promise<DestinationRecord[]> {
      const rows = await db.selectFrom('destinations').selectAll().orderBy('id').execute();
      return (rows as Row[]).map(fromRow);
    },

    async any(): Promise<boolean> {
      return (await db.selectFrom('destinations').select('id').limit(1).executeTakeFirst()) !== undefined;
    },

    async update(productId: string, id: string, patch: DestinationPatch): Promise<DestinationRecord | undefined> {
      const set: Partial<Row> = { updated_at: patch.updatedAt };
      if (patch.name !== undefined) set.name = patch.name;
      if (patch.config !== undefined) set.config = JSON.stringify(patch.config);
      if (patch.filter !== undefined) set.filter = JSON.stringify(patch.filter);
      if (patch.batch !== undefined) set.batch = JSON.stringify(patch.batch);
      if (patch.status !== undefined) set.status = patch.status;
      if (patch.disabledReason !== undefined) set.disabled_reason = patch.disabledReason;
      if (patch.secret !== undefined) set.secret = patch.secret;
      if (patch.previousSecret !== undefined) set.previous_secret = patch.previousSecret;
      if (patch.previousSecretUntil !== undefined) set.previous_secret_until = patch.previousSecretUntil;
      Object.assign(set, stateColumns(patch));
      await db.updateTable('destinations').set(set).where('product_id', '=', productId).where('id', '=', id).execute();
      const row = await db
        .selectFrom('destinations')
        .selectAll()
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && fromRow(row as Row);
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

    /** Takes or renews the lease of a destination; true when `holder` has it until `until`. */
    async acquireLease(id: string, holder: string, nowMs: number, until: number): Promise<boolean> {
      const result = await db
        .updateTable('destinations')
        .set({ lease_holder: holder, lease_until: until })
        .where('id', '=', id)
        .where((eb) =>
          eb.or([eb('lease_holder', '=', holder), eb('lease_holder', 'is', null), eb('lease_until', '<', nowMs)]),
        )
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    async releaseLease(id: string, holder: string): Promise<void> {
      await db
        .updateTable('destinations')
        .set({ lease_holder: null, lease_until: 0 })
        .where('id', '=', id)
        .where('lease_holder', '=', holder)
        .execute();
    },

    /**
     * Writes delivery state if `holder` still holds the lease (false when it lost it), and the attempts of
     * the delivery log, in one transaction: a delivery cycle costs one commit, not one per attempt.
     */
    async writeState(
      id: string,
      holder: string,
      patch: DeliveryStatePatch,
      now: string,
      deliveries: ReadonlyArray<Omit<DeliveryRecord, 'id'>> = [],
      from?: DestinationCursor,
    ): Promise<boolean> {
      const set: Record<string, unknown> = { updated_at: now, ...stateColumns(patch) };
      if (patch.lastSuccessAt !== undefined) set.last_success_at = patch.lastSuccessAt;
      if (patch.lastError !== undefined) set.last_error = patch.lastError;
      if (patch.lastErrorAt !== undefined) set.last_error_at = patch.lastErrorAt;
      if (patch.status !== undefined) set.status = patch.status;
      if (patch.disabledReason !== undefined) set.disabled_reason = patch.disabledReason;
      if (writeStateRaw !== undefined && !rawSqlite!.inTransaction)
        return writeStateRaw(id, holder, set, patch.deliveredAdd ?? 0, deliveries, from);
      const write = async (q: Db): Promise<boolean> => {
        if (deliveries.length > 0) {
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
        let query = q.updateTable('destinations').set(set as Partial<Row>);
        if (patch.deliveredAdd !== undefined && patch.deliveredAdd > 0)
          query = query.set({ delivered: sql<number>`delivered + ${patch.deliveredAdd}` });
        query = query.where('id', '=', id).where('lease_holder', '=', holder);
        if (from !== undefined) {
          const same = sql.raw(pg ? 'IS NOT DISTINCT FROM' : 'IS');
          query = query
            .where(sql<boolean>`event_cursor ${same} ${from.event}`)
            .where(sql<boolean>`identity_cursor ${same} ${from.identity}`);
        }
        // False: not ours to write (lease lost, cursor moved by a replay); the attempts stay in the log.
        const result = await query.executeTakeFirst();
        return Number(result.numUpdatedRows) > 0;
      };
      return deliveries.length === 0 ? write(db) : db.transaction().execute(write);
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

    /**
     * Up to `limit` messages of the product after `cursor`, in position order. Each carries its
     * position; the cursor after a message is the cursor before it with that log's part moved.
     */
    async readMessages(productId: string, cursor: DestinationCursor, limit: number): Promise<StoredMessage[]> {
      const { events, identity } =
        readBothRaw !== undefined && !rawSqlite!.inTransaction
          ? readBothRaw(productId, cursor, limit)
          : await readBoth(async (q, horizon) => ({
              events: await readEvents(q, productId, cursor.event, horizon, limit),
              identity: await readIdentity(q, productId, cursor.identity, horizon, limit),
            }));
      type Item = { key: bigint[]; message: StoredMessage };
      const eventItems: Item[] = events.map((event) => ({
        key: keyOf({ kind: 'event', position: event.position! }),
        message: { kind: 'event', position: event.position!, event },
      }));
      const identityItems: Item[] = identity.map((row) => ({
        key: keyOf({
          kind: 'identity',
          position: String(row.position),
          afterEvent: row.after_event === undefined ? undefined : String(row.after_event),
        }),
        message: {
          kind: 'identity',
          position: String(row.position),
          id: row.id,
          type: row.type as 'user.identified' | 'user.merged' | 'user.erased',
          createdAt: row.created_at,
          data: JSON.parse(row.data) as IdentityMessageData,
        },
      }));
      let frontier: bigint[] | undefined;
      for (const items of [eventItems, identityItems]) {
        if (items.length === limit) {
          const last = items[items.length - 1]!.key;
          if (frontier === undefined || compareKeys(last, frontier) < 0) frontier = last;
        }
      }
      return [...eventItems, ...identityItems]
        .sort((a, b) => compareKeys(a.key, b.key))
        .filter((item) => frontier === undefined || compareKeys(item.key, frontier) <= 0)
        .slice(0, limit)
        .map((item) => item.message);
    },

    /** The cursor at the current end of the product's messages ("start": "now"). */
    async endCursor(productId: string): Promise<DestinationCursor> {
      return readBoth(async (q, horizon) => {
        const conditions = [sql`product_id = ${productId}`];
        if (horizon !== undefined) conditions.push(sql`${position.visible(horizon)}`);
        const order = sql.raw(position.orderColumns.map((c) => `${c} DESC`).join(', '));
        const event = await sql<{
          position: string;
        }>`SELECT ${position.select} AS position FROM events WHERE ${sql.join(conditions, sql` AND `)} ORDER BY ${order} LIMIT 1`.execute(
          q,
        );
        const idConditions = [sql`product_id = ${productId}`];
        if (horizon !== undefined) idConditions.push(sql`tx < ${horizon}::xid8`);
        const idOrder = sql.raw(pg ? 'tx DESC, seq DESC' : 'position DESC');
        const identity = await sql<{
          position: string;
        }>`SELECT ${identityPositionSelect()} AS position FROM identity_messages WHERE ${sql.join(idConditions, sql` AND `)} ORDER BY ${idOrder} LIMIT 1`.execute(
          q,
        );
        return {
          event: event.rows[0] === undefined ? null : String(event.rows[0].position),
          identity: identity.rows[0] === undefined ? null : String(identity.rows[0].position),
        };
      });
    },

    /** The cursor just after the event at `eventPosition` (identity messages ordered before it count as passed). */
    async cursorAfterEvent(productId: string, eventPosition: string): Promise<DestinationCursor> {
      if (pg) return { event: eventPosition, identity: eventPosition };
      const row = await sql<{
        position: number | null;
      }>`SELECT max(position) AS position FROM identity_messages WHERE product_id = ${productId} AND after_event < ${Number(eventPosition)}`.execute(
        db,
      );
      const identity = row.rows[0]?.position;
      return { event: eventPosition, identity: identity == null ? null : String(identity) };
    },

    /** The position of the last event received before `at` (a replay from a time starts after it), or null. */
    async eventPositionBefore(productId: string, at: string): Promise<string | null> {
      const row = await db
        .selectFrom('events')
        .select(position.select.as('position'))
        .where('product_id', '=', productId)
        .where('received_at', '<', at)
        .orderBy('received_at', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? null : String(row.position);
    },

    /** Messages after the cursor, counted up to `cap` per log (the lag; without the destination's filter). */
    async lag(productId: string, cursor: DestinationCursor, cap: number): Promise<number> {
      return readBoth(async (q, horizon) => {
        const conditions = [sql`product_id = ${productId}`];
        if (cursor.event !== null) conditions.push(sql`${position.compare('>', cursor.event)}`);
        if (horizon !== undefined) conditions.push(sql`${position.visible(horizon)}`);
        const events = await sql<{
          n: number | string;
        }>`SELECT count(*) AS n FROM (SELECT 1 FROM events WHERE ${sql.join(conditions, sql` AND `)} LIMIT ${cap}) AS behind`.execute(
          q,
        );
        const idConditions = [sql`product_id = ${productId}`];
        if (cursor.identity !== null) idConditions.push(identityAfter(cursor.identity));
        if (horizon !== undefined) idConditions.push(sql`tx < ${horizon}::xid8`);
        const identity = await sql<{
          n: number | string;
        }>`SELECT count(*) AS n FROM (SELECT 1 FROM identity_messages WHERE ${sql.join(idConditions, sql` AND `)} LIMIT ${cap}) AS behind`.execute(
          q,
        );
        return Number(events.rows[0]?.n ?? 0) + Number(identity.rows[0]?.n ?? 0);
      });
    },
  };
}
