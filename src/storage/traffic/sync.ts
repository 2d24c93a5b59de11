// What the traffic sync writes and reads back (contract §8): the product's source, its rows (one slice per
// date, replaced whole) and the log of sync runs.
import type { TrafficRow } from '../../domain/traffic-reports.js';
import { fromJson, toIsoOrNull } from '../database.js';
import type { SyncRunOutcome, SyncRunRecord, TrafficSourceRecord, TrafficSourceSummary } from '../types.js';
import { runFromRow, summaryFromRow, type TrafficDb } from './tables.js';

const SQLITE_MAX_ROWS_PER_INSERT = 500; // 15 columns × 500 rows stays under SQLite's 32,766 parameters.

export async function putSource(db: TrafficDb, source: TrafficSourceRecord): Promise<void> {
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
}

export async function getSource(db: TrafficDb, productId: string): Promise<TrafficSourceRecord | undefined> {
  const row = await db.selectFrom('traffic_sources').selectAll().where('product_id', '=', productId).executeTakeFirst();
  return row && { ...summaryFromRow(row), secret: fromJson(row.secret) };
}

export async function listSources(db: TrafficDb): Promise<TrafficSourceSummary[]> {
  const rows = await db
    .selectFrom('traffic_sources')
    .select(['product_id', 'provider', 'config', 'created_at', 'updated_at'])
    .orderBy('product_id')
    .execute();
  return rows.map((row) => summaryFromRow({ ...row, secret: '{}' }));
}

export async function replaceSlices(
  db: TrafficDb,
  productId: string,
  provider: string,
  rowsByDate: ReadonlyMap<string, readonly TrafficRow[]>,
): Promise<number> {
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
}

export async function countRows(db: TrafficDb, productId: string, from: string, to: string): Promise<number> {
  const row = await db
    .selectFrom('traffic_rows')
    .select((eb) => eb.fn.countAll().as('n'))
    .where('product_id', '=', productId)
    .where('date', '>=', from)
    .where('date', '<=', to)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function startRun(db: TrafficDb, run: SyncRunRecord): Promise<void> {
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
}

export async function finishRun(
  db: TrafficDb,
  productId: string,
  id: string,
  result: { finishedAt: string; rows: number | null; outcome: SyncRunOutcome; error: string | null },
): Promise<void> {
  await db
    .updateTable('sync_runs')
    .set({ finished_at: result.finishedAt, row_count: result.rows, outcome: result.outcome, error: result.error })
    .where('product_id', '=', productId)
    .where('id', '=', id)
    .execute();
}

export async function listRuns(db: TrafficDb, productId: string, limit: number): Promise<SyncRunRecord[]> {
  const rows = await db
    .selectFrom('sync_runs')
    .selectAll()
    .where('product_id', '=', productId)
    .orderBy('started_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
  return rows.map(runFromRow);
}

export async function lastSucceededAt(db: TrafficDb, productId: string, provider?: string): Promise<string | null> {
  let query = db
    .selectFrom('sync_runs')
    .select('finished_at')
    .where('product_id', '=', productId)
    .where('outcome', '=', 'succeeded');
  if (provider !== undefined) query = query.where('provider', '=', provider);
  const row = await query.orderBy('finished_at', 'desc').limit(1).executeTakeFirst();
  return row ? toIsoOrNull(row.finished_at) : null;
}
