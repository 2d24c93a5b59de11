// Traffic sources, rows and sync runs: one implementation over Kysely for both dialects.
// The report aggregates in SQL; `sql` fragments are used where the columns are chosen at run time
// (group_by, sort) — every name comes from the closed lists in domain/traffic-reports, never from input.
import { createHash } from 'node:crypto';
import { sql, type ColumnType, type Kysely, type RawBuilder, type Selectable } from 'kysely';
import type { Database } from './database.js';
import { fromJson, toIso, toIsoOrNull } from './database.js';
import {
  COUNT_METRICS,
  FILTER_DIMENSIONS,
  TRAFFIC_METRICS,
  type TrafficDimension,
  type TrafficMetric,
  type TrafficReportQuery,
  type TrafficReportRow,
} from '../domain/traffic-reports.js';
import type {
  Dialect,
  SyncRunRecord,
  TrafficProviderName,
  TrafficReportPage,
  TrafficSourceRecord,
  TrafficSourceSummary,
  TrafficStore,
} from './types.js';

type Timestamp = ColumnType<Date | string, string, string>;
type NullableTimestamp = ColumnType<Date | string | null, string | null, string | null>;
type Json = ColumnType<string | Record<string, unknown>, string, string>;
/** BIGINT sums and counts may come back as strings from some drivers; always read through Number(). */
type Count = ColumnType<number | string | null, number | null, number | null>;

type TrafficSourcesTable = {
  product_id: string;
  provider: TrafficProviderName;
  config: Json;
  secret: Json;
  created_at: Timestamp;
  updated_at: Timestamp;
};

type TrafficRowsTable = {
  product_id: string;
  date: string;
  source: string;
  medium: string;
  campaign: string;
  landing_page: string;
  provider: string;
  sessions: Count;
  users: Count;
  new_users: Count;
  pageviews: Count;
  engaged_sessions: Count;
  bounce_rate: number | null;
  avg_session_duration: number | null;
  conversions: Count;
};

type SyncRunsTable = {
  product_id: string;
  id: string;
  provider: string;
  kind: SyncRunRecord['kind'];
  started_at: Timestamp;
  finished_at: NullableTimestamp;
  range_from: string;
  range_to: string;
  row_count: Count;
  outcome: SyncRunRecord['outcome'];
  error: string | null;
};

export type TrafficTables = {
  traffic_sources: TrafficSourcesTable;
  traffic_rows: TrafficRowsTable;
  sync_runs: SyncRunsTable;
};

const SQLITE_MAX_ROWS_PER_INSERT = 500; // 15 columns × 500 rows stays under SQLite's 32,766 parameters.

function toNumberOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

function summaryFromRow(row: Selectable<TrafficSourcesTable>): TrafficSourceSummary {
  return {
    productId: row.product_id,
    provider: row.provider,
    config: fromJson(row.config),
    createdAt: toIso(row.created_at),
    updatedAt: toIso(row.updated_at),
  };
}

function runFromRow(row: Selectable<SyncRunsTable>): SyncRunRecord {
  return {
    id: row.id,
    productId: row.product_id,
    provider: row.provider,
    kind: row.kind,
    startedAt: toIso(row.started_at),
    finishedAt: toIsoOrNull(row.finished_at),
    from: row.range_from,
    to: row.range_to,
    rows: toNumberOrNull(row.row_count),
    outcome: row.outcome,
    error: row.error,
  };
}

/** A signed 64-bit advisory lock key for the product's sync (stable across instances and versions). */
export function syncLockKey(productId: string): string {
  return createHash('sha256').update(`inlet:traffic-sync:${productId}`).digest().readBigInt64BE(0).toString();
}

/** Decimals kept of the weighted averages: enough for any rate or duration, and no binary noise (0.49, not 0.49000000000000005). */
const AVERAGE_DECIMALS = 9;

function metricExpression(metric: TrafficMetric, dialect: Dialect): RawBuilder<unknown> {
  const column = sql.ref(metric);
  if ((COUNT_METRICS as readonly string[]).includes(metric)) return sql`sum(${column})`;
  // Weighted by sessions, over the rows that supply both the metric and sessions. Rounded in SQL, so
  // the value a cursor carries is exactly the value the next page's keyset compares against.
  const average = sql`CAST(sum(${column} * sessions) AS DOUBLE PRECISION) / nullif(sum(CASE WHEN ${column} IS NOT NULL THEN sessions END), 0)`;
  return dialect === 'postgres'
    ? sql`round(CAST(${average} AS NUMERIC), ${sql.lit(AVERAGE_DECIMALS)})`
    : sql`round(${average}, ${sql.lit(AVERAGE_DECIMALS)})`;
}

export function trafficStore(database: Kysely<Database>, dialect: Dialect): TrafficStore {
  const db = database.withTables<TrafficTables>();
  const localLocks = new Set<string>();

  function whereFilters(productId: string, query: TrafficReportQuery): RawBuilder<unknown> {
    const conditions = [sql`product_id = ${productId}`, sql`date >= ${query.from}`, sql`date <= ${query.to}`];
    for (const dimension of FILTER_DIMENSIONS) {
      const value = query.filters[dimension];
      if (value !== undefined) conditions.push(sql`${sql.ref(dimension)} = ${value}`);
    }
    return sql.join(conditions, sql` AND `);
  }

  function numericRow(row: Record<string, unknown>, groupBy: readonly TrafficDimension[]): TrafficReportRow {
    const out: Record<string, unknown> = {};
    for (const dimension of groupBy) out[dimension] = String(row[dimension]);
    for (const metric of TRAFFIC_METRICS) out[metric] = toNumberOrNull(row[metric]);
    return out as TrafficReportRow;
  }

  return {
    async putSource(source: TrafficSourceRecord) {
      const values = {
        product_id: source.productId,
        provider: source.provider,
        config: JSON.stringify(source.config),
        secret: JSON.stringify(source.secret),
        created_at: source.createdAt,
        updated_at: source.updatedAt,
      };
      await db
        .insertInto('traffic_sources')
        .values(values)
        .onConflict((oc) =>
          oc.column('product_id').doUpdateSet({
            provider: values.provider,
            config: values.config,
            secret: values.secret,
            updated_at: values.updated_at,
          }),
        )
        .execute();
    },

    async getSource(productId) {
      const row = await db
        .selectFrom('traffic_sources')
        .selectAll()
        .where('product_id', '=', productId)
        .executeTakeFirst();
      return row && { ...summaryFromRow(row), secret: fromJson(row.secret) };
    },

    async listSources() {
      const rows = await db
        .selectFrom('traffic_sources')
        .select(['product_id', 'provider', 'config', 'created_at', 'updated_at'])
        .orderBy('product_id')
        .execute();
      return rows.map((row) => summaryFromRow({ ...row, secret: '{}' }));
    },

    async replaceSlices(productId, provider, rowsByDate) {
      if (rowsByDate.size === 0) return 0;
      let inserted = 0;
      await db.transaction().execute(async (trx) => {
        for (const [date, rows] of rowsByDate) {
          await trx.deleteFrom('traffic_rows').where('product_id', '=', productId).where('date', '=', date).execute();
          const values = rows.map((row) => ({
            product_id: productId,
            date,
            source: row.source,
            medium: row.medium,
            campaign: row.campaign,
            landing_page: row.landing_page,
            provider,
            sessions: row.sessions,
            users: row.users,
            new_users: row.new_users,
            pageviews: row.pageviews,
            engaged_sessions: row.engaged_sessions,
            bounce_rate: row.bounce_rate,
            avg_session_duration: row.avg_session_duration,
            conversions: row.conversions,
          }));
          for (let start = 0; start < values.length; start += SQLITE_MAX_ROWS_PER_INSERT) {
            await trx
              .insertInto('traffic_rows')
              .values(values.slice(start, start + SQLITE_MAX_ROWS_PER_INSERT))
              .execute();
          }
          inserted += values.length;
        }
      });
      return inserted;
    },

    async countRows(productId, from, to) {
      const row = await db
        .selectFrom('traffic_rows')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('product_id', '=', productId)
        .where('date', '>=', from)
        .where('date', '<=', to)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },

    async report(productId, query): Promise<TrafficReportPage> {
      const where = whereFilters(productId, query);
      const metricColumns = sql.join(
        TRAFFIC_METRICS.map((metric) => sql`${metricExpression(metric, dialect)} AS ${sql.ref(metric)}`),
      );
      const dimensions = sql.join(query.groupBy.map((dimension) => sql.ref(dimension)));
      const grouped = sql`SELECT ${dimensions}, ${metricColumns} FROM traffic_rows WHERE ${where} GROUP BY ${dimensions}`;

      // Order: the sort field (NULLs last in both directions, the same on both databases), then the
      // group key ascending, which is unique per group and so makes the order total for the keyset.
      const sortRef = sql.ref(`g.${query.sort.field}`);
      const direction = sql.raw(query.sort.direction === 'desc' ? 'DESC' : 'ASC');
      const keyTuple = sql`(${sql.join(query.groupBy.map((d) => sql.ref(`g.${d}`)))})`;
      const order = sql`(${sortRef} IS NULL), ${sortRef} ${direction}, ${sql.join(query.groupBy.map((d) => sql`${sql.ref(`g.${d}`)} ASC`))}`;

      let keyset: RawBuilder<unknown> = sql`1 = 1`;
      if (query.cursor !== undefined) {
        const lastKey = sql`(${sql.join(query.cursor.key)})`;
        const afterKey = sql`${keyTuple} > ${lastKey}`;
        const value = query.cursor.value;
        if (value === null) keyset = sql`(${sortRef} IS NULL AND ${afterKey})`;
        else {
          const beyond = query.sort.direction === 'desc' ? sql`${sortRef} < ${value}` : sql`${sortRef} > ${value}`;
          keyset = sql`(${sortRef} IS NULL OR ${beyond} OR (${sortRef} = ${value} AND ${afterKey}))`;
        }
      }

      const pageResult = await sql<
        Record<string, unknown>
      >`SELECT * FROM (${grouped}) AS g WHERE ${keyset} ORDER BY ${order} LIMIT ${query.limit + 1}`.execute(db);
      const totalsResult = await sql<
        Record<string, unknown>
      >`SELECT ${metricColumns} FROM traffic_rows WHERE ${where}`.execute(db);

      const rows = pageResult.rows.map((row) => numericRow(row, query.groupBy));
      const hasMore = rows.length > query.limit;
      if (hasMore) rows.length = query.limit;
      const totalsRow = totalsResult.rows[0] ?? {};
      const totals = Object.fromEntries(
        TRAFFIC_METRICS.map((m) => [m, toNumberOrNull(totalsRow[m])]),
      ) as TrafficReportPage['totals'];
      return { rows, hasMore, totals };
    },

    async startRun(run) {
      await db
        .insertInto('sync_runs')
        .values({
          product_id: run.productId,
          id: run.id,
          provider: run.provider,
          kind: run.kind,
          started_at: run.startedAt,
          finished_at: run.finishedAt,
          range_from: run.from,
          range_to: run.to,
          row_count: run.rows,
          outcome: run.outcome,
          error: run.error,
        })
        .execute();
    },

    async finishRun(productId, id, result) {
      await db
        .updateTable('sync_runs')
        .set({ finished_at: result.finishedAt, row_count: result.rows, outcome: result.outcome, error: result.error })
        .where('product_id', '=', productId)
        .where('id', '=', id)
        .execute();
    },

    async listRuns(productId, limit) {
      const rows = await db
        .selectFrom('sync_runs')
        .selectAll()
        .where('product_id', '=', productId)
        .orderBy('started_at', 'desc')
        .orderBy('id', 'desc')
        .limit(limit)
        .execute();
      return rows.map(runFromRow);
    },

    async lastSucceededAt(productId, provider) {
      let query = db
        .selectFrom('sync_runs')
        .select('finished_at')
        .where('product_id', '=', productId)
        .where('outcome', '=', 'succeeded');
      if (provider !== undefined) query = query.where('provider', '=', provider);
      const row = await query.orderBy('finished_at', 'desc').limit(1).executeTakeFirst();
      return row ? toIsoOrNull(row.finished_at) : null;
    },

    async withSyncLock(productId, fn) {
      if (dialect === 'sqlite') {
        if (localLocks.has(productId)) return { acquired: false };
        localLocks.add(productId);
        try {
          return { acquired: true, value: await fn() };
        } finally {
          localLocks.delete(productId);
        }
      }
      // A session lock on one pooled connection, held for the whole sync: it is released when the
      // connection ends, so a crashed instance never leaves the product locked.
      const key = syncLockKey(productId);
      return database.connection().execute(async (conn) => {
        const { rows } = await sql<{
          locked: boolean;
        }>`SELECT pg_try_advisory_lock(CAST(${key} AS BIGINT)) AS locked`.execute(conn);
        if (rows[0]?.locked !== true) return { acquired: false as const };
        try {
          return { acquired: true as const, value: await fn() };
        } finally {
          await sql`SELECT pg_advisory_unlock(CAST(${key} AS BIGINT))`.execute(conn);
        }
      });
    },
  };
}
