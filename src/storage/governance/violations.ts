// Tracking plan violations (governance.md §2): recorded items, the hours' counts of those not recorded, and
// their expiry.
import type { Selectable } from 'kysely';
import { toIso } from '../database.js';
import type { ViolationQuery, ViolationRecord } from '../governance-types.js';
import { whereGiven } from '../where-given.js';
import { chunks, parseJson, type GovernanceDb, type GovernanceTables } from './tables.js';

function violationFromRow(row: Selectable<GovernanceTables['plan_violations']>): ViolationRecord {
  return {
    id: row.id,
    productId: row.product_id,
    receivedAt: toIso(row.received_at),
    keyId: row.key_id,
    route: row.route,
    canonicalName: row.canonical_name,
    code: row.code as ViolationRecord['code'],
    severity: row.severity,
    planVersion: Number(row.plan_version),
    messageId: row.message_id,
    subjectId: row.subject_id,
    errors: parseJson(row.errors),
  };
}

export async function insertViolations(db: GovernanceDb, rows: ViolationRecord[]): Promise<void> {
  for (const part of chunks(rows)) {
    await db
      .insertInto('plan_violations')
      .values(
        part.map((r) => ({
          id: r.id,
          product_id: r.productId,
          received_at: r.receivedAt,
          key_id: r.keyId,
          route: r.route,
          canonical_name: r.canonicalName,
          code: r.code,
          severity: r.severity,
          plan_version: r.planVersion,
          message_id: r.messageId,
          subject_id: r.subjectId,
          errors: JSON.stringify(r.errors),
        })),
      )
      .execute();
  }
}

export async function listViolations(
  db: GovernanceDb,
  productId: string,
  query: ViolationQuery,
): Promise<ViolationRecord[]> {
  const rows = await whereGiven(db.selectFrom('plan_violations').selectAll().where('product_id', '=', productId), [
    ['canonical_name', '=', query.canonicalName],
    ['code', '=', query.code],
    ['key_id', '=', query.keyId],
    ['received_at', '>=', query.receivedFrom],
    ['received_at', '<', query.receivedTo],
    ['id', '<', query.beforeId],
  ])
    .orderBy('id', 'desc')
    .limit(query.limit)
    .execute();
  return rows.map(violationFromRow);
}

export async function deleteViolationsOlderThan(db: GovernanceDb, at: string): Promise<void> {
  await db.deleteFrom('plan_violations').where('received_at', '<', at).execute();
  await db.deleteFrom('plan_violation_hours').where('hour', '<', at.slice(0, 13)).execute();
}
