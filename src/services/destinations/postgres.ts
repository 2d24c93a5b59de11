// The PostgreSQL warehouse type (warehouses.md §1): its admin fields (`url`, a credential never echoed, and
// `schema`), the check at creation (the outbound guard, then a connection that creates the schema and its fixed
// tables: a URL that cannot connect or lacks the rights is refused with the server's message), and the driver,
// which loads each batch in one transaction (warehouse/load.ts). Connections go to the address the guard
// checked, never to a name resolved again by the driver: one TCP host, no unix sockets, no multi-host URLs.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { validationError, type FieldError } from '../../domain/errors.js';
import { messageIdOfEvent } from '../../domain/destinations.js';
import type { DestinationCredentials, DestinationRecord, StoredMessage } from '../../storage/types.js';
import type { OutboundGuard } from '../outbound-guard.js';
import {
  refusedAs,
  type DestinationDriver,
  type DestinationKind,
  type DriverOptions,
  type SendOutcome,
} from './kind.js';
import { failedSend } from './kind.js';
import { ensureSchema } from './warehouse/layout.js';
import { loadBatch } from './warehouse/load.js';
import { MAX_NAME, safeName } from './warehouse/names.js';

const SCHEMA = /^[a-z_][a-z0-9_]*$/;
/** Query parameters that would point the connection elsewhere than the URL's one host. */
const REDIRECTING = ['host', 'hostaddr', 'port', 'service', 'target_session_attrs'];

interface Target {
  host: string;
  port: number;
  user: string;
  password: string | undefined;
  database: string;
  ssl: false | { rejectUnauthorized: boolean };
}

/** The URL's one host and its connection settings; a message for the field when the URL is not one we take. */
export function warehouseTarget(url: string): Target | string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'must be a URL such as postgres://user:password@host:5432/database';
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')
    return 'must be a postgres:// or postgresql:// URL';
  // The hosts part, after any user and password (a password may hold a comma).
  const authority = url.slice(parsed.protocol.length + 2).split(/[/?#]/)[0]!;
  if (parsed.hostname === '' || authority.slice(authority.lastIndexOf('@') + 1).includes(','))
    return 'must name one host (multi-host and unix-socket URLs are refused)';
  for (const key of parsed.searchParams.keys())
    if (REDIRECTING.includes(key)) return `must not set "${key}" (one host, named in the URL)`;
  const sslmode = parsed.searchParams.get('sslmode') ?? 'prefer';
  if (!['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full', 'no-verify'].includes(sslmode))
    return `has an unknown sslmode "${sslmode}"`;
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, ''),
    port: parsed.port === '' ? 5432 : Number(parsed.port),
    user: decodeURIComponent(parsed.username) || 'postgres',
    password: parsed.password === '' ? undefined : decodeURIComponent(parsed.password),
    database: database === '' ? decodeURIComponent(parsed.username) || 'postgres' : database,
    ssl: ['require', 'verify-ca', 'verify-full', 'no-verify'].includes(sslmode)
      ? { rejectUnauthorized: sslmode === 'verify-ca' || sslmode === 'verify-full' }
      : false,
  };
}

/** Pool settings for `target`, connecting to the address the guard checked (TLS still names the host). */
async function poolConfig(target: Target, guard: OutboundGuard, timeoutMs: number): Promise<pg.PoolConfig> {
  const [address] = await guard.checkHost(target.host);
  return {
    host: address!.address,
    port: target.port,
    user: target.user,
    ...(target.password === undefined ? {} : { password: target.password }),
    database: target.database,
    ssl: target.ssl === false ? false : { ...target.ssl, servername: target.host },
    connectionTimeoutMillis: timeoutMs,
    statement_timeout: Math.max(timeoutMs, 60_000),
    application_name: 'inlet-warehouse',
    max: 1,
    idleTimeoutMillis: 60_000,
  };
}

function messageIdOf(message: StoredMessage): string {
  return message.kind === 'event' ? messageIdOfEvent(message.event.id) : message.id;
}

/** One pool per destination (one connection: a destination's loads are sequential), made again when its URL changes. */
function postgresDriver(options: DriverOptions): DestinationDriver {
  const pools = new Map<string, { url: string; pool: pg.Pool; ready: boolean }>();
  /**
   * Destinations whose last load replaced rows loaded before (a replay, a re-delivery after a crash or a
   * takeover): their next load deletes its ids first rather than fail and load again; one that then replaces
   * nothing goes back to plain inserts (loadBatch).
   */
  const replacing = new Set<string>();
  const limits = { maxTables: options.warehouse.maxTables, maxColumns: options.warehouse.maxColumns };

  async function poolFor(d: DestinationRecord) {
    const url = d.credentials?.url ?? '';
    const existing = pools.get(d.id);
    if (existing !== undefined && existing.url === url) return existing;
    if (existing !== undefined) await closeOne(d.id);
    const target = warehouseTarget(url);
    if (typeof target === 'string') throw new Error(`the warehouse URL ${target}`);
    const pool = new pg.Pool(await poolConfig(target, options.guard, options.timeoutMs));
    pool.on('error', () => {}); // an idle connection lost: the next load connects again
    // One lost while checked out (the warehouse restarted, or ended the backend, during a load) fails that load's
    // query, then emits 'error' on its client, where pg-pool listens only while the client is idle: without a
    // listener of its own that is an uncaught exception. The load fails and the client is dropped on release.
    pool.on('connect', (client) => client.on('error', () => {}));
    const created = { url, pool, ready: false };
    pools.set(d.id, created);
    return created;
  }

  async function closeOne(id: string): Promise<void> {
    const existing = pools.get(id);
    pools.delete(id);
    replacing.delete(id);
    await existing?.pool.end().catch(() => {});
  }

  return {
    batchSize: (d) => d.batch.maxMessages,
    async deliver(d, messages, context) {
      const started = performance.now();
      let outcome: SendOutcome = { ok: true, status: null, error: null };
      try {
        const link = await poolFor(d);
        const client = await link.pool.connect();
        let broken: Error | undefined;
        try {
          if (!link.ready) {
            await ensureSchema(client, d.config.schema!);
            link.ready = true;
          }
          const mode = replacing.has(d.id) ? 'replace' : 'insert';
          const { rows, columnsAdded, widenings, warnings, ...how } = await loadBatch({
            client,
            schema: d.config.schema!,
            destinationId: d.id,
            messages,
            messageId: messageIdOf,
            limits,
            holds: context.holds,
            mode,
          });
          if (how.replaced > 0) replacing.add(d.id);
          else replacing.delete(d.id);
          const seconds = (performance.now() - started) / 1000;
          await options.warehouse.loaded(d.id, { rows, columnsAdded, widenings, warnings, seconds });
        } catch (error) {
          broken = error as Error;
          throw error;
        } finally {
          // A connection whose load failed is not reused (it may be mid-COPY or in a broken transaction).
          client.release(broken);
        }
      } catch (error) {
        outcome = failedSend('PostgreSQL: ', error);
      }
      // The delivery log names a load by its first and last message.
      const ends = messages.length === 1 ? [messages[0]!] : [messages[0]!, messages[messages.length - 1]!];
      context.sent(ends.map(context.format), outcome, performance.now() - started);
      return outcome.ok ? { accepted: messages.length } : { accepted: 0, failure: outcome };
    },
    async prune(present, held) {
      for (const id of [...pools.keys()]) if (!present.has(id) || !held.has(id)) await closeOne(id);
    },
    forget: closeOne,
    async close() {
      await Promise.all([...pools.keys()].map(closeOne));
    },
  };
}

/** Whether `value` is a warehouse URL we take; the reason goes to `errors` when not. */
function parseUrl(value: unknown, errors: FieldError[]): boolean {
  if (typeof value !== 'string' || value.length > 2000) {
    errors.push({ pointer: '/url', message: 'must be a postgres:// URL of at most 2000 characters' });
    return false;
  }
  const target = warehouseTarget(value);
  if (typeof target === 'string') errors.push({ pointer: '/url', message: target });
  return typeof target !== 'string';
}

function parseSchema(value: unknown, productId: string, errors: FieldError[]): string {
  if (value === undefined) return safeName(`inlet_${productId.toLowerCase()}`);
  if (
    typeof value !== 'string' ||
    !SCHEMA.test(value) ||
    value.length > MAX_NAME ||
    value.startsWith('pg_') ||
    safeName(value) !== value
  ) {
    errors.push({
      pointer: '/schema',
      message: 'must match ^[a-z_][a-z0-9_]*$, be at most 63 characters, not a reserved word and not start with pg_',
    });
  }
  return String(value);
}

/** Connects as the driver would and creates the schema: refused (400 on /url) with the connection's or server's error. */
async function checkWarehouse(
  schema: string,
  credentials: DestinationCredentials | null,
  guard: OutboundGuard,
  timeoutMs: number,
): Promise<void> {
  const target = warehouseTarget(credentials?.url ?? '');
  if (typeof target === 'string') throw validationError([{ pointer: '/url', message: target }]);
  const config = await (async () => {
    let made: pg.PoolConfig | undefined;
    await refusedAs('/url', async () => (made = await poolConfig(target, guard, timeoutMs)));
    return made!;
  })();
  const client = new pg.Client(config);
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (error) {
    throw validationError([{ pointer: '/url', message: `cannot connect: ${(error as Error).message}` }]);
  }
  try {
    await ensureSchema(client as unknown as pg.PoolClient, schema);
  } catch (error) {
    throw validationError([
      { pointer: '/url', message: `the warehouse refused to create schema "${schema}": ${(error as Error).message}` },
    ]);
  } finally {
    await client.end().catch(() => {});
  }
}

export const postgresKind: DestinationKind = {
  label: 'PostgreSQL warehouse',
  fields: ['url', 'schema'],
  editable: ['url'],
  batch: { defaultMessages: 1000, maxMessages: 10_000, defaultWaitMs: 5000, maxWaitMs: 60_000 },
  defaultStart: 'beginning',
  parse(input, errors, { productId }) {
    parseUrl(input.url, errors);
    const schema = parseSchema(input.schema, productId, errors);
    return { config: { schema }, credentials: { url: String(input.url) } };
  },
  edit: () => undefined,
  // A new URL is checked (and connected to, the schema created) like one at creation; loading goes on from the
  // cursor into the new warehouse, and nothing already loaded moves.
  editCredentials(input, errors) {
    if (input.url === undefined) return undefined;
    return parseUrl(input.url, errors) ? { url: input.url as string } : undefined;
  },
  check: (config, { guard, credentials, timeoutMs }) => checkWarehouse(config.schema!, credentials, guard, timeoutMs),
  driver: postgresDriver,
};
