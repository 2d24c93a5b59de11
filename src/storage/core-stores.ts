// Products, API keys and legacy usage (event reads: event-reads.ts): one implementation over Kysely for both dialects.
import { sql, type Kysely, type Selectable } from 'kysely';
import type { ApiKeysTable, Database } from './database.js';
import { toIso, toIsoOrNull } from './database.js';
import type {
  ApiKeyRecord,
  ApiKeyStore,
  LegacyUsageIncrement,
  LegacyUsageRecord,
  LegacyUsageStore,
  ProductStore,
} from './types.js';

export function productStore(db: Kysely<Database>): ProductStore {
  return {
    async create(product) {
      await db
        .insertInto('products')
        .values({ id: product.id, name: product.name, created_at: product.createdAt })
        .execute();
    },
    async get(id) {
      const row = await db.selectFrom('products').selectAll().where('id', '=', id).executeTakeFirst();
      return (
        row && {
          id: row.id,
          name: row.name,
          createdAt: toIso(row.created_at),
          retentionEventsDays: row.retention_events_days ?? null,
        }
      );
    },
    async list() {
      const rows = await db.selectFrom('products').selectAll().orderBy('created_at').orderBy('id').execute();
      return rows.map((row) => ({
        id: row.id,
        name: row.name,
        createdAt: toIso(row.created_at),
        retentionEventsDays: row.retention_events_days ?? null,
      }));
    },
  };
}

function apiKeyFromRow(row: Selectable<ApiKeysTable>): ApiKeyRecord {
  return {
    id: row.id,
    productId: row.product_id,
    kind: row.kind,
    name: row.name,
    prefix: row.prefix,
    keyHash: row.key_hash,
    createdAt: toIso(row.created_at),
    expiresAt: toIsoOrNull(row.expires_at),
    revokedAt: toIsoOrNull(row.revoked_at),
    lastUsedAt: toIsoOrNull(row.last_used_at),
    allowedOrigins: row.allowed_origins === null ? null : (JSON.parse(row.allowed_origins) as string[]),
  };
}

export function apiKeyStore(db: Kysely<Database>): ApiKeyStore {
  return {
    async create(key) {
      await db
        .insertInto('api_keys')
        .values({
          id: key.id,
          product_id: key.productId,
          kind: key.kind,
          name: key.name,
          prefix: key.prefix,
          key_hash: key.keyHash,
          created_at: key.createdAt,
          expires_at: key.expiresAt,
          revoked_at: key.revokedAt,
          last_used_at: key.lastUsedAt,
          allowed_origins: key.allowedOrigins == null ? null : JSON.stringify(key.allowedOrigins),
        })
        .execute();
    },
    async findByHash(keyHash) {
      const row = await db.selectFrom('api_keys').selectAll().where('key_hash', '=', keyHash).executeTakeFirst();
      return row && apiKeyFromRow(row);
    },
    async get(id) {
      const row = await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
      return row && apiKeyFromRow(row);
    },
    async listByProduct(productId) {
      const rows = await db
        .selectFrom('api_keys')
        .selectAll()
        .where('product_id', '=', productId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
      return rows.map(apiKeyFromRow);
    },
    async revoke(id, at) {
      await db
        .updateTable('api_keys')
        .set({ revoked_at: at })
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .execute();
      const row = await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
      return row && apiKeyFromRow(row);
    },
    async setAllowedOrigins(id, origins) {
      await db
        .updateTable('api_keys')
        .set({ allowed_origins: JSON.stringify(origins) })
        .where('id', '=', id)
        .execute();
      const row = await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
      return row && apiKeyFromRow(row);
    },
    async touch(usages) {
      for (const usage of usages) {
        await db.updateTable('api_keys').set({ last_used_at: usage.at }).where('id', '=', usage.id).execute();
      }
    },
  };
}

export function legacyUsageStore(db: Kysely<Database>): LegacyUsageStore {
  return {
    async record(increments: LegacyUsageIncrement[]) {
      if (increments.length === 0) return;
      await db.transaction().execute(async (trx) => {
        for (const inc of increments) {
          await trx
            .insertInto('legacy_usage')
            .values({
              product_id: inc.productId,
              api_key_id: inc.apiKeyId,
              event_name: inc.eventName,
              count: inc.count,
              first_seen_at: inc.lastSeenAt,
              last_seen_at: inc.lastSeenAt,
            })
            .onConflict((oc) =>
              oc.columns(['product_id', 'api_key_id', 'event_name']).doUpdateSet({
                count: sql`legacy_usage.count + ${inc.count}`,
                last_seen_at: sql`CASE WHEN legacy_usage.last_seen_at > ${inc.lastSeenAt} THEN legacy_usage.last_seen_at ELSE ${inc.lastSeenAt} END`,
              }),
            )
            .execute();
        }
      });
    },
    async list(productId: string): Promise<LegacyUsageRecord[]> {
      const rows = await db
        .selectFrom('legacy_usage')
        .leftJoin('api_keys', 'api_keys.id', 'legacy_usage.api_key_id')
        .select([
          'legacy_usage.api_key_id',
          'legacy_usage.event_name',
          'legacy_usage.count',
          'legacy_usage.first_seen_at',
          'legacy_usage.last_seen_at',
          'api_keys.prefix',
          'api_keys.name',
        ])
        .where('legacy_usage.product_id', '=', productId)
        .orderBy('legacy_usage.last_seen_at', 'desc')
        .orderBy('legacy_usage.event_name')
        .execute();
      return rows.map((row) => ({
        apiKeyId: row.api_key_id,
        keyPrefix: row.prefix ?? null,
        keyName: row.name ?? null,
        eventName: row.event_name,
        count: Number(row.count),
        firstSeenAt: toIso(row.first_seen_at),
        lastSeenAt: toIso(row.last_seen_at),
      }));
    },
  };
}
