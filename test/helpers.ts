// Test helpers: a real app on a real database of the dialect under test (INLET_TEST_DIALECT),
// isolated per call: a fresh SQLite file, or a fresh PostgreSQL schema dropped afterwards.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { loadConfig, type Config } from '../src/config.js';
import { createServices, type Services } from '../src/services.js';
import { buildApp } from '../src/http/app.js';
import type { Dialect } from '../src/storage/types.js';

export const dialect: Dialect = process.env.INLET_TEST_DIALECT === 'postgres' ? 'postgres' : 'sqlite';
export const postgresUrl = process.env.INLET_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';

export interface TestDatabase {
  databaseUrl: string;
  postgresSchema?: string;
  /** Removes the database (the caller closes what it opened first). */
  drop(): Promise<void>;
}

/** A fresh, empty database of the dialect under test. */
export function testDatabase(): TestDatabase {
  if (dialect === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'inlet-test-'));
    return { databaseUrl: `sqlite:${join(dir, 'inlet.db')}`, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const schema = `test_${randomBytes(6).toString('hex')}`;
  return {
    databaseUrl: postgresUrl,
    postgresSchema: schema,
    async drop() {
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      } finally {
        await client.end();
      }
    },
  };
}

export function testConfig(databaseUrl: string, overrides: Partial<Config> = {}): Config {
  return {
    // The outbound guard's settings come from the test runner (scripts/test.mjs: loopback only).
    ...loadConfig({
      INLET_OUTBOUND_ALLOW: process.env.INLET_OUTBOUND_ALLOW ?? '127.0.0.0/8,::1',
      INLET_DESTINATIONS_ALLOW_PRIVATE: process.env.INLET_DESTINATIONS_ALLOW_PRIVATE ?? 'true',
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
  database = testDatabase(),
  options: { frozenClock?: boolean } = {},
): Promise<{ services: Services; database: TestDatabase; clock: TestClock; close(): Promise<void> }> {
  const clock = testClock(options.frozenClock === true);
  const services = await createServices(testConfig(database.databaseUrl, overrides), {
    ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
    defaultMetrics: false,
    now: clock.now,
  });
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

export async function createTestApp(overrides: Partial<Config> = {}, options: { frozenClock?: boolean } = {}): Promise<TestContext> {
  const { services, database, clock, close } = await createTestServices(overrides, testDatabase(), options);
  // INLET_TEST_LOG=error (or another level) shows the app's log, e.g. the cause of a 500.
  const app = await buildApp(services, { logger: process.env.INLET_TEST_LOG ? { level: process.env.INLET_TEST_LOG } : false });
  await app.ready();
  return {
    app,
    services,
    database,
    clock,
    async product(name = 'Acme') {
      const created = await app.inject({ method: 'POST', url: '/admin/v1/products', headers: adminHeaders(), payload: { name } });
      if (created.statusCode !== 201) throw new Error(`product create failed: ${created.statusCode} ${created.body}`);
      const id = created.json().data.id as string;
      const key = async (kind: 'events' | 'reports') => {
        const res = await app.inject({ method: 'POST', url: `/admin/v1/products/${id}/keys`, headers: adminHeaders(), payload: { kind } });
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

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}

/** Asserts the RFC 9457 shape and returns the parsed body. */
export function problemOf(response: LightMyRequestResponse): Record<string, unknown> & { code: string; status: number; detail: string; errors?: Array<{ pointer: string; message: string }> } {
  const type = String(response.headers['content-type'] ?? '');
  if (!type.startsWith('application/problem+json')) throw new Error(`expected problem+json, got ${type}: ${response.body}`);
  const body = response.json();
  for (const field of ['type', 'title', 'status', 'detail', 'code', 'request_id']) {
    if (!(field in body)) throw new Error(`problem body lacks "${field}": ${response.body}`);
  }
  if (body.status !== response.statusCode) throw new Error(`problem status ${body.status} differs from HTTP ${response.statusCode}`);
  return body;
}
