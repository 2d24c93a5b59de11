// Erasure jobs, suppressions and retention (governance.md §3–4): one implementation over Kysely for
// both dialects; where the SQL differs it says why.
//
// Deletions run in small transactions (a batch of events at a time), so ingest's group commits go on
// between them. On SQLite `secure_delete` is on for the connection (connect.ts), so a deleted row's
// bytes are zeroed in the page instead of left in free space; `reclaim` then empties the WAL into the
// file (TRUNCATE checkpoint), whose older frames still held the rows. On PostgreSQL deleted rows stay on
// disk as dead tuples until VACUUM, which `reclaim` runs on the touched tables after a job.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from './database.js';
import type { EventKeys } from './sqlite/event-keys.js';
import {
  deleteEventMonthKeys,
  dropEventMonth,
  eventMonthsEndingBy,
  productsInEventMonth,
} from './postgres/event-partitions.js';
import type {
  Dialect,
  ErasureCounts,
  ErasurePhase,
  ErasureRecord,
  ErasureRequestInput,
  ErasureStatus,
  ErasureStore,
  ErasureTargets,
  SuppressionRecord,
} from './types.js';

type ErasureTables = {
  erasures: {
    product_id: string;
    id: string;
    status: string;
    phase: string;
    reason: string | null;
    id_hmac: string;
    requested_at: string;
    started_at: string | null;
    finished_at: string | null;
    counts: string;
    error: string | null;
    lease_holder: string | null;
    lease_until: number | string;
  };
  erasure_targets: { product_id: string; erasure_id: string; kind: string; value: string };
  suppressions: { product_id: string; id: string; id_hmac: string; erasure_id: string | null; created_at: string };
  rejection_subjects: { product_id: string; external_id: string; rejection_id: string };
  background_leases: { name: string; holder: string | null; lease_until: number | string };
  installation_secrets: { name: string; secret: string; created_at: string };
  user_ids: { product_id: string; external_id: string; user_id: string };
  user_merges: {
    product_id: string;
    id: string;
    from_external_id: string;
    from_user_id: string | null;
    into_user_id: string;
    into_external_id: string;
  };
  users: { product_id: string; id: string; traits: string };
  user_identifiers: { product_id: string; kind: string; value: string; user_id: string };
  plan_violations: { product_id: string; id: string; subject_id: string | null };
  destinations: { product_id: string; id: string; identity_cursor: string | null };
  identity_messages: {
    product_id: string;
    id: string;
    type: string;
    created_at: string;
    data: string;
    user_id: string | null;
  };
};

type Db = Kysely<Database & ErasureTables>;

const DAY_MS = 86_400_000;
/** The longest a background batch waits for room in the WAL (roomToWrite): bounds how much it can slow a job. */
const ROOM_WAIT_MS = 1000;

const EMPTY_COUNTS: ErasureCounts = {
  ids: 0,
  events: 0,
  identifiers: 0,
  traits: 0,
  merges: 0,
  identity_messages: 0,
  rejections: 0,
  violations: 0,
};

function list(values: string[]): RawBuilder<unknown> {
  return sql`(${sql.join(values.map((v) => sql`${v}`))})`;
}

/** A LIKE pattern matching `value` as a JSON string anywhere in a text column (escape character `\`). */
function jsonStringPattern(value: string): string {
  return `%${JSON.stringify(value).replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

function fromRow(row: ErasureTables['erasures']): ErasureRecord {
  return {
    id: row.id,
    productId: row.product_id,
    status: row.status as ErasureStatus,
    phase: row.phase as ErasurePhase,
    reason: row.reason,
    idHmac: row.id_hmac,
    requestedAt: row.requested_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    counts: { ...EMPTY_COUNTS, ...(JSON.parse(row.counts) as Partial<ErasureCounts>) },
    error: row.error,
  };
}

/** Compares two identity-log positions: `tx.seq` (PostgreSQL) or a rowid (SQLite). */
function positionAtOrBefore(position: string, cursor: string): boolean {
  const a = position.split('.').map(BigInt);
  const b = cursor.split('.').map(BigInt);
  for (let i = 0; i < a.length; i++) {
    if (a[i]! !== b[i]!) return a[i]! < b[i]!;
  }
  return true;
}

/** The tables an erasure deletes from (vacuumed afterwards on PostgreSQL). */
const TOUCHED_TABLES = [
  'events',
  'event_dedup',
  'users',
  'user_ids',
  'user_identifiers',
  'user_merges',
  'identity_messages',
  'rejections',
  'rejection_subjects',
  'plan_violations',
  'erasure_targets',
];

/**
 * `vacuum` (PostgreSQL): runs VACUUM on the tables through a connection without the client-side query
 * deadline (connect.ts); without it, VACUUM runs through the main pool. `maintenance` (PostgreSQL): that
 * connection, for retention's partition drop. `roomInWal` (SQLite with the checkpoint thread): resolves when
 * the WAL has room for a background batch (sqlite/checkpointer.ts), waiting at most the given time.
 */
export function erasureStore(
  database: Kysely<Database>,
  dialect: Dialect,
  vacuum?: (tables: string[]) => Promise<void>,
  maintenance?: () => Kysely<Database>,
  roomInWal?: (maxMs: number) => Promise<void>,
  subjects?: EventKeys,
): ErasureStore {
  const db = database.withTables<ErasureTables>() as Db;
  const pg = dialect === 'postgres';

  /** A write transaction that reads first: SQLite takes the write lock up front (another process may write). */
  async function writeTransaction<R>(work: (q: Db) => Promise<R>): Promise<R> {
    if (pg) return db.transaction().execute((trx) => work(trx as unknown as Db));
    return db.connection().execute(async (conn) => {
      await sql`BEGIN IMMEDIATE`.execute(conn);
      try {
        const result = await work(conn as Db);
        await sql`COMMIT`.execute(conn);
        return result;
      } catch (error) {
        await sql`ROLLBACK`.execute(conn).catch(() => {});
        throw error;
      }
    });
  }

  /** The user the id resolves to, and every user merged into it (earlier identity messages name those). */
  async function resolvePerson(q: Db, productId: string, externalId: string): Promise<ErasureTargets> {
    const owner = await q
      .selectFrom('user_ids')
      .select('user_id')
      .where('product_id', '=', productId)
      .where('external_id', '=', externalId)
      .executeTakeFirst();
    if (owner === undefined) return { externalIds: [externalId], userIds: [] };
    const externalIds = new Set([externalId]);
    for (const row of await q
      .selectFrom('user_ids')
      .select('external_id')
      .where('product_id', '=', productId)
      .where('user_id', '=', owner.user_id)
      .execute()) {
      externalIds.add(row.external_id);
    }
    const userIds = new Set([owner.user_id]);
    let frontier = [owner.user_id];
    while (frontier.length > 0) {
      const merged = await q
        .selectFrom('user_merges')
        .select(['from_user_id', 'from_external_id'])
        .where('product_id', '=', productId)
        .where('into_user_id', 'in', frontier)
        .execute();
      frontier = [];
      for (const row of merged) {
        externalIds.add(row.from_external_id);
        if (row.from_user_id !== null && !userIds.has(row.from_user_id)) {
          userIds.add(row.from_user_id);
          frontier.push(row.from_user_id);
        }
      }
    }
    return { externalIds: [...externalIds].sort(), userIds: [...userIds].sort() };
  }

  /**
   * SQLite: up to `limit` of the product's events whose subject is `user` and one of `externalIds`, through the
   * subject index (sqlite/event-keys.ts), oldest first; their index entries go with them. Positions whose rows
   * do not match (another subject type, a shared hash, a row deleted and not yet swept) are stepped over.
   */
  async function deleteBySubjects(
    index: EventKeys,
    productId: string,
    externalIds: string[],
    limit: number,
  ): Promise<number> {
    for (let after = 0; ;) {
      const { deleted, positions } = await unsyncedOnConnection(async (conn) => {
        const positions = index.subjectPositionsLocked(productId, externalIds, { after, order: 'asc', limit });
        if (positions.length === 0) return { deleted: [] as number[], positions };
        const gone = await sql<{ position: number }>`DELETE FROM events
          WHERE position IN (SELECT value FROM json_each(${JSON.stringify(positions)})) AND +product_id = ${productId}
            AND subject_type = 'user' AND subject_id IN ${list(externalIds)}
          RETURNING position`.execute(conn);
        const deleted = gone.rows.map((r) => Number(r.position));
        index.forgetLocked(productId, externalIds, deleted);
        return { deleted, positions };
      });
      if (deleted.length > 0 || positions.length < limit) return deleted.length;
      after = positions[positions.length - 1]!;
    }
  }

  /** SQLite: `work` on the connection (its mutex held), its statements committed without waiting for their fsync:
   *  see deleteByPositions. */
  function unsyncedOnConnection<R>(work: (conn: Db) => Promise<R>): Promise<R> {
    return db.connection().execute(async (conn) => {
      const mode = await sql<{ synchronous: number }>`PRAGMA synchronous`.execute(conn);
      const previous = Number(mode.rows[0]?.synchronous ?? 2);
      if (previous > 1) await sql`PRAGMA synchronous = NORMAL`.execute(conn);
      try {
        return await work(conn as Db);
      } finally {
        if (previous > 1) await sql.raw(`PRAGMA synchronous = ${previous}`).execute(conn);
      }
    });
  }

  async function deleteByPositions(
    productId: string,
    where: RawBuilder<unknown>,
    limit: number,
    order: RawBuilder<unknown> = sql``,
  ): Promise<number> {
    if (!pg) {
      // A batch commits without waiting for its fsync (synchronous=NORMAL for this statement only, inside
      // the connection's mutex so no ingest commit runs meanwhile): at synchronous=FULL the fsync was a
      // third of a small batch's time (measured: 40-row batches at 1 M events, 189 → 142 µs per row), and
      // batches are kept small for ingest's sake. Durability is not lost, only deferred: the WAL is
      // appended in order and the next FULL commit (any ingest commit, or the job saving its progress)
      // fsyncs these frames with its own; a crash before that loses some deletions, which the resumed job
      // (or the next retention pass) simply deletes again.
      return unsyncedOnConnection(async (conn) => {
        const result =
          await sql`DELETE FROM events WHERE position IN (SELECT position FROM events WHERE product_id = ${productId} AND ${where} LIMIT ${limit})`.execute(
            conn,
          );
        return Number(result.numAffectedRows ?? 0);
      });
    }
    // The idempotency keys live in their own table on PostgreSQL (core migration): they go with their events.
    // The batch's ids are collected into an array first (an init plan, run once), then deleted by probes of
    // each partition's primary key (product_id, id, …). A join with the batch instead (DELETE … USING
    // doomed) was planned as a nested loop over all of the product's rows whenever the statistics were
    // stale (a fresh table, a bulk import before autovacuum): 150 µs per deleted row at 5,000 rows, a batch
    // of 100 filtering 338,900 rows (EXPLAIN ANALYZE). Now: 20 µs per row with those stale statistics (one
    // pass over the product's index entries per batch), 5 µs with current ones (primary-key probes).
    const result = await sql<{ n: number }>`WITH gone AS (
        DELETE FROM events
         WHERE product_id = ${productId}
           AND id = ANY (ARRAY(SELECT id FROM events WHERE product_id = ${productId} AND ${where} ${order} LIMIT ${limit}))
        RETURNING source, external_id
      ), keys AS (
        DELETE FROM event_dedup k USING gone g WHERE k.product_id = ${productId} AND k.source = g.source AND k.external_id = g.external_id
      )
      SELECT count(*)::int AS n FROM gone`.execute(db);
    return Number(result.rows[0]?.n ?? 0);
  }

  return {
    async installationSecret(generate) {
      const row = await db
        .selectFrom('installation_secrets')
        .select('secret')
        .where('name', '=', 'hmac')
        .executeTakeFirst();
      if (row !== undefined) return row.secret;
      await db
        .insertInto('installation_secrets')
        .values({ name: 'hmac', secret: generate(), created_at: new Date().toISOString() })
        .onConflict((oc) => oc.column('name').doNothing())
        .execute();
      return (
        await db
          .selectFrom('installation_secrets')
          .select('secret')
          .where('name', '=', 'hmac')
          .executeTakeFirstOrThrow()
      ).secret;
    },

    keyFingerprint(fingerprint) {
      return writeTransaction(async (q) => {
        const row = await q
          .selectFrom('installation_secrets')
          .select('secret')
          .where('name', '=', 'hmac-fingerprint')
          .executeTakeFirst();
        if (row === undefined) {
          await q
            .insertInto('installation_secrets')
            .values({ name: 'hmac-fingerprint', secret: fingerprint, created_at: new Date().toISOString() })
            .execute();
          return { stored: fingerprint, replaced: false };
        }
        if (row.secret === fingerprint) return { stored: fingerprint, replaced: false };
        const keyed = await sql<{
          n: number;
        }>`SELECT (SELECT count(*) FROM (SELECT 1 FROM suppressions LIMIT 1) s) + (SELECT count(*) FROM (SELECT 1 FROM erasures LIMIT 1) e) AS n`.execute(
          q,
        );
        if (Number(keyed.rows[0]?.n ?? 0) > 0) return { stored: row.secret, replaced: false };
        await q
          .updateTable('installation_secrets')
          .set({ secret: fingerprint, created_at: new Date().toISOString() })
          .where('name', '=', 'hmac-fingerprint')
          .execute();
        return { stored: fingerprint, replaced: true };
      });
    },

    request(input: ErasureRequestInput) {
      return writeTransaction(async (q) => {
        // The user.erased message joins the identity log: on PostgreSQL its writer locks `events` before
        // its first write, so the destinations' read horizon covers it (identity-store.ts).
        if (pg) await sql`LOCK TABLE ONLY events IN ROW EXCLUSIVE MODE`.execute(q);
        const targets = await resolvePerson(q, input.productId, input.externalId);
        const counts: ErasureCounts = { ...EMPTY_COUNTS, ids: targets.externalIds.length };
        const row: ErasureTables['erasures'] = {
          product_id: input.productId,
          id: input.erasureId,
          status: 'pending',
          phase: 'events',
          reason: input.reason,
          id_hmac: input.hmac(input.externalId),
          requested_at: input.requestedAt,
          started_at: null,
          finished_at: null,
          counts: JSON.stringify(counts),
          error: null,
          lease_holder: null,
          lease_until: 0,
        };
        await q.insertInto('erasures').values(row).execute();
        const targetRows = [
          ...targets.externalIds.map((value) => ({
            product_id: input.productId,
            erasure_id: input.erasureId,
            kind: 'external_id',
            value,
          })),
          ...targets.userIds.map((value) => ({
            product_id: input.productId,
            erasure_id: input.erasureId,
            kind: 'user_id',
            value,
          })),
        ];
        for (let at = 0; at < targetRows.length; at += 200)
          await q
            .insertInto('erasure_targets')
            .values(targetRows.slice(at, at + 200))
            .execute();
        for (const externalId of targets.externalIds) {
          await q
            .insertInto('suppressions')
            .values({
              product_id: input.productId,
              id: input.newSuppressionId(),
              id_hmac: input.hmac(externalId),
              erasure_id: input.erasureId,
              created_at: input.requestedAt,
            })
            .onConflict((oc) => oc.columns(['product_id', 'id_hmac']).doNothing())
            .execute();
        }
        const data = JSON.stringify({ externalIds: targets.externalIds, erasureId: input.erasureId });
        if (pg) {
          await q
            .insertInto('identity_messages')
            .values({
              product_id: input.productId,
              id: input.messageId,
              type: 'user.erased',
              created_at: input.requestedAt,
              data,
              user_id: null,
            })
            .execute();
        } else {
          await sql`INSERT INTO identity_messages (after_event, product_id, id, type, created_at, data)
                    VALUES (COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), ${input.productId}, ${input.messageId}, 'user.erased', ${input.requestedAt}, ${data})`.execute(
            q,
          );
        }
        return { record: fromRow(row), externalIds: targets.externalIds };
      });
    },

    async get(productId, id) {
      const row = await db
        .selectFrom('erasures')
        .selectAll()
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && fromRow(row);
    },

    async list(productId, query) {
      let select = db.selectFrom('erasures').selectAll().where('product_id', '=', productId);
      if (query.beforeId !== undefined) select = select.where('id', '<', query.beforeId);
      if (query.idHmac !== undefined) select = select.where('id_hmac', '=', query.idHmac);
      return (await select.orderBy('id', 'desc').limit(query.limit).execute()).map(fromRow);
    },

    async claim(holder, now, leaseMs, only) {
      let candidates = db
        .selectFrom('erasures')
        .select(['product_id', 'id'])
        .where('status', 'in', ['pending', 'running'])
        .where((eb) =>
          eb.or([eb('lease_holder', 'is', null), eb('lease_holder', '=', holder), eb('lease_until', '<', now)]),
        );
      if (only !== undefined)
        candidates = candidates.where('product_id', '=', only.productId).where('id', '=', only.id);
      for (const candidate of await candidates.orderBy('requested_at').limit(5).execute()) {
        const result = await db
          .updateTable('erasures')
          .set({ lease_holder: holder, lease_until: now + leaseMs })
          .where('product_id', '=', candidate.product_id)
          .where('id', '=', candidate.id)
          .where('status', 'in', ['pending', 'running'])
          .where((eb) =>
            eb.or([eb('lease_holder', 'is', null), eb('lease_holder', '=', holder), eb('lease_until', '<', now)]),
          )
          .executeTakeFirst();
        if (Number(result.numUpdatedRows) === 1) {
          const row = await db
            .selectFrom('erasures')
            .selectAll()
            .where('product_id', '=', candidate.product_id)
            .where('id', '=', candidate.id)
            .executeTakeFirstOrThrow();
          return fromRow(row);
        }
      }
      return undefined;
    },

    async save(record, holder, leaseUntil) {
      const result = await db
        .updateTable('erasures')
        .set({
          status: record.status,
          phase: record.phase,
          counts: JSON.stringify(record.counts),
          started_at: record.startedAt,
          finished_at: record.finishedAt,
          error: record.error,
          lease_until: leaseUntil,
        })
        .where('product_id', '=', record.productId)
        .where('id', '=', record.id)
        .where('lease_holder', '=', holder)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    async release(productId, id, holder) {
      await db
        .updateTable('erasures')
        .set({ lease_holder: null, lease_until: 0 })
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .where('lease_holder', '=', holder)
        .execute();
    },

    async targets(productId, erasureId) {
      const rows = await db
        .selectFrom('erasure_targets')
        .select(['kind', 'value'])
        .where('product_id', '=', productId)
        .where('erasure_id', '=', erasureId)
        .execute();
      return {
        externalIds: rows
          .filter((r) => r.kind === 'external_id')
          .map((r) => r.value)
          .sort(),
        userIds: rows
          .filter((r) => r.kind === 'user_id')
          .map((r) => r.value)
          .sort(),
      };
    },

    async deleteEvents(productId, externalIds, limit) {
      if (externalIds.length === 0) return 0;
      // Events whose subject is one of the ids (on PostgreSQL the events_by_subject index; on SQLite the subject
      // index) …
      if (subjects !== undefined) {
        const bySubject = await deleteBySubjects(subjects, productId, externalIds, limit);
        if (bySubject > 0) return bySubject;
      } else {
        // One id at a time, in the index's own order (product_id, subject_type, subject_id, tx, seq), so that
        // the batch is the first `limit` entries of one range and the scan stops there. Without the order,
        // PostgreSQL chose a bitmap scan that read every entry of the person in each batch (100,000 entries,
        // ~13 ms, for a batch of 100: an erasure of 100,000 events in a product of 1 M took 291-514 s;
        // `npm run bench:erasure -- --database …`, bench/README.md).
        // An id that yields fewer rows than asked has no more: the next id fills the rest of the batch, so a
        // batch smaller than `limit` still means that every id is done (what the caller stops on).
        let bySubject = 0;
        for (const externalId of externalIds) {
          if (bySubject >= limit) break;
          bySubject += await deleteByPositions(
            productId,
            sql`subject_type = 'user' AND subject_id = ${externalId}`,
            limit - bySubject,
            sql`ORDER BY tx, seq`,
          );
        }
        if (bySubject > 0) return bySubject;
      }
      // … then Segment group calls, whose subject is the account and whose user is in the properties
      // (userId) or the original item (anonymousId). Read through the name index.
      const groupUser = pg
        ? sql`(properties->>'user_id' IN ${list(externalIds)} OR original->>'anonymousId' IN ${list(externalIds)})`
        : sql`(json_extract(properties, '$.user_id') IN ${list(externalIds)} OR json_extract(original, '$.anonymousId') IN ${list(externalIds)})`;
      return deleteByPositions(productId, sql`canonical_name = 'group_identified' AND ${groupUser}`, limit);
    },

    deleteIdentity(productId, targets) {
      return writeTransaction(async (q) => {
        const { externalIds, userIds } = targets;
        let identifiers = 0;
        let traits = 0;
        if (userIds.length > 0) {
          const users = await q
            .selectFrom('users')
            .select('traits')
            .where('product_id', '=', productId)
            .where('id', 'in', userIds)
            .execute();
          for (const user of users) traits += Object.keys(JSON.parse(user.traits) as object).length;
          const gone = await q
            .deleteFrom('user_identifiers')
            .where('product_id', '=', productId)
            .where('user_id', 'in', userIds)
            .executeTakeFirst();
          identifiers = Number(gone.numDeletedRows);
          // user_ids first: users → user_ids is checked at commit (deferred), user_ids → users at once.
          await q.deleteFrom('user_ids').where('product_id', '=', productId).where('user_id', 'in', userIds).execute();
        }
        await q
          .deleteFrom('user_ids')
          .where('product_id', '=', productId)
          .where('external_id', 'in', externalIds)
          .execute();
        if (userIds.length > 0)
          await q.deleteFrom('users').where('product_id', '=', productId).where('id', 'in', userIds).execute();
        const merges = await q
          .deleteFrom('user_merges')
          .where('product_id', '=', productId)
          .where((eb) =>
            eb.or([
              eb('from_external_id', 'in', externalIds),
              eb('into_external_id', 'in', externalIds),
              ...(userIds.length === 0 ? [] : [eb('into_user_id', 'in', userIds), eb('from_user_id', 'in', userIds)]),
            ]),
          )
          .executeTakeFirst();
        let messages = 0;
        if (userIds.length > 0) {
          const gone = await q
            .deleteFrom('identity_messages')
            .where('product_id', '=', productId)
            .where('user_id', 'in', userIds)
            .executeTakeFirst();
          messages += Number(gone.numDeletedRows);
        }
        // Messages written before migration 700 have no user_id: found by the ids in their JSON.
        const legacy = sql.join(
          externalIds.map((id) => sql`data LIKE ${jsonStringPattern(id)} ESCAPE '\\'`),
          sql` OR `,
        );
        const result = await sql`DELETE FROM identity_messages WHERE product_id = ${productId} AND user_id IS NULL
            AND type IN ('user.identified', 'user.merged') AND (${legacy})`.execute(q);
        messages += Number(result.numAffectedRows ?? 0);
        return { identifiers, traits, merges: Number(merges.numDeletedRows), identity_messages: messages };
      });
    },

    async deleteRecords(productId, externalIds, limit) {
      if (externalIds.length === 0) return { rejections: 0, violations: 0 };
      const indexed = await db
        .selectFrom('rejection_subjects')
        .select('rejection_id')
        .distinct()
        .where('product_id', '=', productId)
        .where('external_id', 'in', externalIds)
        .limit(limit)
        .execute();
      let rejections = 0;
      if (indexed.length > 0) {
        const ids = indexed.map((r) => r.rejection_id);
        rejections = await writeTransaction(async (q) => {
          const gone = await q
            .deleteFrom('rejections')
            .where('product_id', '=', productId)
            .where('id', 'in', ids)
            .executeTakeFirst();
          await q
            .deleteFrom('rejection_subjects')
            .where('product_id', '=', productId)
            .where('rejection_id', 'in', ids)
            .execute();
          return Number(gone.numDeletedRows);
        });
      } else {
        // Rows recorded without indexed ids (before migration 700, or a body that was not JSON): their text.
        const named = sql.join(
          externalIds.map((id) => sql`item LIKE ${`%${id.replace(/[\\%_]/g, (c) => `\\${c}`)}%`} ESCAPE '\\'`),
          sql` OR `,
        );
        const result = await sql`DELETE FROM rejections WHERE product_id = ${productId} AND (${named})
            AND NOT EXISTS (SELECT 1 FROM rejection_subjects s WHERE s.product_id = rejections.product_id AND s.rejection_id = rejections.id)`.execute(
          db,
        );
        rejections = Number(result.numAffectedRows ?? 0);
      }
      const violations = await sql`DELETE FROM plan_violations WHERE product_id = ${productId} AND id IN (
          SELECT id FROM plan_violations WHERE product_id = ${productId} AND subject_id IN ${list(externalIds)} LIMIT ${limit})`.execute(
        db,
      );
      return { rejections, violations: Number(violations.numAffectedRows ?? 0) };
    },

    async deleteTargets(productId, erasureId) {
      await db
        .deleteFrom('erasure_targets')
        .where('product_id', '=', productId)
        .where('erasure_id', '=', erasureId)
        .execute();
    },

    async sweepErasedMessages(productId, olderThan) {
      const cursors = (
        await db.selectFrom('destinations').select('identity_cursor').where('product_id', '=', productId).execute()
      ).map((r) => r.identity_cursor);
      const position = pg ? sql<string>`tx::text || '.' || seq::text` : sql<string>`position`;
      const rows = await sql<{
        id: string;
        position: string | number;
        created_at: string;
      }>`SELECT id, ${position} AS position, created_at FROM identity_messages
          WHERE product_id = ${productId} AND type = 'user.erased'`.execute(db);
      const doomed = rows.rows
        .filter(
          (row) =>
            row.created_at < olderThan ||
            cursors.every((cursor) => cursor !== null && positionAtOrBefore(String(row.position), cursor)),
        )
        .map((row) => row.id);
      if (doomed.length === 0) return 0;
      const result = await db
        .deleteFrom('identity_messages')
        .where('product_id', '=', productId)
        .where('type', '=', 'user.erased')
        .where('id', 'in', doomed)
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },

    async reclaim(only) {
      if (pg) {
        const tables = only === 'identity_messages' ? ['identity_messages'] : TOUCHED_TABLES;
        if (vacuum !== undefined) await vacuum(tables);
        else for (const table of tables) await sql.raw(`VACUUM ${table}`).execute(db);
        return;
      }
      // A reader (another connection: the delivery worker, another process) can keep the checkpoint from
      // finishing: try again for a while, waiting between tries on the event loop. Each try runs without the
      // busy handler (busy_timeout 0, restored after), which would otherwise sleep synchronously for up to
      // the connection's 5 s on every try, with every request of the server waiting behind it.
      for (let attempt = 0; attempt < 50; attempt++) {
        const busy = await db.connection().execute(async (conn) => {
          const timeout = Number(
            (await sql<{ timeout: number }>`PRAGMA busy_timeout`.execute(conn)).rows[0]?.timeout ?? 0,
          );
          await sql`PRAGMA busy_timeout = 0`.execute(conn);
          try {
            const result = await sql<{ busy: number }>`PRAGMA wal_checkpoint(TRUNCATE)`.execute(conn);
            return Number(result.rows[0]?.busy ?? 0) !== 0;
          } finally {
            await sql.raw(`PRAGMA busy_timeout = ${timeout}`).execute(conn);
          }
        });
        if (!busy) return;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error('the WAL checkpoint stayed busy for 5 s (a reader holds it); the job retries it');
    },

    async roomToWrite() {
      await roomInWal?.(ROOM_WAIT_MS);
    },

    async suppressionsMarker() {
      const row = await sql<{
        n: number | string;
        latest: string | null;
      }>`SELECT count(*) AS n, max(created_at) AS latest FROM suppressions`.execute(db);
      return `${row.rows[0]?.n ?? 0}/${row.rows[0]?.latest ?? ''}`;
    },

    async allSuppressions() {
      const rows = await db.selectFrom('suppressions').select(['product_id', 'id_hmac']).execute();
      return rows.map((r) => ({ productId: r.product_id, idHmac: r.id_hmac }));
    },

    async listSuppressions(productId, query) {
      let select = db.selectFrom('suppressions').selectAll().where('product_id', '=', productId);
      if (query.beforeId !== undefined) select = select.where('id', '<', query.beforeId);
      if (query.idHmac !== undefined) select = select.where('id_hmac', '=', query.idHmac);
      const rows = await select.orderBy('id', 'desc').limit(query.limit).execute();
      return rows.map((r): SuppressionRecord => ({
        id: r.id,
        productId: r.product_id,
        idHmac: r.id_hmac,
        erasureId: r.erasure_id,
        createdAt: r.created_at,
      }));
    },

    async liftSuppression(productId, id) {
      const result = await db
        .deleteFrom('suppressions')
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(result.numDeletedRows) === 1;
    },

    async retentionProducts() {
      const rows = await db
        .selectFrom('products')
        .select(['id', 'retention_events_days'])
        .where('retention_events_days', 'is not', null)
        .execute();
      return rows.map((r) => ({ productId: r.id, eventsDays: Number(r.retention_events_days) }));
    },

    async setRetention(productId, eventsDays) {
      await db.updateTable('products').set({ retention_events_days: eventsDays }).where('id', '=', productId).execute();
    },

    deleteEventsBefore(productId, cutoff, limit) {
      // The events_by_time index (product_id, received_at) finds them oldest first.
      return deleteByPositions(
        productId,
        pg ? sql`received_at < ${cutoff}::timestamptz` : sql`received_at < ${cutoff}`,
        limit,
      );
    },

    async eventMonthsEndingBy(end) {
      return pg ? eventMonthsEndingBy(database, end) : [];
    },

    productsInEventMonth(name) {
      return productsInEventMonth(database, name);
    },

    deleteEventMonthKeys(name, productIds, after, limit) {
      return deleteEventMonthKeys(database, name, productIds, after, limit);
    },

    dropEventMonth(month, now, lockTimeoutMs) {
      // On the maintenance connection: the count of a big month may outlast the client-side query deadline.
      const on = maintenance?.() ?? database;
      return dropEventMonth(on, month, lockTimeoutMs, async (q, counts) => {
        const ids = Object.keys(counts);
        if (ids.length === 0) return true;
        const limits = await q
          .selectFrom('products')
          .select(['id', 'retention_events_days'])
          .where('id', 'in', ids)
          .execute();
        const end = Date.parse(month.end);
        const allowing = new Set(
          limits
            .filter((p) => p.retention_events_days !== null && now - Number(p.retention_events_days) * DAY_MS >= end)
            .map((p) => p.id),
        );
        return ids.every((id) => allowing.has(id));
      });
    },

    async oldestEvent(productId) {
      const row = await db
        .selectFrom('events')
        .select((eb) => eb.fn.min('received_at').as('oldest'))
        .where('product_id', '=', productId)
        .executeTakeFirst();
      const oldest = row?.oldest as Date | string | null | undefined;
      return oldest == null ? null : oldest instanceof Date ? oldest.toISOString() : oldest;
    },

    async takeLease(name, holder, now, leaseMs) {
      await db
        .insertInto('background_leases')
        .values({ name, holder: null, lease_until: 0 })
        .onConflict((oc) => oc.column('name').doNothing())
        .execute();
      const result = await db
        .updateTable('background_leases')
        .set({ holder, lease_until: now + leaseMs })
        .where('name', '=', name)
        .where((eb) => eb.or([eb('holder', 'is', null), eb('holder', '=', holder), eb('lease_until', '<', now)]))
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    async releaseLease(name, holder) {
      await db
        .updateTable('background_leases')
        .set({ holder: null, lease_until: 0 })
        .where('name', '=', name)
        .where('holder', '=', holder)
        .execute();
    },
  };
}
