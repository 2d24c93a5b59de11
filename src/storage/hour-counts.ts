// Per product and hour, how many items were not recorded because the recording cap was reached
// (rejections, tracking plan violations). Counts are added to, never overwritten: every instance adds
// its own. One statement for both tables, which have the same three columns.
import { sql, type QueryExecutorProvider } from 'kysely';

export type HourCountsTable = 'rejection_hours' | 'plan_violation_hours';

export interface HourCount {
  productId: string;
  /** `YYYY-MM-DDTHH` (UTC). */
  hour: string;
  count: number;
}

export async function addHourCounts(
  db: QueryExecutorProvider,
  table: HourCountsTable,
  counts: readonly HourCount[],
): Promise<void> {
  for (const { productId, hour, count } of counts) {
    await sql`INSERT INTO ${sql.table(table)} (product_id, hour, unrecorded) VALUES (${productId}, ${hour}, ${count})
      ON CONFLICT (product_id, hour) DO UPDATE SET unrecorded = ${sql.ref(`${table}.unrecorded`)} + ${count}`.execute(
      db,
    );
  }
}
