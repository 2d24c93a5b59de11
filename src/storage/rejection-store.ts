// Recorded rejections (segment-compat "Bodies"; clarifications §13, §20): newest first, paged by id
// (a uuidv7, so id order is time order), filtered by code, key, severity and time.
import { sql, type Kysely } from 'kysely';
import { toIso, type Database } from './database.js';
import type { RejectionQuery, RejectionRecord, RejectionStore } from './types.js';
import { addHourCounts } from './hour-counts.js';
import { whereGiven } from './where-given.js';

export function rejectionStore(db: Kysely<Database>): RejectionStore {
  return {
    async insertMany(rows) {
      if (rows.length === 0) return;
      // One transaction: a failed flush is retried whole (capped-recorder.ts), so half of it must not stay.
      await db.transaction().execute(async (trx) => {
        // Chunks keep the statement under every dialect's parameter limit.
        for (let at = 0; at < rows.length; at += 500) {
          await trx
            .insertInto('rejections')
            .values(
              rows.slice(at, at + 500).map((r) => ({
                id: r.id,
                product_id: r.productId,
                received_at: r.receivedAt,
                key_id: r.keyId,
                route: r.route,
                item_index: r.index,
                message_id: r.messageId,
                code: r.code,
                detail: r.detail,
                severity: r.severity,
                item: r.item,
              })),
            )
            .execute();
        }
        // The ids each item names (governance.md §3: erasure finds its rejections without scanning items).
        const subjects = rows.flatMap((r) =>
          [...new Set(r.subjectIds ?? [])].map((externalId) => ({
            product_id: r.productId,
            external_id: externalId,
            rejection_id: r.id,
          })),
        );
        const withSubjects = trx.withTables<{
          rejection_subjects: { product_id: string; external_id: string; rejection_id: string };
        }>();
        for (let at = 0; at < subjects.length; at += 500) {
          await withSubjects
            .insertInto('rejection_subjects')
            .values(subjects.slice(at, at + 500))
            .onConflict((oc) => oc.doNothing())
            .execute();
        }
      });
    },
    addUnrecorded: (counts) => addHourCounts(db, 'rejection_hours', counts),
    async list(productId: string, query: RejectionQuery) {
      const rows = await whereGiven(db.selectFrom('rejections').selectAll().where('product_id', '=', productId), [
        ['code', '=', query.code],
        ['key_id', '=', query.keyId],
        ['severity', '=', query.severity],
        ['received_at', '>=', query.receivedFrom],
        ['received_at', '<', query.receivedTo],
        ['id', '<', query.beforeId],
      ])
        .orderBy('id', 'desc')
        .limit(query.limit)
        .execute();
      return rows.map((row): RejectionRecord => ({
        id: row.id,
        productId: row.product_id,
        receivedAt: toIso(row.received_at),
        keyId: row.key_id,
        route: row.route,
        index: row.item_index,
        messageId: row.message_id,
        code: row.code,
        detail: row.detail,
        severity: row.severity,
        item: row.item,
      }));
    },
    async deleteOlderThan(at) {
      await db.deleteFrom('rejections').where('received_at', '<', at).execute();
      await sql`DELETE FROM rejection_subjects WHERE NOT EXISTS (SELECT 1 FROM rejections r WHERE r.product_id = rejection_subjects.product_id AND r.id = rejection_subjects.rejection_id)`.execute(
        db,
      );
      await db.deleteFrom('rejection_hours').where('hour', '<', at.slice(0, 13)).execute();
    },
  };
}
