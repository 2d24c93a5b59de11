// SQLite errors that mean "cannot write now, retry later" (busy, locked, disk I/O or full) rather
// than a bug: the HTTP layer answers them 503 without knowing any SQLite code.
const UNAVAILABLE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_IOERR', 'SQLITE_FULL']);

export function isSqliteUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (UNAVAILABLE.has(code) || code.startsWith('SQLITE_IOERR_') || code.startsWith('SQLITE_BUSY_'));
}
