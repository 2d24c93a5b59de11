// The traffic report (contract §8), aggregated in SQL. `sql` fragments are used where the columns are chosen at
// run time (group_by, sort): every name comes from the closed lists in domain/traffic-reports, never from input.
import { sql, type RawBuilder } from 'kysely';
import {
  COUNT_METRICS,
  FILTER_DIMENSIONS,
  TRAFFIC_METRICS,
  type TrafficDimension,
  type TrafficMetric,
  type TrafficReportQuery,
  type TrafficReportRow,
} from '../../domain/traffic-reports.js';
import type { StoreDialect } from '../store-dialect.js';
import type { TrafficReportPage } from '../types.js';
import { toNumberOrNull, type TrafficDb } from './tables.js';

/** How the weighted averages are rounded on this database. */
export type Round = StoreDialect['round'];

/** Decimals kept of the weighted averages: enough for any rate or duration, and no binary noise (0.49, not 0.49000000000000005). */
const AVERAGE_DECIMALS = 9;

function metricExpression(metric: TrafficMetric, round: Round): RawBuilder<unknown> {
  const column = sql.ref(metric);
  if ((COUNT_METRICS as readonly string[]).includes(metric)) return sql`sum(${column})`;
  // Weighted by sessions, over the rows that supply both the metric and sessions. Rounded in SQL, so
  // the value a cursor carries is exactly the value the next page's keyset compares against.
  const average = sql`CAST(sum(${column} * sessions) AS DOUBLE PRECISION) / nullif(sum(CASE WHEN ${column} IS NOT NULL THEN sessions END), 0)`;
  return round(average, AVERAGE_DECIMALS);
}

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

/** The keyset condition of the page after `query.cursor` (everything on the first page). */
function keysetAfter(query: TrafficReportQuery): RawBuilder<unknown> {
  if (query.cursor === undefined) return sql`1 = 1`;
  const sortRef = sql.ref(`g.${query.sort.field}`);
  const keyTuple = sql`(${sql.join(query.groupBy.map((d) => sql.ref(`g.${d}`)))})`;
  const lastKey = sql`(${sql.join(query.cursor.key)})`;
  const afterKey = sql`${keyTuple} > ${lastKey}`;
  const value = query.cursor.value;
  if (value === null) return sql`(${sortRef} IS NULL AND ${afterKey})`;
  const beyond = query.sort.direction === 'desc' ? sql`${sortRef} < ${value}` : sql`${sortRef} > ${value}`;
  return sql`(${sortRef} IS NULL OR ${beyond} OR (${sortRef} = ${value} AND ${afterKey}))`;
}

export async function report(
  db: TrafficDb,
  round: Round,
  productId: string,
  query: TrafficReportQuery,
): Promise<TrafficReportPage> {
  const where = whereFilters(productId, query);
  const metricColumns = sql.join(
    TRAFFIC_METRICS.map((metric) => sql`${metricExpression(metric, round)} AS ${sql.ref(metric)}`),
  );
  const dimensions = sql.join(query.groupBy.map((dimension) => sql.ref(dimension)));
  const grouped = sql`SELECT ${dimensions}, ${metricColumns} FROM traffic_rows WHERE ${where} GROUP BY ${dimensions}`;

  // Order: the sort field (NULLs last in both directions, the same on both databases), then the
  // group key ascending, which is unique per group and so makes the order total for the keyset.
  const sortRef = sql.ref(`g.${query.sort.field}`);
  const direction = sql.raw(query.sort.direction === 'desc' ? 'DESC' : 'ASC');
  const order = sql`(${sortRef} IS NULL), ${sortRef} ${direction}, ${sql.join(query.groupBy.map((d) => sql`${sql.ref(`g.${d}`)} ASC`))}`;

  const pageResult = await sql<
    Record<string, unknown>
  >`SELECT * FROM (${grouped}) AS g WHERE ${keysetAfter(query)} ORDER BY ${order} LIMIT ${query.limit + 1}`.execute(db);
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
}
