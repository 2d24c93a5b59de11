// What an erasure deletes of the person (governance.md §3): their events, their identity (users, ids,
// identifiers, merges, identity messages) and the records naming them (rejections, violations), each in
// small transactions; and the `user.erased` messages once every destination has passed them.
import { sql } from 'kysely';
import type { StoreDialect } from '../store-dialect.js';
import type { ErasureCounts, ErasureTargets } from '../types.js';
import type { EventDeletes } from './event-deletes.js';
import { jsonStringPattern, list, positionAtOrBefore, type ErasureDb } from './tables.js';

/** Deletes at most `limit` events of these ids (subject, or a Segment group call's user) in one transaction. */
export async function deleteEvents(
  deletes: EventDeletes,
  dialect: Pick<StoreDialect, 'jsonText' | 'eventNamed'>,
  productId: string,
  externalIds: string[],
  limit: number,
): Promise<number> {
  if (externalIds.length === 0) return 0;
  // Events whose subject is one of the ids …
  const bySubject = await deletes.ofSubjects(productId, externalIds, limit);
  if (bySubject > 0) return bySubject;
  // … then Segment group calls, whose subject is the account and whose user is in the properties
  // (userId) or the original item (anonymousId). Read through the name index.
  const groupUser = sql`(${dialect.jsonText('properties', 'user_id')} IN ${list(externalIds)} OR ${dialect.jsonText('original', 'anonymousId')} IN ${list(externalIds)})`;
  return deletes.where(productId, sql`${dialect.eventNamed(['group_identified'])} AND ${groupUser}`, limit);
}

/** The identity messages of the person: by their user, and those written before migration 700 by their JSON. */
async function deleteIdentityMessages(
  q: ErasureDb,
  productId: string,
  { externalIds, userIds }: ErasureTargets,
): Promise<number> {
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
  return messages + Number(result.numAffectedRows ?? 0);
}

/** Users, ids, identifiers, merges and identity messages of the person, in one transaction. */
export function deleteIdentity(
  db: ErasureDb,
  dialect: Pick<StoreDialect, 'writeTransaction'>,
  productId: string,
  targets: ErasureTargets,
): Promise<Pick<ErasureCounts, 'identifiers' | 'traits' | 'merges' | 'identity_messages'>> {
  return dialect.writeTransaction(db, async (q) => {
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
    const messages = await deleteIdentityMessages(q, productId, targets);
    return { identifiers, traits, merges: Number(merges.numDeletedRows), identity_messages: messages };
  });
}

/** At most `limit` rejections (and warnings) and violations naming these ids. */
export async function deleteRecords(
  db: ErasureDb,
  dialect: Pick<StoreDialect, 'writeTransaction'>,
  productId: string,
  externalIds: string[],
  limit: number,
): Promise<{ rejections: number; violations: number }> {
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
    rejections = await dialect.writeTransaction(db, async (q) => {
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
}

/** Deletes `user.erased` messages every active destination of the product has passed. */
export async function sweepErasedMessages(
  db: ErasureDb,
  dialect: Pick<StoreDialect, 'identityPosition'>,
  productId: string,
  olderThan: string,
): Promise<number> {
  const cursors = (
    await db.selectFrom('destinations').select('identity_cursor').where('product_id', '=', productId).execute()
  ).map((r) => r.identity_cursor);
  const rows = await sql<{
    id: string;
    position: string | number;
    created_at: string;
  }>`SELECT id, ${dialect.identityPosition} AS position, created_at FROM identity_messages
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
}
