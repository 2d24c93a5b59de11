// INLET_DATABASE_URL for PostgreSQL, read the way libpq reads a connection URI, so the URL an HA tool
// prints (`pg_autoctl show uri`, Patroni, a managed service's docs) works as it is:
//
//   postgres://[user[:password]@][host1[:port1]][,host2[:port2]…][/dbname][?param=value&…]
//
// - several hosts, tried in turn; IPv6 hosts in brackets (`[::1]:5433`); a missing port is 5432;
//   `?host=`/`?port=` lists complete or replace the ones before the slash, as in libpq;
// - `target_session_attrs` (any, read-write, primary, read-only, standby, prefer-standby);
// - `sslmode` with libpq's meaning for every value (disable, allow, prefer — the default —, require,
//   verify-ca, verify-full), `sslrootcert`, `sslcert`, `sslkey`;
// - `connect_timeout` (seconds, per host), `application_name`, `options`, `load_balance_hosts`;
// - `schema`, Inlet's own: the schema to create and use (also the `postgresSchema` option).
// Anything else is refused with a message, because a misspelt `target_session_attrs` silently ignored
// would mean writing to a standby after the next failover. Messages never contain the password.

/** Unquoted PostgreSQL identifiers only: the name is written into SQL and into `search_path`. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export const TARGET_SESSION_ATTRS = ['any', 'read-write', 'primary', 'read-only', 'standby', 'prefer-standby'] as const;
export type TargetSessionAttrs = (typeof TARGET_SESSION_ATTRS)[number];

export const SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];

export interface PostgresHost {
  /** Host name, IP address (IPv6 without brackets) or a Unix socket directory (starting with `/`). */
  host: string;
  port: number;
}

export interface PostgresConnectionSettings {
  hosts: PostgresHost[];
  user: string | undefined;
  password: string | undefined;
  database: string | undefined;
  targetSessionAttrs: TargetSessionAttrs;
  sslMode: SslMode;
  sslRootCert: string | undefined;
  sslCert: string | undefined;
  sslKey: string | undefined;
  /** Per host, as libpq's `connect_timeout` (0 or absent: Inlet's default). */
  connectTimeoutMs: number | undefined;
  applicationName: string | undefined;
  /** libpq's `options` (for example `-c search_path=inlet`), sent to the server at start-up. */
  options: string | undefined;
  /** `random`: start at a random host (libpq 16's `load_balance_hosts`). */
  loadBalanceHosts: 'disable' | 'random';
  /** Inlet's `?schema=`. */
  schema: string | undefined;
}

/** A malformed INLET_DATABASE_URL; the message says what and how to write it. */
export class DatabaseUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatabaseUrlError';
  }
}

const KNOWN_PARAMETERS = new Set([
  'host',
  'port',
  'dbname',
  'user',
  'password',
  'target_session_attrs',
  'sslmode',
  'sslrootcert',
  'sslcert',
  'sslkey',
  'connect_timeout',
  'application_name',
  'fallback_application_name',
  'options',
  'load_balance_hosts',
  'schema',
]);

function decode(value: string, what: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new DatabaseUrlError(`${what} has an invalid %-escape`);
  }
}

function parsePort(raw: string, where: string): number {
  if (!/^\d{1,5}$/.test(raw) || Number(raw) < 1 || Number(raw) > 65535) {
    throw new DatabaseUrlError(`port "${raw}" of ${where} is not a number from 1 to 65535`);
  }
  return Number(raw);
}

/** `h1:p1,[::1]:p2,h3` → hosts and ports (undefined where missing). */
function splitHostList(list: string): Array<{ host: string; port: string | undefined }> {
  const entries: Array<{ host: string; port: string | undefined }> = [];
  let rest = list;
  for (;;) {
    let host: string;
    let after: string;
    if (rest.startsWith('[')) {
      const close = rest.indexOf(']');
      if (close < 0) throw new DatabaseUrlError(`an IPv6 host is missing its "]" (write IPv6 hosts as [::1]:5432)`);
      host = rest.slice(1, close);
      if (!/^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(host)) throw new DatabaseUrlError(`"[${host}]" is not an IPv6 address`);
      after = rest.slice(close + 1);
      if (after !== '' && !after.startsWith(':') && !after.startsWith(',')) {
        throw new DatabaseUrlError(`unexpected "${after[0]}" after the IPv6 host [${host}]`);
      }
    } else {
      const end = rest.search(/[:,]/);
      host = end < 0 ? rest : rest.slice(0, end);
      after = end < 0 ? '' : rest.slice(end);
      host = decode(host, `host "${host}"`);
      if (host.includes(']') || host.includes('[')) throw new DatabaseUrlError(`host "${host}" has a stray bracket`);
    }
    let port: string | undefined;
    if (after.startsWith(':')) {
      const end = after.indexOf(',');
      port = end < 0 ? after.slice(1) : after.slice(1, end);
      after = end < 0 ? '' : after.slice(end);
      if (port === '') port = undefined;
    }
    entries.push({ host, port });
    if (after === '') return entries;
    rest = after.slice(1); // after the comma
  }
}

export function parsePostgresUrl(url: string): PostgresConnectionSettings {
  const scheme = /^(postgres|postgresql):\/\//.exec(url);
  if (scheme === null) throw new DatabaseUrlError('a PostgreSQL URL starts with postgres:// or postgresql://');
  let rest = url.slice(scheme[0].length);
  const hashAt = rest.indexOf('#');
  if (hashAt >= 0)
    throw new DatabaseUrlError('a PostgreSQL URL has no "#fragment" (percent-encode "#" in a password as %23)');
  const queryAt = rest.indexOf('?');
  const query = queryAt < 0 ? '' : rest.slice(queryAt + 1);
  if (queryAt >= 0) rest = rest.slice(0, queryAt);

  // libpq: the user part ends at the first "@" before any "/"; a literal "@" in a password is %40.
  let user: string | undefined;
  let password: string | undefined;
  const slashAt = rest.indexOf('/');
  const atAt = rest.indexOf('@');
  if (atAt >= 0 && (slashAt < 0 || atAt < slashAt)) {
    const userInfo = rest.slice(0, atAt);
    rest = rest.slice(atAt + 1);
    const colon = userInfo.indexOf(':');
    user = decode(colon < 0 ? userInfo : userInfo.slice(0, colon), 'the user name');
    if (colon >= 0) password = decode(userInfo.slice(colon + 1), 'the password');
    if (user === '') user = undefined;
  }
  const pathAt = rest.indexOf('/');
  const hostPart = pathAt < 0 ? rest : rest.slice(0, pathAt);
  let database = pathAt < 0 ? undefined : decode(rest.slice(pathAt + 1), 'the database name');
  if (database !== undefined && database.includes('/'))
    throw new DatabaseUrlError(`database name "${database}" contains "/"`);
  if (database === '') database = undefined;

  const params = new Map<string, string>();
  if (query !== '') {
    for (const pair of query.split('&')) {
      if (pair === '') continue;
      const eq = pair.indexOf('=');
      if (eq < 0) throw new DatabaseUrlError(`parameter "${decode(pair, 'a parameter')}" has no "=value"`);
      const key = decode(pair.slice(0, eq), 'a parameter name');
      const value = decode(pair.slice(eq + 1).replace(/\+/g, ' '), `parameter ${key}`);
      if (!KNOWN_PARAMETERS.has(key)) {
        const hint = key === 'ssl' ? ' (use sslmode=require or verify-full)' : '';
        throw new DatabaseUrlError(
          `unknown parameter "${key}"${hint}; known: ${[...KNOWN_PARAMETERS].sort().join(', ')}`,
        );
      }
      if (params.has(key)) throw new DatabaseUrlError(`parameter "${key}" is given more than once`);
      params.set(key, value);
    }
  }

  // Hosts: before the slash, or `?host=` (which replaces them, as libpq's later setting wins).
  const hostSource = params.get('host') ?? hostPart;
  const listed = hostSource === '' ? [{ host: 'localhost', port: undefined }] : splitHostList(hostSource);
  for (const entry of listed) if (entry.host === '') entry.host = 'localhost';
  const portParam = params.get('port');
  if (portParam !== undefined) {
    const ports = portParam.split(',');
    if (ports.length !== 1 && ports.length !== listed.length) {
      throw new DatabaseUrlError(
        `?port= lists ${ports.length} ports for ${listed.length} hosts (give one port, or one per host)`,
      );
    }
    listed.forEach((entry, i) => (entry.port = ports.length === 1 ? ports[0] : ports[i]));
  }
  const hosts = listed.map(({ host, port }) => ({
    host,
    port: port === undefined || port === '' ? 5432 : parsePort(port, `host ${host}`),
  }));

  const targetSessionAttrs = (params.get('target_session_attrs') ?? 'any') as TargetSessionAttrs;
  if (!TARGET_SESSION_ATTRS.includes(targetSessionAttrs)) {
    throw new DatabaseUrlError(
      `target_session_attrs "${targetSessionAttrs}" is not one of ${TARGET_SESSION_ATTRS.join(', ')}`,
    );
  }
  const sslMode = (params.get('sslmode') ?? 'prefer') as SslMode;
  if (!SSL_MODES.includes(sslMode))
    throw new DatabaseUrlError(`sslmode "${sslMode}" is not one of ${SSL_MODES.join(', ')}`);
  const loadBalanceHosts = params.get('load_balance_hosts') ?? 'disable';
  if (loadBalanceHosts !== 'disable' && loadBalanceHosts !== 'random') {
    throw new DatabaseUrlError(`load_balance_hosts "${loadBalanceHosts}" is not one of disable, random`);
  }
  let connectTimeoutMs: number | undefined;
  const connectTimeout = params.get('connect_timeout');
  if (connectTimeout !== undefined) {
    if (!/^\d{1,6}$/.test(connectTimeout))
      throw new DatabaseUrlError(`connect_timeout "${connectTimeout}" is not a whole number of seconds`);
    // libpq: 0 means wait forever, and values below 2 are taken as 2.
    const seconds = Number(connectTimeout);
    connectTimeoutMs = seconds === 0 ? undefined : Math.max(2, seconds) * 1000;
  }
  const schema = params.get('schema');
  if (schema !== undefined && !SCHEMA_NAME.test(schema)) {
    throw new DatabaseUrlError(
      `invalid PostgreSQL schema name "${schema}" (lower-case letters, digits and _; not starting with a digit)`,
    );
  }
  return {
    hosts,
    user: params.get('user') ?? user,
    password: params.get('password') ?? password,
    database: params.get('dbname') ?? database,
    targetSessionAttrs,
    sslMode,
    sslRootCert: params.get('sslrootcert'),
    sslCert: params.get('sslcert'),
    sslKey: params.get('sslkey'),
    connectTimeoutMs,
    applicationName: params.get('application_name') ?? params.get('fallback_application_name'),
    options: params.get('options'),
    loadBalanceHosts,
    schema,
  };
}

/** The URL's settings with the schema resolved between `?schema=` and the `postgresSchema` option. */
export function postgresSettings(url: string, schemaOption?: string): PostgresConnectionSettings {
  const settings = parsePostgresUrl(url);
  if (settings.schema !== undefined && schemaOption !== undefined && settings.schema !== schemaOption) {
    throw new DatabaseUrlError(
      `two PostgreSQL schemas requested: "${settings.schema}" in the URL and "${schemaOption}"`,
    );
  }
  const schema = schemaOption ?? settings.schema;
  if (schema !== undefined && !SCHEMA_NAME.test(schema)) {
    throw new DatabaseUrlError(
      `invalid PostgreSQL schema name "${schema}" (lower-case letters, digits and _; not starting with a digit)`,
    );
  }
  return { ...settings, schema };
}

/** Inlet writes: a URL that asks for a read-only or standby session cannot work. */
export function checkWritableTarget(settings: PostgresConnectionSettings): void {
  if (['read-only', 'standby', 'prefer-standby'].includes(settings.targetSessionAttrs)) {
    throw new DatabaseUrlError(
      `target_session_attrs=${settings.targetSessionAttrs} selects a read-only session, but Inlet writes; use read-write (or primary), or any for one host`,
    );
  }
}

/** The hosts of the URL, for logs and messages (no password). */
export function describeHosts(settings: PostgresConnectionSettings): string {
  return settings.hosts.map(({ host, port }) => `${host.includes(':') ? `[${host}]` : host}:${port}`).join(',');
}
