// Suppressions (governance.md §3): the HMACs of erased ids, which ingest refuses from then on.
import { sql } from 'kysely';
import type { SuppressionRecord } from '../types.js';
import type { ErasureDb } from './tables.js';

/** A marker that changes whenever suppressions are added or lifted (cheap to read). */
export async function suppressionsMarker(db: ErasureDb): Promise<string> {
  const row = await sql<{
    n: number | string;
    latest: string | null;
  }>`SELECT count(*) AS n, max(created_at) AS latest FROM suppressions`.execute(db);
  return `${row.rows[0]?.n ?? 0}/${row.rows[0]?.latest ?? ''}`;
}

export async function allSuppressions(db: ErasureDb): Promise<Array<{ productId: string; idHmac: string }>> {
  const rows = await db.selectFrom('suppressions').select(['product_id', 'id_hmac']).execute();
  return rows.map((r) => ({ productId: r.product_id, idHmac: r.id_hmac }));
}

export async function listSuppressions(
  db: ErasureDb,
  productId: string,
  query: { beforeId?: string | undefined; limit: number; idHmac?: string | undefined },
): Promise<SuppressionRecord[]> {
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
}

export async function liftSuppression(db: ErasureDb, productId: string, id: string): Promise<boolean> {
  const result = await db
    .deleteFrom('suppressions')
    .where('product_id', '=', productId)
    .where('id', '=', id)
    .executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}
