// Catalogue, tracking plans and violations (governance.md §1–2) on both dialects. Catalogue writes are
// upserts that add counts and widen first/last seen, so instances flushing the same rows concurrently
// add up; reads group the per-type rows back into one entry per path.
import { sql, type ColumnType, type Kysely, type Selectable } from 'kysely';
import { toIso, type Database } from './database.js';
import type {
  CatalogEventRecord,
  CatalogPropertyRecord,
  CatalogScope,
  GovernanceStore,
  JsonType,
  TrackingPlanVersion,
  ViolationRecord,
} from './governance-types.js';
import type { Dialect } from './types.js';
import { addHourCounts } from './hour-counts.js';
import { whereGiven } from './where-given.js';

type Timestamp = ColumnType<Date | string, string, string>;
type Count = ColumnType<number | string, number, number>;
type Json = ColumnType<string | Record<string, unknown> | unknown[], string, string>;

interface GovernanceTables {
  catalog_events: {
    product_id: string;
    canonical_name: string;
    event_type: string;
    action: string;
    count: Count;
    first_seen: Timestamp;
    last_seen: Timestamp;
    properties_overflow: Count;
  };
  catalog_event_origins: { product_id: string; canonical_name: string; kind: 'source' | 'key'; value: string };
  catalog_properties: {
    product_id: string;
    scope: CatalogScope;
    canonical_name: string;
    path: string;
    json_type: string;
    count: Count;
    first_seen: Timestamp;
    last_seen: Timestamp;
  };
  catalog_overflow: { product_id: string; scope: CatalogScope; count: Count };
  tracking_plans: { product_id: string; version: number; plan: Json; created_at: Timestamp };
  plan_violations: {
    id: string;
    product_id: string;
    received_at: Timestamp;
    key_id: string | null;
    route: string;
    canonical_name: string;
    code: string;
    severity: 'rejected' | 'warning';
    plan_version: number;
    message_id: string | null;
    subject_id: string | null;
    errors: Json;
  };
  plan_violation_hours: { product_id: string; hour: string; unrecorded: number };
}

type GovernanceDatabase = Database & GovernanceTables;

/** Rows per statement: well under every dialect's parameter limit. */
const CHUNK = 200;

function chunks<T>(rows: T[]): T[][] {
  const out: T[][] = [];
  for (let at = 0; at < rows.length; at += CHUNK) out.push(rows.slice(at, at + CHUNK));
  return out;
}

function parseJson<T>(value: unknown): T {
  return (typeof value === 'string' ? JSON.parse(value) : value) as T;
}

export function governanceStore(kysely: Kysely<Database>, dialect: Dialect): GovernanceStore {
  const db = kysely as unknown as Kysely<GovernanceDatabase>;
  // SQLite's two-argument min/max are scalar; PostgreSQL spells them LEAST/GREATEST.
  const least = dialect === 'sqlite' ? 'min' : 'least';
  const greatest = dialect === 'sqlite' ? 'max' : 'greatest';

  async function origins(
    productId: string,
    names: string[],
  ): Promise<Map<string, { sources: string[]; keyIds: string[] }>> {
    const result = new Map<string, { sources: string[]; keyIds: string[] }>();
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
    extra: { sources: string[]; keyIds: string[] } | undefined,
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

  async function listProperties(
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

  function planFromRow(row: { version: number; plan: unknown; created_at: Date | string }): TrackingPlanVersion {
    return { version: Number(row.version), plan: parseJson(row.plan), createdAt: toIso(row.created_at) };
  }

  return {
    async catalogState(productId, scope, names) {
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
    },

    async writeCatalog(write) {
      const { productId } = write;
      // Rows in one fixed order: two instances upserting the same names lock them in the same order, so
      // their flushes wait for each other instead of deadlocking.
      const events = [...write.events].sort((a, b) =>
        a.canonicalName < b.canonicalName ? -1 : a.canonicalName > b.canonicalName ? 1 : 0,
      );
      const key = (p: (typeof write.properties)[number]) =>
        `${p.scope}\u0000${p.canonicalName}\u0000${p.path}\u0000${p.jsonType}`;
      const properties = [...write.properties].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
      await db.transaction().execute(async (trx) => {
        for (const part of chunks(events)) {
          await trx
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
                first_seen: sql`${sql.raw(least)}(catalog_events.first_seen, excluded.first_seen)`,
                last_seen: sql`${sql.raw(greatest)}(catalog_events.last_seen, excluded.last_seen)`,
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
          await trx
            .insertInto('catalog_event_origins')
            .values(part)
            .onConflict((oc) => oc.doNothing())
            .execute();
        }
        for (const part of chunks(properties)) {
          await trx
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
                first_seen: sql`${sql.raw(least)}(catalog_properties.first_seen, excluded.first_seen)`,
                last_seen: sql`${sql.raw(greatest)}(catalog_properties.last_seen, excluded.last_seen)`,
              }),
            )
            .execute();
        }
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
    },

    async listCatalogEvents(productId, query) {
      let q = db.selectFrom('catalog_events').selectAll().where('product_id', '=', productId);
      if (query.prefix !== undefined && query.prefix !== '') {
        // A range instead of LIKE: no wildcard escaping, and it uses the primary key on both dialects.
        q = q.where('canonical_name', '>=', query.prefix).where('canonical_name', '<', `${query.prefix}\uffff`);
      }
      if (query.sort === 'name') q = q.orderBy('canonical_name', 'asc');
      else q = q.orderBy(query.sort === 'count' ? 'count' : 'last_seen', 'desc').orderBy('canonical_name', 'asc');
      const rows = await q.offset(query.offset).limit(query.limit).execute();
      const extra = await origins(
        productId,
        rows.map((r) => r.canonical_name),
      );
      return rows.map((row) => eventRecord(row, extra.get(row.canonical_name)));
    },

    async getCatalogEvent(productId, canonicalName) {
      const row = await db
        .selectFrom('catalog_events')
        .selectAll()
        .where('product_id', '=', productId)
        .where('canonical_name', '=', canonicalName)
        .executeTakeFirst();
      if (row === undefined) return undefined;
      const extra = await origins(productId, [canonicalName]);
      return {
        event: eventRecord(row, extra.get(canonicalName)),
        properties: await listProperties(productId, 'event', canonicalName),
      };
    },

    listCatalogProperties: listProperties,

    async catalogOverflow(productId) {
      const rows = await db
        .selectFrom('catalog_overflow')
        .select(['scope', 'count'])
        .where('product_id', '=', productId)
        .execute();
      const result: Record<CatalogScope, number> = { event: 0, trait: 0 };
      for (const row of rows) result[row.scope] = Number(row.count);
      return result;
    },

    async putPlan(productId, plan, createdAt) {
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
    },

    async currentPlan(productId) {
      const row = await db
        .selectFrom('tracking_plans')
        .select(['version', 'plan', 'created_at'])
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? undefined : planFromRow(row);
    },

    async currentPlanVersion(productId) {
      const row = await db
        .selectFrom('tracking_plans')
        .select('version')
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? 0 : Number(row.version);
    },

    async listPlanVersions(productId) {
      const rows = await db
        .selectFrom('tracking_plans')
        .select(['version', 'plan', 'created_at'])
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .execute();
      return rows.map(planFromRow);
    },

    async insertViolations(rows) {
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
    },

    addUnrecordedViolations: (counts) => addHourCounts(db, 'plan_violation_hours', counts),

    async listViolations(productId, query) {
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
    },

    async deleteViolationsOlderThan(at) {
      await db.deleteFrom('plan_violations').where('received_at', '<', at).execute();
      await db.deleteFrom('plan_violation_hours').where('hour', '<', at.slice(0, 13)).execute();
    },
  };
}
