// The event catalogue (governance.md §1). Writes are upserts that add counts and widen first/last seen, so
// instances flushing the same rows concurrently add up; reads group the per-type rows back into one entry
// per path.
import { sql, type Selectable } from 'kysely';
import { toIso } from '../database.js';
import type {
  CatalogEventQuery,
  CatalogEventRecord,
  CatalogPropertyRecord,
  CatalogScope,
  CatalogState,
  CatalogWrite,
  JsonType,
} from '../governance-types.js';
import type { StoreDialect } from '../store-dialect.js';
import { chunks, type GovernanceDb, type GovernanceTables } from './tables.js';

/** How first and last seen are widened: the smaller and the larger of the stored and the added value. */
export type Widen = Pick<StoreDialect, 'least' | 'greatest'>;

type Origins = { sources: string[]; keyIds: string[] };

async function origins(db: GovernanceDb, productId: string, names: string[]): Promise<Map<string, Origins>> {
  const result = new Map<string, Origins>();
  for (const part of chunks(names)) {
    if (part.length === 0) continue;
    const rows = await db
      .selectFrom('catalog_event_origins')
      .select(['canonical_name', 'kind', 'value'])
      .where('product_id', '=', productId)
      .where('canonical_name', 'in', part)
      .orderBy('value')
      .execute();
    for (const row of rows) {
      let entry = result.get(row.canonical_name);
      if (entry === undefined) result.set(row.canonical_name, (entry = { sources: [], keyIds: [] }));
      (row.kind === 'source' ? entry.sources : entry.keyIds).push(row.value);
    }
  }
  return result;
}

function eventRecord(
  row: Selectable<GovernanceTables['catalog_events']>,
  extra: Origins | undefined,
): CatalogEventRecord {
  return {
    canonicalName: row.canonical_name,
    eventType: row.event_type,
    action: row.action,
    count: Number(row.count),
    firstSeen: toIso(row.first_seen),
    lastSeen: toIso(row.last_seen),
    sources: extra?.sources ?? [],
    keyIds: extra?.keyIds ?? [],
    propertiesOverflow: Number(row.properties_overflow),
  };
}

export async function listCatalogProperties(
  db: GovernanceDb,
  productId: string,
  scope: CatalogScope,
  canonicalName: string,
): Promise<CatalogPropertyRecord[]> {
  const rows = await db
    .selectFrom('catalog_properties')
    .select(['path', 'json_type', 'count', 'first_seen', 'last_seen'])
    .where('product_id', '=', productId)
    .where('scope', '=', scope)
    .where('canonical_name', '=', canonicalName)
    .orderBy('path')
    .orderBy('json_type')
    .execute();
  const byPath = new Map<string, CatalogPropertyRecord>();
  for (const row of rows) {
    const first = toIso(row.first_seen);
    const last = toIso(row.last_seen);
    const entry = byPath.get(row.path);
    if (entry === undefined) {
      byPath.set(row.path, {
        path: row.path,
        types: { [row.json_type as JsonType]: Number(row.count) },
        firstSeen: first,
        lastSeen: last,
      });
      continue;
    }
    entry.types[row.json_type as JsonType] = Number(row.count);
    if (first < entry.firstSeen) entry.firstSeen = first;
    if (last > entry.lastSeen) entry.lastSeen = last;
  }
  return [...byPath.values()];
}

export async function catalogState(
  db: GovernanceDb,
  productId: string,
  scope: CatalogScope,
  names: string[],
): Promise<CatalogState> {
  const knownNames = new Set<string>();
  const paths = new Map<string, Set<string>>();
  let totalNames = 0;
  if (scope === 'event') {
    const total = await db
      .selectFrom('catalog_events')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('product_id', '=', productId)
      .executeTakeFirst();
    totalNames = Number(total?.n ?? 0);
    for (const part of chunks(names)) {
      const rows = await db
        .selectFrom('catalog_events')
        .select('canonical_name')
        .where('product_id', '=', productId)
        .where('canonical_name', 'in', part)
        .execute();
      for (const row of rows) knownNames.add(row.canonical_name);
    }
  }
  for (const part of chunks(names)) {
    const rows = await db
      .selectFrom('catalog_properties')
      .select(['canonical_name', 'path'])
      .distinct()
      .where('product_id', '=', productId)
      .where('scope', '=', scope)
      .where('canonical_name', 'in', part)
      .execute();
    for (const row of rows) {
      let set = paths.get(row.canonical_name);
      if (set === undefined) paths.set(row.canonical_name, (set = new Set()));
      set.add(row.path);
    }
  }
  return { totalNames, knownNames, paths };
}

async function upsertEvents(q: GovernanceDb, widen: Widen, productId: string, events: CatalogWrite['events']) {
  for (const part of chunks(events)) {
    await q
      .insertInto('catalog_events')
      .values(
        part.map((e) => ({
          product_id: productId,
          canonical_name: e.canonicalName,
          event_type: e.eventType,
          action: e.action,
          count: e.count,
          first_seen: e.firstSeen,
          last_seen: e.lastSeen,
          properties_overflow: e.propertiesOverflow,
        })),
      )
      .onConflict((oc) =>
        oc.columns(['product_id', 'canonical_name']).doUpdateSet({
          count: sql`catalog_events.count + excluded.count`,
          first_seen: widen.least(sql`catalog_events.first_seen`, sql`excluded.first_seen`),
          last_seen: widen.greatest(sql`catalog_events.last_seen`, sql`excluded.last_seen`),
          properties_overflow: sql`catalog_events.properties_overflow + excluded.properties_overflow`,
        }),
      )
      .execute();
  }
  const originRows = events.flatMap((e) => [
    ...e.sources.map((value) => ({
      product_id: productId,
      canonical_name: e.canonicalName,
      kind: 'source' as const,
      value,
    })),
    ...e.keyIds.map((value) => ({
      product_id: productId,
      canonical_name: e.canonicalName,
      kind: 'key' as const,
      value,
    })),
  ]);
  for (const part of chunks(originRows)) {
    await q
      .insertInto('catalog_event_origins')
      .values(part)
      .onConflict((oc) => oc.doNothing())
      .execute();
  }
}

async function upsertProperties(
  q: GovernanceDb,
  widen: Widen,
  productId: string,
  properties: CatalogWrite['properties'],
) {
  for (const part of chunks(properties)) {
    await q
      .insertInto('catalog_properties')
      .values(
        part.map((p) => ({
          product_id: productId,
          scope: p.scope,
          canonical_name: p.canonicalName,
          path: p.path,
          json_type: p.jsonType,
          count: p.count,
          first_seen: p.firstSeen,
          last_seen: p.lastSeen,
        })),
      )
      .onConflict((oc) =>
        oc.columns(['product_id', 'scope', 'canonical_name', 'path', 'json_type']).doUpdateSet({
          count: sql`catalog_properties.count + excluded.count`,
          first_seen: widen.least(sql`catalog_properties.first_seen`, sql`excluded.first_seen`),
          last_seen: widen.greatest(sql`catalog_properties.last_seen`, sql`excluded.last_seen`),
        }),
      )
      .execute();
  }
}

/** Adds one flush's counts in one transaction. */
export async function writeCatalog(db: GovernanceDb, widen: Widen, write: CatalogWrite): Promise<void> {
  const { productId } = write;
  // Rows in one fixed order: two instances upserting the same names lock them in the same order, so
  // their flushes wait for each other instead of deadlocking.
  const events = [...write.events].sort((a, b) =>
    a.canonicalName < b.canonicalName ? -1 : a.canonicalName > b.canonicalName ? 1 : 0,
  );
  const key = (p: CatalogWrite['properties'][number]) =>
    `${p.scope}\u0000${p.canonicalName}\u0000${p.path}\u0000${p.jsonType}`;
  const properties = [...write.properties].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  await db.transaction().execute(async (trx) => {
    await upsertEvents(trx, widen, productId, events);
    await upsertProperties(trx, widen, productId, properties);
    for (const scope of ['event', 'trait'] as const) {
      const count = write.overflow[scope];
      if (count === 0) continue;
      await trx
        .insertInto('catalog_overflow')
        .values({ product_id: productId, scope, count })
        .onConflict((oc) =>
          oc.columns(['product_id', 'scope']).doUpdateSet({ count: sql`catalog_overflow.count + excluded.count` }),
        )
        .execute();
    }
  });
}

export async function listCatalogEvents(
  db: GovernanceDb,
  productId: string,
  query: CatalogEventQuery,
): Promise<CatalogEventRecord[]> {
  let q = db.selectFrom('catalog_events').selectAll().where('product_id', '=', productId);
  if (query.prefix !== undefined && query.prefix !== '') {
    // A range instead of LIKE: no wildcard escaping, and it uses the primary key on both dialects.
    q = q.where('canonical_name', '>=', query.prefix).where('canonical_name', '<', `${query.prefix}\uffff`);
  }
  if (query.sort === 'name') q = q.orderBy('canonical_name', 'asc');
  else q = q.orderBy(query.sort === 'count' ? 'count' : 'last_seen', 'desc').orderBy('canonical_name', 'asc');
  const rows = await q.offset(query.offset).limit(query.limit).execute();
  const extra = await origins(
    db,
    productId,
    rows.map((r) => r.canonical_name),
  );
  return rows.map((row) => eventRecord(row, extra.get(row.canonical_name)));
}

export async function getCatalogEvent(
  db: GovernanceDb,
  productId: string,
  canonicalName: string,
): Promise<{ event: CatalogEventRecord; properties: CatalogPropertyRecord[] } | undefined> {
  const row = await db
    .selectFrom('catalog_events')
    .selectAll()
    .where('product_id', '=', productId)
    .where('canonical_name', '=', canonicalName)
    .executeTakeFirst();
  if (row === undefined) return undefined;
  const extra = await origins(db, productId, [canonicalName]);
  return {
    event: eventRecord(row, extra.get(canonicalName)),
    properties: await listCatalogProperties(db, productId, 'event', canonicalName),
  };
}

export async function catalogOverflow(db: GovernanceDb, productId: string): Promise<Record<CatalogScope, number>> {
  const rows = await db
    .selectFrom('catalog_overflow')
    .select(['scope', 'count'])
    .where('product_id', '=', productId)
    .execute();
  const result: Record<CatalogScope, number> = { event: 0, trait: 0 };
  for (const row of rows) result[row.scope] = Number(row.count);
  return result;
}
