// Applies pending migrations in order, each in its own transaction. On PostgreSQL the whole run
// holds a session advisory lock on the schema it migrates, so several instances starting at once apply each
// migration once, while instances of other schemas of the same database do not wait for each other.
import { sql, type Kysely } from 'kysely';
import type { Database } from './database.js';
import { migrations as allMigrations, type Migration } from './migrations/index.js';
import type { Dialect, MigrationProgress } from './types.js';

/**
 * An arbitrary constant shared by every Inlet instance: with the hash of the schema's name, the key of the
 * migrator's advisory lock (docs/design.md, "One migration lock per schema").
 */
const MIGRATION_LOCK_CLASS = 7_243_001;

export interface MigrationReport {
  applied: Array<{ version: number; name: string }>;
  current: number;
}

export async function migrate(
  db: Kysely<Database>,
  dialect: Dialect,
  migrations: Migration[] = allMigrations,
  onProgress: (progress: MigrationProgress) => void = () => {},
): Promise<MigrationReport> {
  return db.connection().execute(async (conn) => {
    if (dialect === 'postgres')
      await sql`SELECT pg_advisory_lock(${MIGRATION_LOCK_CLASS}, hashtext(coalesce(current_schema(), '')))`.execute(
        conn,
      );
    try {
      await sql
        .raw(
          dialect === 'postgres'
            ? 'CREATE TABLE IF NOT EXISTS inlet_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)'
            : 'CREATE TABLE IF NOT EXISTS inlet_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
        )
        .execute(conn);
      const done = new Set(
        (await conn.selectFrom('inlet_migrations').select('version').execute()).map((row) => Number(row.version)),
      );
      const applied: MigrationReport['applied'] = [];
      const pending = migrations.filter((migration) => !done.has(migration.version));
      // A migration of the other dialect only is recorded as applied without a word.
      const work = pending.filter((migration) => migration.statements[dialect].length > 0);
      if (work.length > 0) onProgress({ phase: 'plan', pending: work.map((m) => m.version), fresh: done.size === 0 });
      for (const migration of pending) {
        const { version, name } = migration;
        const told = migration.statements[dialect].length > 0;
        if (told) onProgress({ phase: 'start', version, name, rewrites: migration.rewrites?.[dialect] });
        const started = performance.now();
        await conn.transaction().execute(async (trx) => {
          for (const statement of migration.statements[dialect]) await sql.raw(statement).execute(trx);
          await trx
            .insertInto('inlet_migrations')
            .values({ version: migration.version, name: migration.name, applied_at: new Date().toISOString() })
            .execute();
        });
        applied.push({ version, name });
        if (told) onProgress({ phase: 'done', version, name, seconds: (performance.now() - started) / 1000 });
      }
      const current = migrations.length === 0 ? 0 : Math.max(...migrations.map((m) => m.version));
      return { applied, current };
    } finally {
      if (dialect === 'postgres')
        await sql`SELECT pg_advisory_unlock(${MIGRATION_LOCK_CLASS}, hashtext(coalesce(current_schema(), '')))`.execute(
          conn,
        );
    }
  });
}
