// Upgrades keep data (issue 36): a database file written by an earlier release (test/fixtures/README.md) opens
// with the current code, whose migrations run at start, and its products, keys, events and users read back
// through the API as that release wrote them; its keys still authenticate and its idempotency keys still
// deduplicate. A SQLite file: the PostgreSQL pass skips it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/http/app.js';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, sql, SqliteDialect, type Expression } from 'kysely';
import { SUBJECT_TYPE_CODES, type Database } from '../src/storage/database.js';
import { eventFromRawRow, RAW_EVENT_COLUMNS, SQLITE_SOURCE_TEXT } from '../src/storage/event-columns.js';
import { positionSql } from '../src/storage/event-position.js';
import { openStorage } from '../src/storage/connect.js';
import { eventRow, fileBefore } from './event-rows.js';
import { inlet } from './support/cli.js';
import { adminHeaders, bearer, createTestServices, dialect, testTempDir } from './helpers.js';

type StoredEvent = Record<string, unknown> & { uuid: string; external_id: string | null };
interface Manifest {
  commit: string;
  products: Array<{ id: string; name: string }>;
  keys: Record<'events' | 'reports' | 'revoked' | 'other', { id: string; key: string }>;
  events: StoredEvent[];
  users: Record<string, Record<string, unknown> & { id: string; event_uuids: string[] }>;
}

const FIXTURES = ['35f7c80', 'ccc5108'];
const skip = dialect === 'sqlite' ? false : 'the fixtures are SQLite files: the SQLite pass runs them';

for (const commit of FIXTURES) {
  const manifest = JSON.parse(
    readFileSync(new URL(`./fixtures/upgrade-${commit}.json`, import.meta.url), 'utf8'),
  ) as Manifest;
  const [product, other] = manifest.products as [Manifest['products'][number], Manifest['products'][number]];

  describe(`a database written by ${commit} opens with this release`, { skip }, () => {
    let app: FastifyInstance;
    let close: () => Promise<void>;
    let applied: number[];
    before(async () => {
      const dir = mkdtempSync(join(testTempDir(), 'inlet-upgrade-'));
      const file = join(dir, 'inlet.db');
      copyFileSync(new URL(`./fixtures/upgrade-${commit}.db`, import.meta.url), file);
      const opened = await createTestServices(
        {},
        { databaseUrl: `sqlite:${file}`, drop: async () => rmSync(dir, { recursive: true, force: true }) },
      );
      applied = opened.services.storage.migration?.applied.map((m) => m.version) ?? [];
      app = await buildApp(opened.services, { logger: false });
      await app.ready();
      close = async () => {
        await app.close();
        await opened.close();
      };
    });
    after(async () => close?.());

    const admin = (url: string) => app.inject({ method: 'GET', url, headers: adminHeaders() });

    it('migrations ran on it', () => {
      assert.ok(applied.length > 0, 'the fixture predates at least one migration');
    });

    it('keeps its products', async () => {
      const res = await admin('/admin/v1/products');
      assert.equal(res.statusCode, 200, res.body);
      const listed = (res.json().data as Array<{ id: string; name: string }>).map(({ id, name }) => ({ id, name }));
      assert.deepEqual(
        listed.sort((a, b) => a.id.localeCompare(b.id)),
        [...manifest.products].sort((a, b) => a.id.localeCompare(b.id)),
      );
    });

    it('keeps its keys: listed as they were, and they still authenticate (a revoked one still does not)', async () => {
      const res = await admin(`/admin/v1/products/${product.id}/keys`);
      assert.equal(res.statusCode, 200, res.body);
      const keys = res.json().data as Array<{ id: string; kind: string; revoked_at: string | null }>;
      const byId = new Map(keys.map((key) => [key.id, key]));
      assert.equal(byId.get(manifest.keys.events.id)?.kind, 'events');
      assert.equal(byId.get(manifest.keys.reports.id)?.kind, 'reports');
      assert.equal(byId.get(manifest.keys.events.id)?.revoked_at, null);
      assert.ok(byId.get(manifest.keys.revoked.id)?.revoked_at, 'the revoked key stays revoked');

      const send = (key: string, externalId: string) =>
        app.inject({
          method: 'POST',
          url: '/api/v2/events',
          headers: bearer(key),
          payload: {
            event_type: 'upgrade',
            action: 'checked',
            subject_type: 'user',
            subject_id: 'user_42',
            external_id: externalId,
          },
        });
      assert.equal((await send(manifest.keys.events.key, `after-upgrade-${commit}`)).statusCode, 201);
      assert.equal((await send(manifest.keys.revoked.key, `revoked-${commit}`)).statusCode, 401);
      const reports = await app.inject({
        method: 'GET',
        url: '/api/v2/traffic_reports?from=2026-11-01&to=2026-11-02',
        headers: bearer(manifest.keys.reports.key),
      });
      assert.notEqual(reports.statusCode, 401, reports.body);
    });

    it('keeps every event as it was stored, and their idempotency keys still deduplicate', async () => {
      for (const stored of manifest.events) {
        const res = await admin(`/admin/v1/products/${product.id}/events/${stored.uuid}`);
        assert.equal(res.statusCode, 200, `${stored.uuid}: ${res.body}`);
        const read = res.json().data as Record<string, unknown>;
        for (const [field, value] of Object.entries(stored))
          assert.deepEqual(read[field], value, `${stored.uuid}.${field}`);
      }
      const replayed = manifest.events.find((event) => event.external_id?.startsWith('fixture-v2-'))!;
      const again = await app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(manifest.keys.events.key),
        payload: {
          event_type: replayed.event_type,
          action: replayed.action,
          subject_type: replayed.subject_type,
          subject_id: replayed.subject_id,
          external_id: replayed.external_id,
        },
      });
      assert.equal(again.statusCode, 200, again.body);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.json().data.uuid, replayed.uuid);
    });

    it('keeps its users: identifiers, traits, aliases, merges and their events', async () => {
      for (const [externalId, before] of Object.entries(manifest.users)) {
        const res = await admin(`/admin/v1/products/${product.id}/users/${externalId}`);
        assert.equal(res.statusCode, 200, res.body);
        const user = res.json().data as Record<string, unknown> & { events: Array<{ uuid: string }> };
        const { event_uuids: uuids, ...fields } = before;
        for (const [field, value] of Object.entries(fields))
          assert.deepEqual(user[field], value, `${externalId}.${field}`);
        const now = new Set(user.events.map((event) => event.uuid));
        assert.deepEqual(
          uuids.filter((uuid) => !now.has(uuid)),
          [],
          `${externalId}'s events`,
        );
      }
    });

    it("keeps products apart: the second product's event is its own", async () => {
      const res = await admin(`/admin/v1/products/${other.id}/events`);
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(
        (res.json().data as Array<{ external_id: string }>).map((event) => event.external_id),
        ['fixture-other-0001'],
      );
    });
  });
}

/**
 * After a rebuild of `events` (migrations 853, 854, 855): its indexes and delete triggers are all there, and deleting
 * the event at `position` (external id `d`) notes its idempotency key as gone.
 */
function assertRebuiltEvents(db: BetterSqlite3.Database, position = 4): void {
  assert.deepEqual(
    db
      .prepare(
        `SELECT name FROM sqlite_master WHERE tbl_name = 'events' AND type IN ('index', 'trigger') ORDER BY name`,
      )
      .pluck()
      .all(),
    ['events_by_id', 'events_by_name', 'events_by_product', 'events_by_time', 'events_key_gone', 'events_subject_gone'],
  );
  db.prepare(`DELETE FROM events WHERE external_id = 'd'`).run();
  assert.deepEqual(db.prepare('SELECT position FROM event_keys_gone WHERE position = ?').pluck().all(position), [
    position,
  ]);
}

describe('inlet migrate on a database of an earlier release', { skip }, () => {
  it('tells each migration on stderr as it runs, a rewrite before it starts; then nothing is left to do', async () => {
    const dir = mkdtempSync(join(testTempDir(), 'inlet-migrate-cli-'));
    try {
      const file = join(dir, 'inlet.db');
      copyFileSync(new URL(`./fixtures/upgrade-${FIXTURES.at(-1)}.db`, import.meta.url), file);
      const env = { INLET_DATABASE_URL: `sqlite:${file}`, INLET_LOG_LEVEL: 'silent' };
      const first = await inlet(env, 'migrate');
      assert.equal(first.code, 0, first.err);
      const lines = first.err.split('\n');
      assert.match(
        lines[0]!,
        /^inlet: upgrading the database schema: \d+ migrations? to apply \((\d+, )*853(, \d+)*\)$/,
      );
      const rewrite = lines.findIndex((line) => line.startsWith('inlet: applying migration 853 ('));
      assert.match(lines[rewrite]!, /: it rewrites every stored event, which takes a while/);
      assert.match(lines[rewrite + 1]!, /^inlet: applied migration 853 in \d+\.\d+ s$/);
      assert.match(first.out, /^applied .*853 \(SQLite: event times/);
      const again = await inlet(env, 'migrate');
      assert.equal(again.err, '');
      assert.match(again.out, /^schema is up to date \(version \d+\)$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A SQLite file migrated to just below `below` (event-rows.ts's fileBefore), in a directory of its own that
 *  `work` may reopen at `path`; the connection is closed (unless `work` closed it) and the directory removed. */
async function withFileBefore(
  below: number,
  work: (file: Awaited<ReturnType<typeof fileBefore>> & { path: string }) => Promise<void>,
) {
  const dir = mkdtempSync(join(testTempDir(), `inlet-m${below}-`));
  try {
    const path = join(dir, 'inlet.db');
    const file = await fileBefore(path, below);
    try {
      await work({ ...file, path });
    } finally {
      if (file.raw.open) await file.db.destroy();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('migration 853: SQLite event times as milliseconds', { skip }, () => {
  it('converts every stored time, keeps positions, the position counter, the indexes and the delete triggers', async () => {
    await withFileBefore(853, async ({ raw, insert, migrateAll }) => {
      for (const externalId of ['a', 'b', 'c']) insert(externalId);
      raw.prepare(`DELETE FROM events WHERE external_id = 'c'`).run();
      // Up to 853 only: the statement stores the product's text id, which 854 replaces by its number.
      await migrateAll(854);
      assert.deepEqual(
        raw
          .prepare('SELECT position, typeof(id) AS i, typeof(occurred_at) AS t, occurred_at, received_at FROM events')
          .all(),
        [1, 2].map((position) => ({
          position,
          i: 'blob',
          t: 'integer',
          occurred_at: Date.parse('2026-01-01T00:00:00.000Z'),
          received_at: Date.parse('2026-01-01T00:00:00.000Z'),
        })),
      );
      insert('d');
      assert.equal(raw.prepare(`SELECT position FROM events WHERE external_id = 'd'`).pluck().get(), 4);
      assertRebuiltEvents(raw);
    });
  });
});

describe('migration 854: SQLite event products and keys as numbers', { skip }, () => {
  it('numbers every product, converts every row, keeps positions, the counter, the indexes and the triggers', async () => {
    await withFileBefore(854, async ({ raw, db, productId, insert, migrateAll, path }) => {
      const other = 'prod_other_0000000000000';
      raw.prepare('INSERT INTO products (id, name, created_at) VALUES (?, ?, ?)').run(other, 'other', '2026-01-01');
      for (const externalId of ['a', 'b', 'c']) insert(externalId);
      raw.prepare(`DELETE FROM events WHERE external_id = 'c'`).run();
      raw
        .prepare(
          `INSERT INTO api_keys (id, product_id, kind, prefix, key_hash, created_at) VALUES ('key_1', ?, 'events', 'p', 'h', '2026-01-01')`,
        )
        .run(productId);
      // One event's key is in api_keys, the other's no longer is: both keep their key.
      raw.prepare(`UPDATE events SET api_key_id = CASE external_id WHEN 'a' THEN 'key_1' ELSE 'key_gone' END`).run();
      await migrateAll();
      assert.deepEqual(raw.prepare('SELECT number, key_id FROM key_numbers ORDER BY number').all(), [
        { number: 1, key_id: 'key_1' },
        { number: 2, key_id: 'key_gone' },
      ]);
      assert.deepEqual(raw.prepare('SELECT api_key_id FROM events ORDER BY position').pluck().all(), [1, 2]);
      assert.deepEqual(raw.prepare('SELECT number, product_id FROM product_numbers ORDER BY number').all(), [
        { number: 1, product_id: productId },
        { number: 2, product_id: other },
      ]);
      assert.deepEqual(
        raw.prepare('SELECT position, typeof(product_id) AS t, product_id FROM events ORDER BY position').all(),
        [1, 2].map((position) => ({ position, t: 'integer', product_id: 1 })),
      );
      // A new product gets the next number, also after the last one's row went.
      raw.prepare(`DELETE FROM product_numbers WHERE number = 2`).run();
      raw.prepare('INSERT INTO products (id, name, created_at) VALUES (?, ?, ?)').run('prod_new', 'new', '2026-01-01');
      assert.equal(raw.prepare(`SELECT number FROM product_numbers WHERE product_id = 'prod_new'`).pluck().get(), 3);
      // The server's writer and reads: the product's text id in, the text id back out.
      await db.destroy();
      const storage = await openStorage(`sqlite:${path}`);
      try {
        const [stored] = await storage.events.insertMany([eventRow(productId, 'd', { apiKeyId: 'key_1' })]);
        assert.equal(stored!.status, 'created');
        assert.equal(stored!.event.productId, productId);
        const [again] = await storage.events.insertMany([eventRow(productId, 'a')]);
        assert.deepEqual(
          [again!.status, again!.event.productId, again!.event.externalId],
          ['duplicate', productId, 'a'],
        );
        const page = await storage.events.page({ productId, filter: {}, limit: 10, order: 'asc' });
        assert.deepEqual(
          page.events.map((e) => [e.productId, e.externalId, e.position, e.apiKeyId]),
          [
            [productId, 'a', '1', 'key_1'],
            [productId, 'b', '2', 'key_gone'],
            [productId, 'd', '4', 'key_1'],
          ],
        );
        const byKey = await storage.events.page({ productId, filter: { keyId: 'key_1' }, limit: 10, order: 'asc' });
        assert.deepEqual(
          byKey.events.map((e) => e.externalId),
          ['a', 'd'],
        );
      } finally {
        await storage.close();
      }
      const reopened = new BetterSqlite3(path);
      try {
        assertRebuiltEvents(reopened);
      } finally {
        reopened.close();
      }
    });
  });
});

describe(
  'migration 855: SQLite external ids that are lowercase uuids as bytes, name formats as numbers',
  { skip },
  () => {
    it('converts exactly those, gives every id and format back as it came, finds duplicates of both forms', async () => {
      await withFileBefore(855, async ({ raw, db, productId, migrateAll, path }) => {
        const lower = '0f8fad5b-d9cb-469f-a165-70867728950e';
        const upper = '7C9E6679-7425-40DE-944B-E07FC1F90AE7';
        const bare = '0f8fad5bd9cb469fa16570867728950e';
        // As the server of 854 stored them: the product as its number, no hashes (a key is then built from the row).
        const insert = raw.prepare(
          `INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties)
         VALUES (randomblob(16), (SELECT number FROM product_numbers WHERE product_id = ?), 'api', ?, 'order', 'placed', 'order_placed', ?, 'user', 'u1', 0, 0, '{}')`,
        );
        const formats = ['preferred', 'legacy', 'v1', 'segment', 'unified'];
        [lower, upper, 'c', null, bare].forEach((externalId, i) => insert.run(productId, externalId, formats[i]));
        raw.prepare(`DELETE FROM events WHERE external_id = 'c'`).run();
        await migrateAll();
        assert.deepEqual(
          raw
            .prepare('SELECT position, typeof(external_id) AS t, name_format AS f FROM events ORDER BY position')
            .all(),
          [
            { position: 1, t: 'blob', f: 0 },
            { position: 2, t: 'text', f: 3 },
            { position: 4, t: 'null', f: 1 },
            { position: 5, t: 'text', f: 2 },
          ],
        );
        assert.equal(
          raw.prepare('SELECT hex(external_id) FROM events WHERE position = 1').pluck().get(),
          bare.toUpperCase(),
        );
        await db.destroy();
        const storage = await openStorage(`sqlite:${path}`);
        const fresh = 'a1b2c3d4-0000-4000-8000-00000000000f';
        try {
          const created = await storage.events.insertMany([eventRow(productId, 'd'), eventRow(productId, fresh)]);
          assert.deepEqual(
            created.map((outcome) => outcome.status),
            ['created', 'created'],
          );
          // Duplicates of converted, unconverted and newly written ids: each answered with its original, as it came.
          const again = await storage.events.insertMany(
            [lower, upper, bare, fresh, 'd', fresh.toUpperCase()].map((id) => eventRow(productId, id)),
          );
          assert.deepEqual(
            again.map((outcome) => [outcome.status, outcome.event.externalId]),
            [
              ['duplicate', lower],
              ['duplicate', upper],
              ['duplicate', bare],
              ['duplicate', fresh],
              ['duplicate', 'd'],
              ['created', fresh.toUpperCase()],
            ],
          );
          const page = await storage.events.page({ productId, filter: {}, limit: 10, order: 'asc' });
          assert.deepEqual(
            page.events.map((e) => [e.position, e.externalId, e.nameFormat]),
            [
              ['1', lower, 'preferred'],
              ['2', upper, 'legacy'],
              ['4', null, 'segment'],
              ['5', bare, 'unified'],
              ['6', 'd', 'preferred'],
              ['7', fresh, 'preferred'],
              ['8', fresh.toUpperCase(), 'preferred'],
            ],
          );
        } finally {
          await storage.close();
        }
        const reopened = new BetterSqlite3(path);
        try {
          assert.deepEqual(
            reopened
              .prepare('SELECT position, typeof(external_id) AS t, name_format AS f FROM events WHERE position >= 6')
              .all(),
            [
              { position: 6, t: 'text', f: 0 },
              { position: 7, t: 'blob', f: 0 },
              { position: 8, t: 'text', f: 0 },
            ],
          );
          assertRebuiltEvents(reopened, 6);
        } finally {
          reopened.close();
        }
      });
    });

    it('numbers every name once across products, keeps a split of its own, reads and filters names exactly', async () => {
      await withFileBefore(855, async ({ raw, db, productId, migrateAll, path }) => {
        const other = 'prod_other';
        raw.prepare('INSERT INTO products (id, name, created_at) VALUES (?, ?, ?)').run(other, 'other', '2026-01-01');
        const insert = raw.prepare(
          `INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties)
         VALUES (randomblob(16), (SELECT number FROM product_numbers WHERE product_id = ?), 'api', NULL, ?, ?, ?, 'preferred', 'user', 'u1', 0, 0, '{}')`,
        );
        const old: Array<[string, string, string, string]> = [
          [productId, 'order', 'placed', 'order_placed'],
          [other, 'user', 'signed_up', 'user_signed_up'],
          // The same name split otherwise (a preferred-format event may): its own type and action stay in the row.
          [productId, 'order_pl', 'aced', 'order_placed'],
          [other, 'order', 'placed', 'order_placed'],
          [productId, 'order', 'shipped', 'order_placed'],
        ];
        for (const row of old) insert.run(...row);
        await migrateAll();
        assert.deepEqual(raw.prepare('SELECT * FROM event_names ORDER BY number').all(), [
          { number: 1, canonical_name: 'order_placed', event_type: 'order', action: 'placed' },
          { number: 2, canonical_name: 'user_signed_up', event_type: 'user', action: 'signed_up' },
        ]);
        assert.deepEqual(
          raw.prepare('SELECT position, event_type AS t, action AS a, canonical_name AS n FROM events').all(),
          [
            { position: 1, t: null, a: null, n: 1 },
            { position: 2, t: null, a: null, n: 2 },
            { position: 3, t: 'order_pl', a: 'aced', n: 1 },
            { position: 4, t: null, a: null, n: 1 },
            { position: 5, t: null, a: 'shipped', n: 1 },
          ],
        );
        await db.destroy();
        const storage = await openStorage(`sqlite:${path}`);
        try {
          const named = (eventType: string, action: string, canonicalName: string) => ({
            eventType,
            action,
            canonicalName,
          });
          await storage.events.insertMany([
            eventRow(productId, null, named('cart', 'viewed', 'cart_viewed')),
            eventRow(other, null, named('order_pl', 'aced', 'order_placed')),
            eventRow(productId, null, named('cart', 'viewed', 'cart_viewed')),
          ]);
          const read = async (id: string, filter: Record<string, unknown>) =>
            (await storage.events.page({ productId: id, filter, limit: 20, order: 'asc' })).events.map((e) => [
              e.position,
              e.eventType,
              e.action,
              e.canonicalName,
            ]);
          assert.deepEqual(await read(productId, {}), [
            ['1', 'order', 'placed', 'order_placed'],
            ['3', 'order_pl', 'aced', 'order_placed'],
            ['5', 'order', 'shipped', 'order_placed'],
            ['6', 'cart', 'viewed', 'cart_viewed'],
            ['8', 'cart', 'viewed', 'cart_viewed'],
          ]);
          assert.deepEqual(await read(other, {}), [
            ['2', 'user', 'signed_up', 'user_signed_up'],
            ['4', 'order', 'placed', 'order_placed'],
            ['7', 'order_pl', 'aced', 'order_placed'],
          ]);
          const positions = async (id: string, filter: Record<string, unknown>) =>
            (await read(id, filter)).map((row) => row[0]);
          assert.deepEqual(await positions(productId, { canonicalNames: ['order_placed'] }), ['1', '3', '5']);
          assert.deepEqual(await positions(productId, { canonicalNames: ['cart_viewed', 'order_placed'] }), [
            '1',
            '3',
            '5',
            '6',
            '8',
          ]);
          assert.deepEqual(await positions(productId, { canonicalNames: ['user_signed_up'] }), []);
          assert.deepEqual(await positions(productId, { canonicalNames: ['nothing'] }), []);
          assert.deepEqual(await positions(other, { eventType: 'order_pl' }), ['7']);
          assert.deepEqual(await positions(productId, { eventType: 'order' }), ['1', '5']);
          assert.deepEqual(await positions(productId, { action: 'placed' }), ['1']);
          assert.deepEqual(await positions(productId, { action: 'aced', canonicalNames: ['order_placed'] }), ['3']);
        } finally {
          await storage.close();
        }
        const reopened = new BetterSqlite3(path);
        try {
          assert.deepEqual(
            reopened
              .prepare(
                'SELECT position, event_type AS t, action AS a, canonical_name AS n FROM events WHERE position > 5',
              )
              .all(),
            [
              { position: 6, t: null, a: null, n: 3 },
              { position: 7, t: 'order_pl', a: 'aced', n: 1 },
              { position: 8, t: null, a: null, n: 3 },
            ],
          );
          // A name filter still searches the name index, in position order (no sort).
          const query = new Kysely<Database>({ dialect: new SqliteDialect({ database: reopened }) });
          const position = positionSql('sqlite');
          const compiled = query
            .selectFrom('events')
            .select('properties')
            .where('product_id', '=', position.product(productId))
            .where(position.named(['order_placed']))
            .where(position.compare('>', '1'))
            .orderBy(sql.ref('position'))
            .limit(10)
            .compile();
          const plan = (
            reopened.prepare(`EXPLAIN QUERY PLAN ${compiled.sql}`).all(...compiled.parameters) as Array<{
              detail: string;
            }>
          ).map((row) => row.detail);
          assert.ok(
            plan.some((detail) =>
              detail.startsWith('SEARCH events USING INDEX events_by_name (product_id=? AND canonical_name=?'),
            ),
            plan.join('\n'),
          );
          assert.ok(!plan.some((detail) => detail.includes('TEMP B-TREE')), plan.join('\n'));
          await query.destroy();
        } finally {
          reopened.close();
        }
      });
    });
  },
);

describe('migration 856: SQLite event sources and subject types as numbers', { skip }, () => {
  it('codes the known values, keeps any other text as it is, reads and filters every event as before', async () => {
    await withFileBefore(856, async ({ raw, db, productId, migrateAll, path }) => {
      raw
        .prepare(
          `INSERT INTO event_names (canonical_name, event_type, action) VALUES ('order_placed', 'order', 'placed')`,
        )
        .run();
      // As the server of 855 stored them, without hashes (a key is then built from the row, its source as text).
      const insert = raw.prepare(
        `INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties)
         VALUES (randomblob(16), (SELECT number FROM product_numbers WHERE product_id = ?), ?, ?, NULL, NULL, 1, 0, ?, ?, ?, 0, '{}')`,
      );
      const old: Array<[string, string, string, string]> = [
        ['api', 'e1', 'user', 'u1'],
        ['segment', 'e2', 'user', 'u1'],
        ['api', 'e3', 'account', 'acme'],
        // A source the server does not write, and a text that looks like a code: both stay text.
        ['import', 'e4', 'subscription', 'sub_1'],
        ['0', 'e5', 'user', 'u2'],
        ['segment', 'c', 'account', 'acme'],
      ];
      old.forEach(([source, externalId, subjectType, subjectId], i) =>
        insert.run(productId, source, externalId, subjectType, subjectId, i),
      );
      raw.prepare(`DELETE FROM events WHERE external_id = 'c'`).run();
      // Every event as 855's select list read it, and the plans of a filter on either column.
      const list855 = RAW_EVENT_COLUMNS.replace(SQLITE_SOURCE_TEXT, 'source').replace(
        SUBJECT_TYPE_CODES.text('events.subject_type'),
        'subject_type',
      );
      const before = (
        raw.prepare(`SELECT ${list855} FROM events ORDER BY position`).raw(true).all() as unknown[][]
      ).map(eventFromRawRow);
      assert.deepEqual(
        before.map((e) => [e.position, e.source, e.subjectType]),
        [
          ['1', 'api', 'user'],
          ['2', 'segment', 'user'],
          ['3', 'api', 'account'],
          ['4', 'import', 'subscription'],
          ['5', '0', 'user'],
        ],
      );
      const plansBefore = filterPlans(raw, productId, (_column, text) => sql<string>`${text}`);
      await migrateAll();
      assert.deepEqual(
        raw
          .prepare(
            'SELECT position, typeof(source) AS t, source AS s, typeof(subject_type) AS u, subject_type AS v FROM events',
          )
          .all(),
        [
          { position: 1, t: 'integer', s: 0, u: 'integer', v: 0 },
          { position: 2, t: 'integer', s: 1, u: 'integer', v: 0 },
          { position: 3, t: 'integer', s: 0, u: 'integer', v: 1 },
          { position: 4, t: 'text', s: 'import', u: 'integer', v: 2 },
          { position: 5, t: 'text', s: '0', u: 'integer', v: 0 },
        ],
      );
      // The same filters search the same indexes (the product's, in position order: neither column has one).
      const plansAfter = filterPlans(raw, productId, positionSql('sqlite').code);
      assert.deepEqual(plansAfter, plansBefore);
      for (const plan of plansAfter) {
        assert.ok(
          plan.some((detail) =>
            detail.startsWith('SEARCH events USING INDEX events_by_product (product_id=? AND rowid>?)'),
          ),
          plan.join('\n'),
        );
        assert.ok(!plan.some((detail) => detail.includes('TEMP B-TREE')), plan.join('\n'));
      }
      await db.destroy();
      const storage = await openStorage(`sqlite:${path}`);
      try {
        // Every read path gives the events back as they were: the list (Kysely) and the export's pages (raw).
        const listed = await storage.events.page({ productId, filter: {}, limit: 10, order: 'asc', jsonText: true });
        assert.deepEqual(listed.events, before);
        const exported = await storage.events.page({
          productId,
          filter: {},
          limit: 10,
          order: 'asc',
          jsonText: true,
          upTo: '5',
        });
        assert.deepEqual(exported.events, before);
        const positions = async (filter: Record<string, unknown>) =>
          (await storage.events.page({ productId, filter, limit: 10, order: 'asc' })).events.map((e) => e.position);
        assert.deepEqual(await positions({ source: 'api' }), ['1', '3']);
        assert.deepEqual(await positions({ source: 'segment' }), ['2']);
        assert.deepEqual(await positions({ source: 'import' }), ['4']);
        assert.deepEqual(await positions({ source: '0' }), ['5']);
        assert.deepEqual(await positions({ source: '1' }), []);
        assert.deepEqual(await positions({ subjectType: 'account' }), ['3']);
        assert.deepEqual(await positions({ subjectType: 'user', subjectIds: ['u1'] }), ['1', '2']);
        assert.deepEqual(await positions({ subjectType: 'account', subjectIds: ['u1'] }), []);
        assert.deepEqual(
          (await storage.events.listBySubjects(productId, 'user', ['u1', 'u2'], 10)).map((e) => e.position).sort(),
          ['1', '2', '5'],
        );
        // Duplicates of each form are found, their originals given back with their text; another source is not one.
        const again = await storage.events.insertMany([
          eventRow(productId, 'e2', { source: 'segment' }),
          eventRow(productId, 'e4', { source: 'import' }),
          eventRow(productId, 'e5', { source: '0' }),
          eventRow(productId, 'e2'),
          eventRow(productId, 'd', { source: 'segment', subjectType: 'subscription', subjectId: 'sub_2' }),
        ]);
        assert.deepEqual(
          again.map((outcome) => [outcome.status, outcome.event.source, outcome.event.subjectType]),
          [
            ['duplicate', 'segment', 'user'],
            ['duplicate', 'import', 'subscription'],
            ['duplicate', '0', 'user'],
            ['created', 'api', 'user'],
            ['created', 'segment', 'subscription'],
          ],
        );
        assert.deepEqual(await positions({ source: 'segment' }), ['2', '8']);
        assert.deepEqual(await positions({ subjectType: 'subscription' }), ['4', '8']);
      } finally {
        await storage.close();
      }
      const reopened = new BetterSqlite3(path);
      try {
        // The writer binds the codes as integers (a REAL would take 8 bytes in a column without affinity).
        assert.deepEqual(
          reopened
            .prepare(
              'SELECT position, typeof(source) AS t, source AS s, subject_type AS v FROM events WHERE position > 5',
            )
            .all(),
          [
            { position: 7, t: 'integer', s: 0, v: 0 },
            { position: 8, t: 'integer', s: 1, v: 2 },
          ],
        );
        assertRebuiltEvents(reopened, 8);
      } finally {
        reopened.close();
      }
    });
  });
});

/** EXPLAIN QUERY PLAN of a page of the product filtered by `source`, and of one by `subject_type`. */
function filterPlans(
  raw: BetterSqlite3.Database,
  productId: string,
  code: (column: 'source' | 'subject_type', text: string) => Expression<string>,
): string[][] {
  const query = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
  const position = positionSql('sqlite');
  return (['source', 'subject_type'] as const).map((column) => {
    const compiled = query
      .selectFrom('events')
      .select('properties')
      .where('product_id', '=', position.product(productId))
      .where(column, '=', code(column, column === 'source' ? 'segment' : 'account'))
      .where(position.compare('>', '1'))
      .orderBy(sql.ref('position'))
      .limit(10)
      .compile();
    return (
      raw.prepare(`EXPLAIN QUERY PLAN ${compiled.sql}`).all(...compiled.parameters) as Array<{ detail: string }>
    ).map((row) => row.detail);
  });
}
