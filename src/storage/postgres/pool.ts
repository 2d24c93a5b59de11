// A pg pool that connects the way libpq does with several hosts and `target_session_attrs`, and that
// follows the primary through a failover or switchover without a restart.
//
// node-postgres takes one host. Measured alternatives (shared/recipes/pg-failover.md): postgres.js
// takes several hosts but its `read-write` check can land on a standby; so this wraps `pg` itself:
// - each pooled connection is a `pg.Client` built for one candidate (host, TLS or not) that the
//   shared `HostRing` hands out: the host that last worked first, then the others in URL order;
// - after connecting, the session is checked against `target_session_attrs` (one query, skipped for
//   `any`); a refused session or a failed connect moves the ring on, and `connect()` tries the next
//   host at once, so one request sees an error only when every host failed;
// - a connection whose server went away or became read-only (SQLSTATE 25006, 57P01/02/03, 08xxx,
//   a reset) is destroyed when released instead of going back to the pool.
// One host is the same path with a ring of one.
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import pg from 'pg';
import { isConnectionLost } from './errors.js';
import type { PostgresConnectionSettings, PostgresHost, TargetSessionAttrs } from './connection-url.js';

/** Per host, when the URL gives no `connect_timeout`: a blackholed host must not hold a request long. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

/**
 * Longest wait for a pooled connection (all busy, or every host being tried): past it the query fails
 * with "timeout exceeded when trying to connect" → 503, instead of a request waiting without bound while
 * the database is wedged (say, commits waiting for a synchronous standby that died).
 */
export const ACQUIRE_TIMEOUT_MS = 10_000;

interface Candidate {
  index: number;
  host: PostgresHost;
  /** TLS options, or false for plain TCP. */
  ssl: ConnectionOptions | false;
}

/** Why a session was refused for `target_session_attrs`: the pool tries the next host. */
export class WrongServerError extends Error {
  readonly code = '08000';
  constructor(host: PostgresHost, wanted: TargetSessionAttrs, found: string) {
    super(`${host.host}:${host.port} is ${found}, not ${wanted}`);
    this.name = 'WrongServerError';
  }
}

/** The hosts of a URL and which one to try next; shared by every connection of a pool. */
export class HostRing {
  private current: number;
  /** Hosts that answered "no TLS" under sslmode=prefer (plain from then on), or refused plain under allow. */
  private readonly fallback = new Set<number>();
  private readonly tls: ConnectionOptions | undefined;

  constructor(readonly settings: PostgresConnectionSettings) {
    this.current = settings.loadBalanceHosts === 'random' ? Math.floor(Math.random() * settings.hosts.length) : 0;
    this.tls = tlsOptions(settings);
  }

  get size(): number {
    return this.settings.hosts.length;
  }

  /** The host last known good (or next to try). */
  get currentHost(): PostgresHost {
    return this.settings.hosts[this.current]!;
  }

  candidate(): Candidate {
    const index = this.current;
    const host = this.settings.hosts[index]!;
    const fellBack = this.fallback.has(index);
    // allow: plain unless this host refused plain; prefer: TLS unless this host said it has none.
    const mode = this.settings.sslMode;
    const useTls =
      !host.host.startsWith('/') &&
      mode !== 'disable' &&
      (mode === 'allow' ? fellBack : mode === 'prefer' ? !fellBack : true);
    return { index, host, ssl: useTls ? (this.tls ?? {}) : false };
  }

  /** A connect to `index` failed with `error`: returns true when the same host should be tried again (TLS fallback). */
  failed(index: number, error: unknown): boolean {
    const mode = this.settings.sslMode;
    const message = (error as Error)?.message ?? '';
    // Retried over the other transport even when the fallback is already recorded: connections opened at the
    // same time all tried the first transport, and each of them gets this answer (the next candidate uses the
    // other transport, which cannot answer the same, so this cannot loop).
    if (mode === 'prefer' && /does not support SSL/.test(message)) {
      this.fallback.add(index);
      return true;
    }
    // allow: a server that insists on TLS refuses a plain start-up with 28000 "no encryption".
    if (mode === 'allow' && (error as { code?: string })?.code === '28000' && /no encryption|SSL off/.test(message)) {
      this.fallback.add(index);
      return true;
    }
    if (this.current === index) this.current = (index + 1) % this.settings.hosts.length;
    return false;
  }

  /** When each host last stopped answering a query (a read timeout): its connections made before are stale. */
  private readonly silentSince = new Map<number, number>();

  /**
   * A query on a connection to `index` got no answer within its deadline: the host vanished without
   * closing its sockets. New connections go to the next host, and every pooled connection to it made
   * before now is dropped when next checked out (`isStale`), instead of each costing a request its deadline.
   */
  wentSilent(index: number): void {
    this.silentSince.set(index, Date.now());
    if (this.current === index) this.current = (index + 1) % this.settings.hosts.length;
  }

  isStale(index: number, createdAt: number): boolean {
    const since = this.silentSince.get(index);
    return since !== undefined && createdAt <= since;
  }
}

function tlsOptions(settings: PostgresConnectionSettings): ConnectionOptions | undefined {
  const mode = settings.sslMode;
  if (mode === 'disable') return undefined;
  const read = (path: string | undefined) => (path === undefined ? undefined : readFileSync(path));
  const files: ConnectionOptions = {};
  const ca = settings.sslRootCert === 'system' ? undefined : read(settings.sslRootCert);
  if (ca !== undefined) files.ca = ca;
  const cert = read(settings.sslCert);
  if (cert !== undefined) files.cert = cert;
  const key = read(settings.sslKey);
  if (key !== undefined) files.key = key;
  // libpq: require verifies nothing unless a root certificate is given (then it acts as verify-ca);
  // verify-ca checks the chain but not the name; verify-full checks both. prefer/allow verify nothing.
  if (mode === 'verify-full') return { ...files, rejectUnauthorized: true };
  if (mode === 'verify-ca' || (mode === 'require' && settings.sslRootCert !== undefined)) {
    return { ...files, rejectUnauthorized: true, checkServerIdentity: () => undefined };
  }
  return { ...files, rejectUnauthorized: false };
}

/** The session check libpq does for `target_session_attrs`; undefined when the session is acceptable. */
async function sessionMismatch(client: pg.Client, wanted: TargetSessionAttrs): Promise<string | undefined> {
  if (wanted === 'any' || wanted === 'prefer-standby') return undefined;
  const result = await client.query<{ recovery: boolean; read_only: string }>(
    "SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS read_only",
  );
  const row = result.rows[0]!;
  const readOnly = row.read_only === 'on';
  switch (wanted) {
    case 'read-write':
      return readOnly || row.recovery ? (row.recovery ? 'a standby' : 'read-only') : undefined;
    case 'primary':
      return row.recovery ? 'a standby' : undefined;
    case 'read-only':
      return readOnly || row.recovery ? undefined : 'read-write';
    case 'standby':
      return row.recovery ? undefined : 'a primary';
  }
}

type Tagged = { inletHostIndex?: number };

/**
 * A statement whose text starts with this comment runs as a named prepared statement, `inlet_<name>`: parsed and
 * planned once per connection, then only bound and executed. Kysely sends every query unnamed, which PostgreSQL
 * parses, analyses and plans again each time. For the ingest writer's statement (a data-modifying CTE over
 * unnest() into a partitioned table) that was 9.5 of 56 µs of PostgreSQL's CPU per event in groups of 20 events,
 * as single events commit (bench/runs/2026-11-postgresql.md, "PostgreSQL at 10 M events: prepared inserts, …"). Only a text that
 * is the same at every call may carry the mark, and each mark's name belongs to one text: node-postgres refuses a
 * name already prepared on the connection for another text ("Prepared statements must be unique").
 */
export const PREPARED_MARK = /^\/\* inlet:prepare ([a-z_]+) \*\//;

export interface FailoverPoolOptions {
  max: number;
  types?: pg.ClientConfig['types'];
  /** Extra `options` for every session (`-c search_path=…`), added to the URL's. */
  options?: string;
  /**
   * Client-side deadline per query, read at each query (so start-up can run migrations without one and
   * turn it on afterwards); 0 or undefined: none. A query past it fails with "Query read timeout" (→ 503)
   * and its connection is destroyed: a server that vanished without closing the socket (a host gone, a
   * network partition) would otherwise hold the query until TCP keepalive gives up, minutes later.
   */
  queryTimeoutMs?: () => number | undefined;
}

/** The parameters of one session to the ring's candidate host. */
function clientConfig(
  settings: PostgresConnectionSettings,
  candidate: Candidate,
  sessionOptions: string,
  types: FailoverPoolOptions['types'],
): pg.ClientConfig {
  return {
    host: candidate.host.host,
    port: candidate.host.port,
    ...(settings.user === undefined ? {} : { user: settings.user }),
    ...(settings.password === undefined ? {} : { password: settings.password }),
    ...(settings.database === undefined ? {} : { database: settings.database }),
    ...(settings.applicationName === undefined ? {} : { application_name: settings.applicationName }),
    ...(sessionOptions === '' ? {} : { options: sessionOptions }),
    ...(types === undefined ? {} : { types }),
    ssl: candidate.ssl,
    connectionTimeoutMillis: settings.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    keepAlive: true,
    // Notice a server that vanished without closing the socket (a host gone, not a process killed).
    keepAliveInitialDelayMillis: 10_000,
  };
}

/**
 * A pg.Pool over a HostRing. `connect()` (what Kysely calls) tries each host at most once (twice with
 * a TLS fallback) before failing, so during a failover a request fails fast with a connection error
 * and the first request after it lands on the new primary.
 */
export function createFailoverPool(
  settings: PostgresConnectionSettings,
  poolOptions: FailoverPoolOptions,
): { pool: pg.Pool; ring: HostRing } {
  const ring = new HostRing(settings);
  const sessionOptions = [settings.options, poolOptions.options].filter((o) => o !== undefined && o !== '').join(' ');

  class RingClient extends pg.Client {
    inletHostIndex: number;
    inletDiscard = false;
    readonly inletCreatedAt = Date.now();

    constructor() {
      const candidate = ring.candidate();
      super(clientConfig(settings, candidate, sessionOptions, poolOptions.types));
      this.inletHostIndex = candidate.index;
      // A connection that dies while checked out but between queries (inside a transaction, say) emits
      // 'error' on the client, and pg-pool listens only while the client is idle: without this listener
      // that would be an uncaught exception. The next query on it fails ("not queryable") → 503, and the
      // pool drops it on release.
      this.on('error', () => {
        this.inletDiscard = true;
      });
    }

    // @ts-expect-error pg's overloads; pg-pool calls connect(callback), others connect().
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- pg's overloaded signatures (promise or callback)
    override connect(callback?: (err: Error | undefined) => void): any {
      const tag = (error: unknown) => {
        if (error !== null && typeof error === 'object') (error as Tagged).inletHostIndex = this.inletHostIndex;
        return error;
      };
      const checked = super.connect().then(
        async () => {
          try {
            const mismatch = await sessionMismatch(this as unknown as pg.Client, settings.targetSessionAttrs);
            if (mismatch !== undefined)
              throw new WrongServerError(
                ring.settings.hosts[this.inletHostIndex]!,
                settings.targetSessionAttrs,
                mismatch,
              );
          } catch (error) {
            await this.end().catch(() => {});
            throw tag(error);
          }
        },
        (error: unknown) => {
          throw tag(error);
        },
      );
      if (callback === undefined) return checked;
      checked.then(
        () => callback(undefined),
        (error: Error) => callback(error),
      );
      return undefined;
    }

    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- pg's overloaded signatures (promise or callback)
    override query(...args: any[]): any {
      // pg reads its query_timeout from the connection parameters at every query.
      (this as unknown as { connectionParameters: { query_timeout?: number } }).connectionParameters.query_timeout =
        poolOptions.queryTimeoutMs?.() || undefined;
      if (typeof args[0] === 'string' && Array.isArray(args[1])) {
        const mark = PREPARED_MARK.exec(args[0]);
        if (mark !== null) args = [{ name: `inlet_${mark[1]!}`, text: args[0], values: args[1] }, ...args.slice(2)];
      }
      const result = (super.query as (...a: unknown[]) => unknown)(...args);
      // Remember a lost or demoted server so the pool drops this connection when it is released.
      if (result !== undefined && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(undefined, (error: unknown) => {
          if (!isConnectionLost(error)) return;
          this.inletDiscard = true;
          // A query past its deadline was sent and never answered: the socket is stuck behind it, and the
          // host's other connections likely are too.
          if ((error as Error).message === 'Query read timeout') {
            (this as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
            ring.wentSilent(this.inletHostIndex);
          }
        });
      }
      return result;
    }
  }

  class RingPool extends pg.Pool {
    /* eslint-disable @typescript-eslint/no-explicit-any -- pg's overloaded signatures (promise or callback) */
    override connect(
      callback?: (error: Error | undefined, client: pg.PoolClient | undefined, done: (release?: any) => void) => void,
    ): any {
      /* eslint-enable @typescript-eslint/no-explicit-any */
      const connected = this.connectToRing();
      if (callback === undefined) return connected;
      // pool.query() uses the callback form.
      connected.then(
        (client) => callback(undefined, client, (release?: unknown) => client.release(release as Error | undefined)),
        (error: Error) => callback(error, undefined, () => {}),
      );
      return undefined;
    }

    private connectToRing(): Promise<pg.PoolClient> {
      return (async () => {
        let hostsFailed = 0;
        for (;;) {
          try {
            const client = (await super.connect()) as unknown as pg.PoolClient & RingClient;
            if (ring.isStale(client.inletHostIndex, client.inletCreatedAt)) {
              // An idle connection to a host that has since gone silent: drop it and take another.
              client.release(new Error('connection to a host that went silent'));
              continue;
            }
            const release = client.release;
            client.release = (error?: Error | boolean) =>
              release(error ?? (client.inletDiscard ? new Error('server lost or read-only') : undefined));
            return client;
          } catch (error) {
            const index = (error as Tagged | undefined)?.inletHostIndex;
            // Not a connect failure of a host (the pool's own wait timed out, the pool ended): give up.
            if (index === undefined) throw error;
            // The same host once more over the other transport (sslmode prefer/allow), at most once per host.
            if (ring.failed(index, error)) continue;
            if (++hostsFailed >= ring.size) throw error;
          }
        }
      })();
    }
  }

  const pool = new RingPool({
    max: poolOptions.max,
    connectionTimeoutMillis: ACQUIRE_TIMEOUT_MS,
    Client: RingClient as unknown as typeof pg.Client,
  });
  return { pool, ring };
}
