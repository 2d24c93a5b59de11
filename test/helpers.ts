// Test helpers: a real app on a real database of the dialect under test (INLET_TEST_DIALECT),
// isolated per call: a fresh SQLite file, or a PostgreSQL schema of its own (see reusableDatabase).
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { loadConfig, type Config } from '../src/config.js';
import { createServices, type Services } from '../src/services.js';
import { buildApp } from '../src/http/app.js';
import type { Dialect } from '../src/storage/types.js';
import type { Kysely } from 'kysely';
import type { Database, EventsTable } from '../src/storage/database.js';
import { positionSql } from '../src/storage/event-position.js';
import { openStorage, type OpenedStorage, type OpenStorageOptions } from '../src/storage/connect.js';

export const dialect: Dialect = process.env.INLET_TEST_DIALECT === 'postgres' ? 'postgres' : 'sqlite';

/** The value to compare `product_id` of `events` with: SQLite stores the product's number (migration 854). */
export const eventProduct = positionSql(dialect).product;

/** The value to compare `source` or `subject_type` of `events` with: SQLite stores a known one's code (856). */
export const eventCode = positionSql(dialect).code;

/** The product's stored events, their columns as the storage reads them (the product as its text id). */
export function storedEvents(db: Kysely<Database>, productId: string) {
  return db
    .selectFrom('events')
    .select(positionSql(dialect).columns as unknown as Array<keyof EventsTable>)
    .where('product_id', '=', eventProduct(productId));
}
export const postgresUrl = process.env.INLET_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';

export interface TestDatabase {
  databaseUrl: string;
  postgresSchema?: string;
  /** Removes the database (the caller closes what it opened first). */
  drop(): Promise<void>;
  /** Makes the database ready to open, when it is not made at once (reusableDatabase on SQLite). */
  prepare?(): Promise<void>;
}

/**
 * Where SQLite test databases go: INLET_TEST_TMPDIR, which scripts/test.mjs points at a directory in memory
 * for the default tier (its tests check behaviour, not durability), else the system's temp directory.
 */
export const testTempDir = (): string => process.env.INLET_TEST_TMPDIR || tmpdir();

/**
 * test_<creation time, base-36 seconds>_<random>: scripts/test.mjs drops schemas of this form that are hours old
 * (left by a run that was killed), which would otherwise bloat the catalog and slow every test's DDL and queries.
 */
function newSchemaName(): string {
  return `test_${Math.floor(Date.now() / 1000).toString(36)}_${randomBytes(5).toString('hex')}`;
}

/** A fresh, empty database of the dialect under test. */
export function testDatabase(): TestDatabase {
  if (dialect === 'sqlite') {
    const dir = mkdtempSync(join(testTempDir(), 'inlet-test-'));
    return {
      databaseUrl: `sqlite:${join(dir, 'inlet.db')}`,
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const schema = newSchemaName();
  return {
    databaseUrl: postgresUrl,
    postgresSchema: schema,
    async drop() {
      await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// PostgreSQL schemas migrated once per test process. Migrating a fresh schema costs ~250 ms of the
// server's CPU (DDL for 30 tables, their partitions and indexes), and the default tier creates dozens of
// apps per backend. A schema an app was closed on is instead emptied (every row deleted, sequences
// restarted) and handed to the next app of the same process, whose migrations then find nothing to do.
// It is reused only if its catalog (relations, columns, indexes, constraints, functions, triggers,
// migrations) is exactly what a fresh schema's was; anything a test changed makes it dropped instead.
// Tests that need an unmigrated or separately owned schema call testDatabase().
const freeSchemas: string[] = [];
let freshFingerprint: string | undefined;
/** Fresh schemas handed out by reusableDatabase, not yet migrated: the first one migrated sets freshFingerprint. */
const unmigrated = new WeakSet<TestDatabase>();
let teardownRegistered = false;

// One connection of the process for the helpers' own statements (schema drops, fingerprints, emptying),
// rather than a new session for each: a new PostgreSQL session costs the server a fork and cold catalog
// caches, and the default tier's PostgreSQL process made ~540 of them. Its socket is referenced only
// while a statement runs, so an idle helper connection neither keeps the process alive nor counts as an
// open handle for the runner's leak check; it ends with the process ('beforeExit' below).
let helperClient: Promise<pg.Client> | undefined;
let helperActive = 0;

function helperSocket(client: pg.Client): { ref(): void; unref(): void } | undefined {
  return (client as unknown as { connection?: { stream?: { ref(): void; unref(): void } } }).connection?.stream;
}

async function sharedClient(): Promise<pg.Client> {
  registerTeardown();
  helperClient ??= (async () => {
    const client = new pg.Client({ connectionString: postgresUrl });
    // A lost connection is replaced on the next call; a statement running on it fails as usual.
    client.on('error', () => {
      helperClient = undefined;
    });
    client.on('end', () => {
      helperClient = undefined;
    });
    await client.connect();
    return client;
  })().catch((error: unknown) => {
    helperClient = undefined;
    throw error;
  });
  return helperClient;
}

async function withClient<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
  helperActive++;
  let client: pg.Client | undefined;
  try {
    client = await sharedClient();
    helperSocket(client)?.ref();
    return await run(client);
  } finally {
    if (--helperActive === 0 && client !== undefined) helperSocket(client)?.unref();
  }
}

async function catalogFingerprint(client: pg.Client, schema: string): Promise<string> {
  const { rows } = await client.query<{ fp: string }>(
    // Index and constraint definitions name the schema: left out, so that any two schemas compare.
    `SELECT md5(string_agg(replace(x, $1::text || '.', ''), E'\\n' ORDER BY x)) AS fp FROM (
       SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') AS x
         FROM pg_class c WHERE c.relnamespace = $1::text::regnamespace
       UNION ALL SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = $1::text::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
       UNION ALL SELECT 'idx ' || indexdef FROM pg_indexes WHERE schemaname = $1::text
       UNION ALL SELECT 'con ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = $1::text::regnamespace
       UNION ALL SELECT 'fn ' || proname || ' ' || md5(prosrc) FROM pg_proc WHERE pronamespace = $1::text::regnamespace
       UNION ALL SELECT 'trg ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = $1::text::regnamespace AND NOT t.tgisinternal
     ) q`,
    [schema],
  );
  const { rows: versions } = await client.query<{ v: string }>(
    `SELECT string_agg(version::text, ',' ORDER BY version) AS v FROM ${schema}.inlet_migrations`,
  );
  return `${rows[0]?.fp}/${versions[0]?.v}`;
}

/** Deletes every row but the migrations' and restarts the sequences: the schema as migrations left it. */
async function emptySchema(client: pg.Client, schema: string): Promise<void> {
  const { rows: tables } = await client.query<{ name: string }>(
    `SELECT relname AS name FROM pg_class
      WHERE relnamespace = $1::text::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition AND relname <> 'inlet_migrations'`,
    [schema],
  );
  const { rows: sequences } = await client.query<{ name: string }>(
    `SELECT sequencename AS name FROM pg_sequences WHERE schemaname = $1::text`,
    [schema],
  );
  // DELETE rather than TRUNCATE: these tables hold a few rows, and TRUNCATE makes new files for every
  // table and index (~100 ms against ~7 ms). Foreign keys are not checked while the rows go.
  await client.query(
    [
      'BEGIN',
      'SET LOCAL session_replication_role = replica',
      ...tables.map((t) => `DELETE FROM ${schema}."${t.name}"`),
      ...sequences.map((q) => `ALTER SEQUENCE ${schema}."${q.name}" RESTART`),
      'COMMIT',
    ].join(';\n'),
  );
}

async function dropSchema(schema: string): Promise<void> {
  await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
}

/** Pooled schemas still free when the process ends are dropped (the suite's runner or `node --test`). */
function registerTeardown(): void {
  if (teardownRegistered) return;
  teardownRegistered = true;
  process.once('beforeExit', () => {
    const schemas = freeSchemas.splice(0);
    const last = helperClient;
    void (async () => {
      if (schemas.length > 0)
        await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schemas.join(', ')} CASCADE`)).catch(
          () => {},
        );
      await (await last?.catch(() => undefined))?.end();
    })();
  });
}

/**
 * A database for an app that migrates it (createTestServices, createTestApp): on SQLite a fresh file;
 * on PostgreSQL an emptied schema of an earlier app of this process when one is free, else a fresh one.
 */
export function reusableDatabase(on: Dialect = dialect): TestDatabase {
  if (on === 'sqlite') return sqliteFromTemplate();
  registerTeardown();
  const reused = freeSchemas.pop();
  const schema = reused ?? newSchemaName();
  let released = false;
  const database: TestDatabase = {
    databaseUrl: postgresUrl,
    postgresSchema: schema,
    async drop() {
      if (released) return;
      released = true;
      try {
        const clean = await withClient(async (client) => {
          const fingerprint = await catalogFingerprint(client, schema);
          if (fingerprint !== freshFingerprint) return false;
          await emptySchema(client, schema);
          return true;
        });
        if (clean) {
          freeSchemas.push(schema);
          return;
        }
      } catch {
        // Not reusable (gone, locked, half-migrated): dropped below.
      }
      await dropSchema(schema);
    },
  };
  if (reused === undefined) unmigrated.add(database);
  return database;
}

// ---------------------------------------------------------------------------------------------------
// SQLite files start as a copy of one migrated in this process. Migrating a fresh file runs every migration's
// DDL (the default tier's SQLite process did it for each of its apps); copying the migrated file is a few
// hundred kilobytes. The template is made by the same openStorage as every app, closed (so its WAL is
// checkpointed into the file) before anything copies it, and only when a test first asks for a database.
let sqliteTemplate: Promise<string> | undefined;

function migratedSqliteTemplate(): Promise<string> {
  sqliteTemplate ??= (async () => {
    const dir = mkdtempSync(join(testTempDir(), 'inlet-template-'));
    const file = join(dir, 'inlet.db');
    const storage = await openStorage(`sqlite:${file}`);
    await storage.close();
    if (existsSync(`${file}-wal`)) throw new Error('the migrated SQLite template kept a WAL after close');
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return file;
  })();
  return sqliteTemplate;
}

/**
 * A SQLite database for an app: a copy of the migrated template, made when the app first opens it
 * (`prepare`, awaited by createTestServices and openReusableStorage; a caller that opens the URL itself
 * awaits it first).
 */
function sqliteFromTemplate(): TestDatabase {
  const database = testDatabase();
  const file = database.databaseUrl.slice('sqlite:'.length);
  return {
    ...database,
    prepare: async () => {
      if (!existsSync(file)) copyFileSync(await migratedSqliteTemplate(), file);
    },
  };
}

/** Remembers what a freshly migrated schema looks like (once per process): the test for reuse. */
async function noteFreshSchema(database: TestDatabase): Promise<void> {
  if (!unmigrated.has(database)) return;
  unmigrated.delete(database);
  if (freshFingerprint !== undefined || database.postgresSchema === undefined) return;
  freshFingerprint = await withClient((client) => catalogFingerprint(client, database.postgresSchema!));
}

/**
 * A storage opened (and so migrated) on a reusableDatabase(on), for tests of the storage layer without an app;
 * close() closes it and hands the database back.
 */
export async function openReusableStorage(
  options: Omit<OpenStorageOptions, 'postgresSchema'> = {},
  on: Dialect = dialect,
): Promise<{ storage: OpenedStorage; database: TestDatabase; close(): Promise<void> }> {
  const database = reusableDatabase(on);
  await database.prepare?.();
  const storage = await openStorage(database.databaseUrl, {
    ...options,
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
  });
  await noteFreshSchema(database);
  return {
    storage,
    database,
    async close() {
      await storage.close();
      await database.drop();
    },
  };
}

export function testConfig(databaseUrl: string, overrides: Partial<Config> = {}): Config {
  return {
    // The outbound guard's settings come from the test runner (scripts/test.mjs: loopback only).
    ...loadConfig({
      INLET_OUTBOUND_ALLOW: process.env.INLET_OUTBOUND_ALLOW ?? '127.0.0.0/8,::1',
      INLET_OUTBOUND_ALLOW_PRIVATE: process.env.INLET_OUTBOUND_ALLOW_PRIVATE ?? 'true',
    }),
    databaseUrl,
    adminToken: ADMIN_TOKEN,
    logLevel: 'silent',
    rateLimitRps: 0,
    rateLimitBurst: 0,
    ...overrides,
  };
}

/** The services' clock (key expiry, key cache, last_used_at): real time plus an offset a test moves forward. */
export interface TestClock {
  now(): number;
  advance(ms: number): void;
}

/**
 * `frozen`: the clock stands still but for `advance` (time passes only when the test says so). For tests of
 * schedules with short steps (a retry 1 s away with jitter), which a busy machine would otherwise reach
 * by itself between two steps of the test.
 */
export function testClock(frozen = false): TestClock {
  let offset = 0;
  const start = Date.now();
  return {
    now: frozen ? () => start + offset : () => Date.now() + offset,
    advance(ms) {
      offset += ms;
    },
  };
}

export interface TestContext {
  app: FastifyInstance;
  services: Services;
  database: TestDatabase;
  clock: TestClock;
  /** Creates a product and one key of each kind through the admin API. */
  product(name?: string): Promise<{ id: string; eventsKey: string; reportsKey: string }>;
  close(): Promise<void>;
}

export async function createTestServices(
  overrides: Partial<Config> = {},
  database = reusableDatabase(),
  options: { frozenClock?: boolean } = {},
): Promise<{ services: Services; database: TestDatabase; clock: TestClock; close(): Promise<void> }> {
  const clock = testClock(options.frozenClock === true);
  await database.prepare?.();
  const services = await createServices(testConfig(database.databaseUrl, overrides), {
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
    defaultMetrics: false,
    now: clock.now,
  });
  await noteFreshSchema(database);
  return {
    services,
    database,
    clock,
    async close() {
      await services.close();
      await database.drop();
    },
  };
}

export async function createTestApp(
  overrides: Partial<Config> = {},
  options: { frozenClock?: boolean } = {},
): Promise<TestContext> {
  const { services, database, clock, close } = await createTestServices(overrides, reusableDatabase(), options);
  // INLET_TEST_LOG=error (or another level) shows the app's log, e.g. the cause of a 500.
  const app = await buildApp(services, {
    logger: process.env.INLET_TEST_LOG ? { level: process.env.INLET_TEST_LOG } : false,
  });
  await app.ready();
  return {
    app,
    services,
    database,
    clock,
    async product(name = 'Acme') {
      const created = await app.inject({
        method: 'POST',
        url: '/admin/v1/products',
        headers: adminHeaders(),
        payload: { name },
      });
      if (created.statusCode !== 201) throw new Error(`product create failed: ${created.statusCode} ${created.body}`);
      const id = created.json().data.id as string;
      const key = async (kind: 'events' | 'reports') => {
        const res = await app.inject({
          method: 'POST',
          url: `/admin/v1/products/${id}/keys`,
          headers: adminHeaders(),
          payload: { kind },
        });
        if (res.statusCode !== 201) throw new Error(`key create failed: ${res.statusCode} ${res.body}`);
        return res.json().data.key as string;
      };
      return { id, eventsKey: await key('events'), reportsKey: await key('reports') };
    },
    async close() {
      await app.close();
      await close();
    },
  };
}

export function adminHeaders(): Record<string, string> {
  return { authorization: `Bearer ${ADMIN_TOKEN}` };
}

/** The admin API below one product (`/admin/v1/products/{id}` + path), injected into `app`. */
export function productAdmin(app: FastifyInstance, productId: string) {
  return (method: 'GET' | 'PUT' | 'POST' | 'PATCH' | 'DELETE', path: string, payload?: unknown) =>
    app.inject({
      method,
      url: `/admin/v1/products/${productId}${path}`,
      headers: adminHeaders(),
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
}

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}

/** Asserts the RFC 9457 shape and returns the parsed body. */
export function problemOf(response: LightMyRequestResponse): Record<string, unknown> & {
  code: string;
  status: number;
  detail: string;
  errors?: Array<{ pointer: string; message: string }>;
} {
  const type = String(response.headers['content-type'] ?? '');
  if (!type.startsWith('application/problem+json'))
    throw new Error(`expected problem+json, got ${type}: ${response.body}`);
  const body = response.json();
  for (const field of ['type', 'title', 'status', 'detail', 'code', 'request_id']) {
    if (!(field in body)) throw new Error(`problem body lacks "${field}": ${response.body}`);
  }
  if (body.status !== response.statusCode)
    throw new Error(`problem status ${body.status} differs from HTTP ${response.statusCode}`);
  return body;
}

/**
 * A product with one webhook destination to the discard port, made through the services on `database`, which are
 * closed again: for tests that drive the destination's rows through storage opened their own way (leases).
 */
export async function storedWebhookDestination(
  database: TestDatabase,
  name: string,
): Promise<{ productId: string; id: string }> {
  const { services } = await createTestServices({}, database);
  try {
    const product = await services.keys.createProduct(name);
    const created = await services.destinations.create(product.id, {
      type: 'webhook',
      name,
      url: 'http://127.0.0.1:9/hook',
    });
    return { productId: product.id, id: created.destination.id };
  } finally {
    await services.close();
  }
}
