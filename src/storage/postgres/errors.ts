// Which PostgreSQL / node-postgres errors mean "the database is not there (or not the primary) right
// now" — answered 503 with Retry-After, never 500 — as opposed to a bug or a bad row.

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

// node-postgres reports these without a code.
const LOST_MESSAGES = [
  'Connection terminated', // "… unexpectedly", "… due to connection timeout"
  'is not queryable', // a client that already saw its connection fail, or was closed
  'Query read timeout',
  'timeout exceeded when trying to connect',
  'The server does not support SSL connections',
  'Cannot use a pool after calling end on the pool',
];

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * The connection that saw this error cannot be trusted for the next query: its server went away,
 * is shutting down or starting, or is (now) read-only. The pool drops such a connection.
 * - 08xxx connection exception; 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now;
 * - 25006 read-only transaction: a demoted primary or a standby;
 * - socket errors and node-postgres' own "terminated" / timeout errors.
 */
export function isConnectionLost(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false;
  const code = codeOf(error);
  if (code !== undefined) {
    if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '25006')
      return true;
    if (NETWORK_CODES.has(code)) return true;
  }
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && LOST_MESSAGES.some((m) => message.includes(m));
}

/**
 * Storage unavailable, retry later (503): a lost connection (above), too many connections (53300),
 * out of disk or memory (53100, 53200), or a transaction rolled back by the server that a retry may
 * pass (40P01 deadlock, 40001 serialization failure). Looks through `cause` chains (Kysely and the
 * services wrap errors).
 */
export function isPostgresUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current !== null && typeof current === 'object' && depth < 5; depth++) {
    if (isConnectionLost(current)) return true;
    const code = codeOf(current);
    if (code === '53300' || code === '53100' || code === '53200' || code === '40P01' || code === '40001') return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
