// Erasure jobs (governance.md §3): the request that resolves the person and suppresses their ids in one
// transaction, the job's record, lease and targets, and the installation's HMAC key they are keyed with.
import { sql, type RawBuilder } from 'kysely';
import type { StoreDialect } from '../store-dialect.js';
import type { ErasureCounts, ErasureRecord, ErasureRequestInput, ErasureTargets } from '../types.js';
import { EMPTY_COUNTS, fromRow, type ErasureDb, type ErasureTables } from './tables.js';

export type JobDialect = Pick<StoreDialect, 'writeTransaction' | 'lockIdentityLog' | 'appendIdentityMessage'>;

export async function installationSecret(db: ErasureDb, generate: () => string): Promise<string> {
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
    await db.selectFrom('installation_secrets').select('secret').where('name', '=', 'hmac').executeTakeFirstOrThrow()
  ).secret;
}

export function keyFingerprint(
  db: ErasureDb,
  dialect: JobDialect,
  fingerprint: string,
): Promise<{ stored: string; replaced: boolean }> {
  return dialect.writeTransaction(db, async (q) => {
    // The first instance to store a fingerprint keeps it; one starting at the same moment waits for that insert
    // and compares with what it stored, rather than failing on the key (a read, then an insert, did).
    await q
      .insertInto('installation_secrets')
      .values({ name: 'hmac-fingerprint', secret: fingerprint, created_at: new Date().toISOString() })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    const row = await q
      .selectFrom('installation_secrets')
      .select('secret')
      .where('name', '=', 'hmac-fingerprint')
      .executeTakeFirstOrThrow();
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
}

/** The user the id resolves to, and every user merged into it (earlier identity messages name those). */
async function resolvePerson(q: ErasureDb, productId: string, externalId: string): Promise<ErasureTargets> {
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

/** The job's targets, and a suppression per linked id (an id suppressed already keeps its suppression). */
async function storeTargets(q: ErasureDb, input: ErasureRequestInput, targets: ErasureTargets): Promise<void> {
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
}

export function request(
  db: ErasureDb,
  dialect: JobDialect,
  input: ErasureRequestInput,
): Promise<{ record: ErasureRecord; externalIds: string[] }> {
  return dialect.writeTransaction(db, async (q) => {
    // The user.erased message joins the identity log: the log is locked before the first write, so the
    // destinations' read horizon covers it (identity-store.ts).
    await dialect.lockIdentityLog(q);
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
    await storeTargets(q, input, targets);
    await dialect.appendIdentityMessage(q, {
      product_id: input.productId,
      id: input.messageId,
      type: 'user.erased',
      created_at: input.requestedAt,
      data: JSON.stringify({ externalIds: targets.externalIds, erasureId: input.erasureId }),
      user_id: null,
    });
    return { record: fromRow(row), externalIds: targets.externalIds };
  });
}

export async function getJob(db: ErasureDb, productId: string, id: string): Promise<ErasureRecord | undefined> {
  const row = await db
    .selectFrom('erasures')
    .selectAll()
    .where('product_id', '=', productId)
    .where('id', '=', id)
    .executeTakeFirst();
  return row && fromRow(row);
}

export async function listJobs(
  db: ErasureDb,
  productId: string,
  query: { beforeId?: string | undefined; limit: number; idHmac?: string | undefined },
): Promise<ErasureRecord[]> {
  let select = db.selectFrom('erasures').selectAll().where('product_id', '=', productId);
  if (query.beforeId !== undefined) select = select.where('id', '<', query.beforeId);
  if (query.idHmac !== undefined) select = select.where('id_hmac', '=', query.idHmac);
  return (await select.orderBy('id', 'desc').limit(query.limit).execute()).map(fromRow);
}

/**
 * Takes the lease of one pending or running job whose lease is free or expired (or of the given one), for `leaseMs`
 * from the database's now (`now`, the dialect's clock expression).
 */
export async function claim(
  db: ErasureDb,
  now: RawBuilder<number>,
  holder: string,
  leaseMs: number,
  only?: { productId: string; id: string },
): Promise<ErasureRecord | undefined> {
  let candidates = db
    .selectFrom('erasures')
    .select(['product_id', 'id'])
    .where('status', 'in', ['pending', 'running'])
    .where((eb) =>
      eb.or([eb('lease_holder', 'is', null), eb('lease_holder', '=', holder), eb('lease_until', '<', now)]),
    );
  if (only !== undefined) candidates = candidates.where('product_id', '=', only.productId).where('id', '=', only.id);
  for (const candidate of await candidates.orderBy('requested_at').limit(5).execute()) {
    const result = await db
      .updateTable('erasures')
      .set({ lease_holder: holder, lease_until: sql<number>`${now} + ${leaseMs}` })
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
}

/**
 * Saves progress, fenced by the lease holder; false when the lease was lost. Renews the lease for `leaseMs` from
 * the database's now, or ends it when `leaseMs` is 0.
 */
export async function save(
  db: ErasureDb,
  now: RawBuilder<number>,
  record: ErasureRecord,
  holder: string,
  leaseMs: number,
) {
  const result = await db
    .updateTable('erasures')
    .set({
      status: record.status,
      phase: record.phase,
      counts: JSON.stringify(record.counts),
      started_at: record.startedAt,
      finished_at: record.finishedAt,
      error: record.error,
      lease_until: leaseMs === 0 ? 0 : sql<number>`${now} + ${leaseMs}`,
    })
    .where('product_id', '=', record.productId)
    .where('id', '=', record.id)
    .where('lease_holder', '=', holder)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function release(db: ErasureDb, productId: string, id: string, holder: string): Promise<void> {
  await db
    .updateTable('erasures')
    .set({ lease_holder: null, lease_until: 0 })
    .where('product_id', '=', productId)
    .where('id', '=', id)
    .where('lease_holder', '=', holder)
    .execute();
}

export async function targets(db: ErasureDb, productId: string, erasureId: string): Promise<ErasureTargets> {
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
}

/** Forgets the job's targets (its last step). */
export async function deleteTargets(db: ErasureDb, productId: string, erasureId: string): Promise<void> {
  await db
    .deleteFrom('erasure_targets')
    .where('product_id', '=', productId)
    .where('erasure_id', '=', erasureId)
    .execute();
}
