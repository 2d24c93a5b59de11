// The one place that opens storage: the URL says which backend (sqlite/backend.ts, postgres/backend.ts), which
// opens and tunes its database; this module migrates the schema and assembles the port from the shared stores
// and the parts the backend gives.
import { resolve } from 'node:path';
import type { Kysely } from 'kysely';
import type { Backend } from './backend.js';
import type { Database } from './database.js';
import { apiKeyStore, legacyUsageStore, productStore } from './core-stores.js';
import { rejectionStore } from './rejection-store.js';
import { governanceStore } from './governance-store.js';
import { transformationStore } from './transformation-store.js';
import { identityStore } from './identity-store.js';
import { migrate, type MigrationReport } from './migrate.js';
import { trafficStore } from './traffic-store.js';
import { erasureStore } from './erasure-store.js';
import { checkWritableTarget, postgresSettings } from './postgres/connection-url.js';
import { openSqliteBackend, type SqliteOptions } from './sqlite/backend.js';
import { openPostgresBackend, type PostgresOptions } from './postgres/backend.js';
import type { Dialect, MigrationProgress, Storage } from './types.js';

export interface OpenStorageOptions extends SqliteOptions, PostgresOptions {
  /** Apply pending migrations before returning (default true). */
  migrate?: boolean;
  /** Told of each pending migration as it starts and ends (migrate.ts, narrateMigrations). */
  onMigration?: (progress: MigrationProgress) => void;
}

export interface OpenedStorage extends Storage {
  readonly db: Kysely<Database>;
  readonly migration: MigrationReport | undefined;
  /** True once close() was called: every later query fails, and that means "unavailable", not a bug. */
  readonly closed: boolean;
}

export function dialectOf(url: string): Dialect {
  return url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
}

/**
 * Checks a database URL without connecting (the config does at load time, so a bad URL fails before
 * anything starts): a PostgreSQL URL must parse and must not ask for a read-only session. Throws
 * DatabaseUrlError. The config calls this rather than the adapter's parser: outside storage, only
 * this module knows the adapters.
 */
export function checkDatabaseUrl(url: string): void {
  if (dialectOf(url) === 'postgres') checkWritableTarget(postgresSettings(url));
}

/** `sqlite:./data/inlet.db` → absolute path; `sqlite::memory:` stays in memory. */
export function sqlitePath(url: string): string {
  const path = url.slice('sqlite:'.length).replace(/^\/\//, '');
  return path === ':memory:' ? path : resolve(path);
}

function openBackend(url: string, options: OpenStorageOptions): Backend | Promise<Backend> {
  return dialectOf(url) === 'sqlite' ? openSqliteBackend(sqlitePath(url), options) : openPostgresBackend(url, options);
}

export async function openStorage(url: string, options: OpenStorageOptions = {}): Promise<OpenedStorage> {
  const backend = await openBackend(url, options);
  const { db } = backend;
  const migration =
    options.migrate === false ? undefined : await migrate(db, backend.dialect, undefined, options.onMigration);
  const ready = await backend.ready(migration !== undefined);
  const { capabilities, storeDialect } = ready;
  let closed = false;
  return {
    name: ready.name,
    capabilities,
    db,
    migration,
    isUnavailable: ready.isUnavailable,
    get closed() {
      return closed;
    },
    products: productStore(db),
    apiKeys: apiKeyStore(db),
    events: ready.events,
    legacyUsage: legacyUsageStore(db),
    rejections: rejectionStore(db),
    identity: identityStore(db, storeDialect),
    traffic: trafficStore(db, storeDialect),
    destinations: ready.destinations,
    governance: governanceStore(db, storeDialect),
    transformations: transformationStore(db),
    erasure: erasureStore(db, storeDialect, ready.eventDeletes),
    ping: () => ready.ping(),
    async close() {
      closed = true;
      await ready.close();
    },
  };
}
