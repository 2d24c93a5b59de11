// Tracking plans (governance.md §2): numbered versions per product, the newest one in force.
import { toIso } from '../database.js';
import type { TrackingPlanVersion } from '../governance-types.js';
import { parseJson, type GovernanceDb } from './tables.js';

function planFromRow(row: { version: number; plan: unknown; created_at: Date | string }): TrackingPlanVersion {
  return { version: Number(row.version), plan: parseJson(row.plan), createdAt: toIso(row.created_at) };
}

export async function putPlan(
  db: GovernanceDb,
  productId: string,
  plan: Record<string, unknown>,
  createdAt: string,
): Promise<TrackingPlanVersion> {
  // Two instances storing a version at once: the primary key refuses the second, which retries with the next number.
  for (let attempt = 0; ; attempt++) {
    const top = await db
      .selectFrom('tracking_plans')
      .select((eb) => eb.fn.max('version').as('v'))
      .where('product_id', '=', productId)
      .executeTakeFirst();
    const version = Number(top?.v ?? 0) + 1;
    try {
      await db
        .insertInto('tracking_plans')
        .values({ product_id: productId, version, plan: JSON.stringify(plan), created_at: createdAt })
        .execute();
      return { version, plan, createdAt };
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (attempt < 5 && (code === '23505' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY')) continue;
      throw error;
    }
  }
}

export async function currentPlan(db: GovernanceDb, productId: string): Promise<TrackingPlanVersion | undefined> {
  const row = await db
    .selectFrom('tracking_plans')
    .select(['version', 'plan', 'created_at'])
    .where('product_id', '=', productId)
    .orderBy('version', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row === undefined ? undefined : planFromRow(row);
}

export async function currentPlanVersion(db: GovernanceDb, productId: string): Promise<number> {
  const row = await db
    .selectFrom('tracking_plans')
    .select('version')
    .where('product_id', '=', productId)
    .orderBy('version', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row === undefined ? 0 : Number(row.version);
}

export async function listPlanVersions(db: GovernanceDb, productId: string): Promise<TrackingPlanVersion[]> {
  const rows = await db
    .selectFrom('tracking_plans')
    .select(['version', 'plan', 'created_at'])
    .where('product_id', '=', productId)
    .orderBy('version', 'desc')
    .execute();
  return rows.map(planFromRow);
}
