// Test storage for the traffic suites: every suite runs on SQLite and on PostgreSQL (a schema of its
// own per run). Under `npm test` (scripts/test.mjs sets INLET_TEST_DIALECT) only that dialect runs;
// run directly, both run unless INLET_TEST_DIALECTS narrows them.
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { openReusableStorage } from './helpers.js';

export const POSTGRES_URL = process.env.INLET_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const DIALECTS = (process.env.INLET_TEST_DIALECT ?? process.env.INLET_TEST_DIALECTS ?? 'sqlite,postgres')
  .split(',')
  .map((d) => d.trim())
  .filter(Boolean);

export interface TestStorage {
  storage: OpenedStorage;
  /** Another storage on the same database, as a second instance would open it (SQLite: the same one). */
  openAnother(): Promise<OpenedStorage>;
  cleanup(): Promise<void>;
}

export async function openTestStorage(dialect: string): Promise<TestStorage> {
  if (dialect === 'sqlite') {
    const storage = await openStorage('sqlite::memory:');
    return { storage, openAnother: async () => storage, cleanup: () => storage.close() };
  }
  // An emptied, migrated schema of an earlier test when one is free (helpers.ts, reusableDatabase).
  const { storage, database, close } = await openReusableStorage({ postgresPoolSize: 4 }, 'postgres');
  const schema = database.postgresSchema!;
  const others: OpenedStorage[] = [];
  return {
    storage,
    async openAnother() {
      const other = await openStorage(POSTGRES_URL, { postgresSchema: schema, postgresPoolSize: 2 });
      others.push(other);
      return other;
    },
    async cleanup() {
      for (const other of others) await other.close();
      await close();
    },
  };
}
