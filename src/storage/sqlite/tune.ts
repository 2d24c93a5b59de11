// The pragmas of every connection that writes a SQLite file: the server's and its writer thread's.
import type BetterSqlite3 from 'better-sqlite3';

export interface TuneOptions {
  sqliteSynchronous?: 'full' | 'normal';
  sqliteBusyTimeoutMs?: number;
  sqliteCacheKib?: number;
}

/** SQLite's page cache (SQLite's own default: 2,000 KiB). */
export const SQLITE_CACHE_KIB = 2000;

export function tune(raw: BetterSqlite3.Database, options: TuneOptions): void {
  raw.pragma('journal_mode = WAL');
  raw.pragma(`synchronous = ${options.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
  raw.pragma(`busy_timeout = ${options.sqliteBusyTimeoutMs ?? 5000}`);
  raw.pragma('foreign_keys = ON');
  // Erasure (governance.md §3): a deleted row's bytes are overwritten with zeros, not left in free
  // space. Costs extra writes on deletes only (erasure, retention, sweeps); inserts are unaffected.
  raw.pragma('secure_delete = ON');
  raw.pragma(`cache_size = -${options.sqliteCacheKib ?? SQLITE_CACHE_KIB}`);
}
