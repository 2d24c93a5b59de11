// PostgreSQL and socket errors that mean "database unreachable or the transaction was rolled back,
// retry later" rather than a bug: the HTTP layer answers them 503 without knowing any SQLSTATE.
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE']);
const RETRYABLE_SQLSTATES = new Set([
  '57P01', // admin shutdown
  '57P03', // cannot connect now
  '53300', // too many connections
  '40P01', // deadlock detected: the transaction was rolled back, a retry is safe
  '40001', // serialization failure: likewise
]);

export function isPostgresUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  // Class 08: connection exception.
  return SOCKET_ERRORS.has(code) || code.startsWith('08') || RETRYABLE_SQLSTATES.has(code);
}
