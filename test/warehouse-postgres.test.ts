// PostgreSQL warehouse destinations (warehouses.md §1) on the backend under test, loading into a real second
// PostgreSQL database of their own: the checks at creation (400 naming the reason, the URL never echoed),
// the layout (events, a table per event name, identifies, users, aliases), types and widening, names, exactly
// once across re-deliveries, erasure, and the limits (a warning, the event still in `events`).
import { strict as assert } from 'node:assert';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { EVENT_COLUMNS, WIDTH_LIMIT } from '../src/services/destinations/warehouse/layout.js';
import { loadBatch, StaleLoad } from '../src/services/destinations/warehouse/load.js';
import type { StoredMessage } from '../src/storage/types.js';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { cliTestDatabase } from './support/cli.js';
import { guardLoopback } from './support/loopback-guard.js';
import { createWarehouseDb, type WarehouseDb } from './support/warehouse-db.js';
import { warehouseTestKit } from './support/warehouse-tests.js';

const { cli } = cliTestDatabase();

let ctx: TestContext;
let warehouse: WarehouseDb;

before(async () => {
  ctx = await createTestApp({ warehouseMaxColumns: 8, warehouseMaxTables: 4 });
  warehouse = await createWarehouseDb();
});
after(async () => {
  await ctx.close();
  await warehouse.drop();
});

const { admin, track, deliver } = warehouseTestKit(() => ctx);

async function post(key: string, path: string, payload: object) {
  const res = await ctx.app.inject({ method: 'POST', url: `/api/v2/${path}`, headers: bearer(key), payload });
  assert.ok(res.statusCode < 300, res.body);
}

async function warehouseDestination(productId: string, schema: string, extra: Record<string, unknown> = {}) {
  const res = await admin('POST', `/products/${productId}/destinations`, {
    type: 'postgres',
    name: 'warehouse',
    url: warehouse.url,
    schema,
    batch: { max_messages: 50, max_wait_ms: 0 },
    ...extra,
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().data as { id: string; schema: string; warnings: unknown[]; lag: number };
}

async function columnsOf(schema: string, table: string): Promise<Record<string, string>> {
  const rows = await warehouse.query<{ column_name: string; data_type: string }>(
    `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`,
    [schema, table],
  );
  return Object.fromEntries(rows.map((r) => [r.column_name, r.data_type]));
}

const count = async (sql: string, values?: unknown[]) =>
  Number((await warehouse.query<{ n: string }>(sql, values))[0]!.n);

describe('postgres warehouse: creation', () => {
  it('refuses a URL that cannot connect, lacks the rights, or names several hosts, with the reason on /url', async () => {
    const product = await ctx.product('wh-create');
    const create = (body: Record<string, unknown>) =>
      admin('POST', `/products/${product.id}/destinations`, { type: 'postgres', name: 'w', ...body });
    // A closed port on loopback: the connection error.
    const closed = await create({ url: 'postgres://postgres@127.0.0.1:1/nowhere' });
    assert.equal(closed.statusCode, 400, closed.body);
    const closedError = problemOf(closed).errors!.find((e) => e.pointer === '/url')!;
    assert.match(closedError.message, /cannot connect/);
    // A role without the right to create a schema in the warehouse: the server's message.
    const role = `inlet_ro_${warehouse.name.slice(-6)}`;
    await warehouse.query(`CREATE ROLE ${role} LOGIN`);
    await warehouse.query(`REVOKE CREATE ON DATABASE ${warehouse.name} FROM PUBLIC`);
    const url = new URL(warehouse.url);
    url.username = role;
    const denied = await create({ url: url.toString(), schema: 'denied' });
    assert.equal(denied.statusCode, 400, denied.body);
    assert.match(problemOf(denied).errors!.find((e) => e.pointer === '/url')!.message, /permission denied/);
    await warehouse.query(`DROP ROLE ${role}`);
    for (const bad of [
      'postgres://a:1,b:2/db',
      'postgres://postgres@127.0.0.1/db?host=/var/run/postgresql',
      'http://127.0.0.1/x',
      'not a url',
    ]) {
      const res = await create({ url: bad });
      assert.equal(res.statusCode, 400, `${bad}: ${res.body}`);
      assert.ok(
        problemOf(res).errors!.some((e) => e.pointer === '/url'),
        res.body,
      );
    }
    // A comma in the password is not a second host.
    const comma = new URL(warehouse.url);
    comma.password = 'a,b';
    const withComma = await create({ url: comma.toString(), schema: 'comma_password' });
    assert.equal(withComma.statusCode, 201, withComma.body);
    const badSchema = await create({ url: warehouse.url, schema: 'Select' });
    assert.equal(badSchema.statusCode, 400);
    assert.ok(problemOf(badSchema).errors!.some((e) => e.pointer === '/schema'));
    const tooMany = await create({ url: warehouse.url, batch: { max_messages: 10_001 } });
    assert.equal(tooMany.statusCode, 400);
  });

  it('creates the schema with its tables; the URL is never echoed; the default schema and start', async () => {
    const product = await ctx.product('wh-default');
    await track(product.eventsKey, 'page.viewed', 'u1');
    const res = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'postgres',
      name: 'w',
      url: warehouse.url,
    });
    assert.equal(res.statusCode, 201, res.body);
    assert.ok(!res.body.includes(warehouse.url) && !res.body.includes(warehouse.name), res.body);
    const d = res.json().data;
    assert.equal(d.schema, `inlet_${product.id.toLowerCase()}`);
    assert.deepEqual(d.batch, { max_messages: 1000, max_wait_ms: 5000 });
    assert.equal(d.lag, 1, 'a warehouse starts from the beginning');
    assert.deepEqual([d.columns_added, d.type_widenings], [0, 0]);
    const tables = await warehouse.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`,
      [d.schema],
    );
    const names = tables.map((t) => t.table_name);
    for (const t of ['aliases', 'events', 'identifies', 'users']) assert.ok(names.includes(t), names.join());
    const shown = await admin('GET', `/products/${product.id}/destinations/${d.id}`);
    assert.ok(!shown.body.includes(warehouse.name));
  });
});

describe('postgres warehouse: the outbound guard', () => {
  // Hosts outside the tests' INLET_OUTBOUND_ALLOW (loopback only): a documentation address, a private one, an
  // IPv6 documentation address. The guard must refuse them before any connection; the socket spy would refuse
  // (and record) an attempt that got past it, so nothing leaves the machine either way.
  const unlisted = ['192.0.2.10', '10.1.2.3', '[2001:db8::1]'];

  it('refuses a warehouse URL on a host outside INLET_OUTBOUND_ALLOW at creation and edit, without connecting', async () => {
    const spy = guardLoopback();
    try {
      const product = await ctx.product('wh-guard');
      for (const host of unlisted) {
        const url = `postgres://loader:secret@${host}:5432/analytics`;
        const created = await admin('POST', `/products/${product.id}/destinations`, {
          type: 'postgres',
          name: 'w',
          url,
          schema: 'wh_guard',
        });
        assert.equal(created.statusCode, 400, `${host}: ${created.body}`);
        assert.match(
          problemOf(created).errors!.find((e) => e.pointer === '/url')!.message,
          /refused by the outbound guard: .* is not on INLET_OUTBOUND_ALLOW/,
        );
        assert.ok(!created.body.includes('secret'), 'the URL is not echoed');
      }
      const d = await warehouseDestination(product.id, 'wh_guard');
      for (const host of unlisted) {
        const edited = await admin('PATCH', `/products/${product.id}/destinations/${d.id}`, {
          url: `postgres://loader@${host}/analytics`,
        });
        assert.equal(edited.statusCode, 400, `${host}: ${edited.body}`);
        assert.match(
          problemOf(edited).errors!.find((e) => e.pointer === '/url')!.message,
          /refused by the outbound guard: .* is not on INLET_OUTBOUND_ALLOW/,
        );
      }
      assert.deepEqual(spy.refused, [], 'no connection beyond loopback was attempted');
    } finally {
      spy.restore();
    }
  });

  it('refuses at load time a stored URL whose host the guard no longer allows, without connecting or retrying', async () => {
    const product = await ctx.product('wh-guard-load');
    const schema = 'wh_guard_load';
    const d = await warehouseDestination(product.id, schema);
    // As if the URL was stored while INLET_OUTBOUND_ALLOW still listed its host.
    await ctx.services.storage.destinations.update(product.id, d.id, {
      credentials: { url: `postgres://loader@${unlisted[0]}:5432/analytics` },
      updatedAt: new Date().toISOString(),
    });
    await track(product.eventsKey, 'page.viewed', 'u1');
    const spy = guardLoopback();
    try {
      await deliver();
    } finally {
      spy.restore();
    }
    assert.deepEqual(spy.refused, [], 'no connection beyond loopback was attempted');
    const shown = (await admin('GET', `/products/${product.id}/destinations/${d.id}`)).json().data;
    assert.match(shown.last_error, /refused by the outbound guard: .* is not on INLET_OUTBOUND_ALLOW/);
    assert.equal(shown.status, 'disabled', 'a refusal is not retried');
    assert.equal(shown.lag, 1, 'nothing was loaded');
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 0);
  });
});

describe('postgres warehouse: loads', () => {
  it('loads events, a table per event name with typed, flattened columns, and identity tables', async () => {
    const product = await ctx.product('wh-load');
    const schema = 'wh_load';
    const d = await warehouseDestination(product.id, schema);
    const first = await track(product.eventsKey, 'order.completed', 'ada', {
      total: 12,
      paid: true,
      at: '2026-11-28T10:00:00Z',
      note: 'tab\there',
      meta: { campaign: { id: 'c1', deep: { x: 1 } } },
      tags: ['a', 'b'],
    });
    await post(product.eventsKey, 'identify', { external_id: 'ada', traits: { plan: 'pro', seats: 3 } });
    await post(product.eventsKey, 'alias', { from_external_id: 'anon-9', to_external_id: 'ada' });
    await track(product.eventsKey, 'page.viewed', 'anon-9');
    await deliver();
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 2);
    const table = (
      await warehouse.query<{ table_name: string }>(
        `SELECT table_name FROM ${schema}._inlet_tables WHERE canonical_name = 'order_completed'`,
      )
    )[0]!.table_name;
    assert.equal(table, 'order_completed');
    const columns = await columnsOf(schema, table);
    assert.equal(columns.total, 'bigint');
    assert.equal(columns.paid, 'boolean');
    assert.equal(columns.at, 'timestamp with time zone');
    assert.equal(columns.note, 'text');
    assert.equal(columns.meta_campaign_id, 'text');
    assert.equal(columns.meta_campaign_deep, 'jsonb');
    assert.equal(columns.tags, 'jsonb');
    assert.equal(columns.properties, undefined, 'an event table has columns instead of properties');
    const [row] = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.${table}`);
    assert.equal(row!.id, first);
    assert.equal(row!.note, 'tab\there');
    assert.equal(String(row!.total), '12');
    assert.deepEqual(row!.tags, ['a', 'b']);
    assert.deepEqual(row!.meta_campaign_deep, { x: 1 });
    const [event] = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.events WHERE id = $1`, [
      first,
    ]);
    assert.equal((event!.properties as { note: string }).note, 'tab\there');
    assert.equal(event!.canonical_name, 'order_completed');
    const identifies = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.identifies`);
    assert.equal(identifies.length, 1);
    assert.equal(identifies[0]!.external_id, 'ada');
    assert.equal(identifies[0]!.plan, 'pro');
    const users = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.users`);
    assert.deepEqual(
      users.map((u) => [u.external_id, u.plan]),
      [['ada', 'pro']],
    );
    const aliases = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.aliases`);
    assert.deepEqual(
      aliases.map((a) => [a.from_external_id, a.to_external_id]),
      [['anon-9', 'ada']],
    );

    // The metrics, as /metrics serves them: every column added (order_completed's, identifies' and users')
    // counted once, and one duration per load the delivery log shows.
    const metrics = (await ctx.app.inject({ method: 'GET', url: '/metrics' })).body;
    const sample = (name: string) => {
      const line = new RegExp(`^${name}\\{destination="${d.id}"\\} (\\S+)$`, 'm').exec(metrics);
      assert.ok(line, `${name} for ${d.id} in /metrics`);
      return Number(line[1]);
    };
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}._inlet_columns`), 11);
    assert.equal(sample('inlet_warehouse_columns_added_total'), 11);
    const deliveries = (await admin('GET', `/products/${product.id}/destinations/${d.id}/deliveries`)).json()
      .data as Array<{ outcome: string }>;
    const loads = deliveries.filter((l) => l.outcome === 'success').length;
    assert.ok(loads >= 1 && loads === deliveries.length, JSON.stringify(deliveries));
    assert.equal(sample('inlet_warehouse_load_duration_seconds_count'), loads);
    assert.ok(sample('inlet_warehouse_load_duration_seconds_sum') > 0);
    assert.equal(sample('inlet_warehouse_rows_loaded_total'), 4, 'two events, an identify, an alias');
  });

  it('widens a column when a later value does not fit, without losing a value or failing a load', async () => {
    const product = await ctx.product('wh-widen');
    const schema = 'wh_widen';
    const d = await warehouseDestination(product.id, schema);
    await track(product.eventsKey, 'item.rated', 'u1', {
      score: 3,
      flag: true,
      when: '2026-01-01T00:00:00Z',
      // Not times PostgreSQL takes (no such day; an offset past ±15:59): text, and the load goes through.
      no_day: '2026-02-30T00:00:00Z',
      far_offset: '2026-03-01T12:00:00+16:00',
    });
    await deliver();
    const first = await columnsOf(schema, 'item_rated');
    assert.equal(first.no_day, 'text');
    assert.equal(first.far_offset, 'text');
    await track(product.eventsKey, 'item.rated', 'u2', { score: 3.5, flag: 'maybe', when: 'yesterday' });
    await deliver();
    let columns = await columnsOf(schema, 'item_rated');
    assert.equal(columns.score, 'double precision');
    assert.equal(columns.flag, 'text');
    assert.equal(columns.when_, 'text', 'when is reserved: when_');
    await track(product.eventsKey, 'item.rated', 'u3', { score: 'n/a' });
    await deliver();
    columns = await columnsOf(schema, 'item_rated');
    assert.equal(columns.score, 'text');
    const rows = await warehouse.query<{ subject_id: string; score: string; flag: string }>(
      `SELECT subject_id, score, flag FROM ${schema}.item_rated ORDER BY subject_id`,
    );
    assert.deepEqual(
      rows.map((r) => [r.subject_id, r.score, r.flag]),
      [
        ['u1', '3', 'true'],
        ['u2', '3.5', 'maybe'],
        ['u3', 'n/a', null],
      ],
    );
    const metrics = await ctx.services.metrics.registry.metrics();
    assert.match(metrics, /inlet_warehouse_type_widenings_total\{destination="[^"]+"\} 4/);
    // The destination keeps the totals (the metrics are the process's own): five columns, four widenings.
    const shown = (await admin('GET', `/products/${product.id}/destinations/${d.id}`)).json().data;
    assert.deepEqual([shown.columns_added, shown.type_widenings], [5, 4]);
  });

  it('names: invalid identifiers, reserved words, fixed columns and 80-character names get safe, stable columns', async () => {
    const product = await ctx.product('wh-names');
    const schema = 'wh_names';
    await warehouseDestination(product.id, schema, { schema });
    const long = 'x'.repeat(80);
    const props = { 'Order Total!': 1, select: 'a', id: 'mine', [long]: 2, '9lives': true };
    await track(product.eventsKey, 'name.check', 'u1', props);
    await deliver();
    await track(product.eventsKey, 'name.check', 'u2', props);
    await deliver();
    const map = await warehouse.query<{ path: string; column_name: string }>(
      `SELECT path, column_name FROM ${schema}._inlet_columns ORDER BY path`,
    );
    const byPath = Object.fromEntries(map.map((m) => [JSON.parse(m.path)[0] as string, m.column_name]));
    assert.equal(byPath['Order Total!'], 'order_total_');
    assert.equal(byPath.select, 'select_');
    assert.match(byPath.id!, /^id_[0-9a-f]{6}$/);
    assert.equal(byPath['9lives'], '_9lives');
    assert.ok(byPath[long]!.length <= 63 && /^x+_[0-9a-f]{8}$/.test(byPath[long]!), byPath[long]);
    for (const name of Object.values(byPath)) assert.match(name, /^[a-z_][a-z0-9_]*$/);
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.name_check WHERE id IS NOT NULL`), 2);
    const rows = await warehouse.query<Record<string, unknown>>(
      `SELECT "${byPath.id}" AS mine, order_total_ FROM ${schema}.name_check`,
    );
    assert.deepEqual(
      rows.map((r) => [r.mine, String(r.order_total_)]),
      [
        ['mine', '1'],
        ['mine', '1'],
      ],
    );
  });

  it('exactly once: a replay from the beginning loads nothing twice; erasure empties every table of the person', async () => {
    const product = await ctx.product('wh-once');
    const schema = 'wh_once';
    const d = await warehouseDestination(product.id, schema);
    for (let i = 0; i < 30; i++) await track(product.eventsKey, i % 2 ? 'a.done' : 'b.done', `p${i % 3}`, { i });
    await post(product.eventsKey, 'identify', { external_id: 'p1', traits: { plan: 'x' } });
    await post(product.eventsKey, 'alias', { from_external_id: 'p2', to_external_id: 'p1' });
    await deliver();
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 30);
    const replayed = await admin('POST', `/products/${product.id}/destinations/${d.id}/replay`, { from: 'beginning' });
    assert.equal(replayed.statusCode, 200, replayed.body);
    await deliver();
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 30);
    assert.equal(await count(`SELECT count(DISTINCT id) AS n FROM ${schema}.events`), 30);
    assert.equal(
      (await count(`SELECT count(*) AS n FROM ${schema}.a_done`)) +
        (await count(`SELECT count(*) AS n FROM ${schema}.b_done`)),
      30,
    );
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.identifies`), 1);
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.aliases`), 1);
    const [load] = await warehouse.query<{ destination_id: string }>(`SELECT * FROM ${schema}._inlet_loads`);
    assert.equal(load!.destination_id, d.id);

    const erased = await admin('POST', `/products/${product.id}/erasures`, { external_id: 'p1' });
    assert.equal(erased.statusCode, 202, erased.body);
    await deliver();
    for (const table of ['events', 'a_done', 'b_done'])
      assert.equal(
        await count(`SELECT count(*) AS n FROM ${schema}.${table} WHERE subject_id IN ('p1', 'p2')`),
        0,
        table,
      );
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events WHERE subject_id = 'p0'`), 10);
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.identifies`), 0);
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.users`), 0);
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.aliases`), 0);
  });

  it('a table or column limit: the event still lands in events, with a warning on the destination and in metrics', async () => {
    const product = await ctx.product('wh-limits');
    const schema = 'wh_limits';
    const d = await warehouseDestination(product.id, schema);
    const wide = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`p${i}`, i]));
    await track(product.eventsKey, 'wide.one', 'u1', wide);
    for (const name of ['t.one', 't.two', 't.three', 't.four']) await track(product.eventsKey, name, 'u1');
    await deliver();
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 5);
    const columns = Object.keys(await columnsOf(schema, 'wide_one')).filter((c) => /^p\d+$/.test(c));
    assert.equal(columns.length, 8, 'INLET_WAREHOUSE_MAX_COLUMNS is 8 here');
    const [event] = await warehouse.query<{ properties: Record<string, number> }>(
      `SELECT properties FROM ${schema}.events WHERE canonical_name = 'wide_one'`,
    );
    assert.deepEqual(event!.properties, wide, 'every value is still in events');
    assert.equal(await count(`SELECT count(*) AS n FROM ${schema}._inlet_tables`), 4);
    const shown = (await admin('GET', `/products/${product.id}/destinations/${d.id}`)).json().data;
    const messages = (shown.warnings as Array<{ message: string }>).map((w) => w.message).join('\n');
    assert.match(messages, /column limit \(8\) of table "wide_one"/);
    assert.match(messages, /event table limit \(4\) reached: "t_four"/);
    assert.equal(shown.last_error, null, 'a limit is not a failure');
    const metrics = await ctx.services.metrics.registry.metrics();
    assert.match(metrics, new RegExp(`inlet_warehouse_warnings_total\\{destination="${d.id}"\\} [1-9]`));
    assert.match(metrics, new RegExp(`inlet_warehouse_rows_loaded_total\\{destination="${d.id}"\\} 5`));
  });
});

describe('postgres warehouse: a row is never too big', () => {
  // The longest text PostgreSQL never moves out of a row (with its one-byte header, MAXALIGN(TOAST_POINTER_SIZE)),
  // and a jsonb value of that size.
  const shortest = (i: number) => `${i}`.padEnd(23, 'x');
  const jsonb = '"abcdefghijklmno"';

  it('the column bound holds for the worst row the layout allows, and one column more would not', async () => {
    const schema = 'wh_width';
    await warehouse.query(`CREATE SCHEMA ${schema}`);
    const fixed = EVENT_COLUMNS.filter(([n]) => n !== 'properties');
    const insert = async (properties: number) => {
      const table = `${schema}.t${properties}`;
      const columns = [
        ...fixed.map(([n, t]) => `${n} ${t}`),
        ...Array.from({ length: properties }, (_, i) => `p${i} text`),
      ];
      await warehouse.query(`CREATE TABLE ${table} (${columns.join(', ')})`);
      // Every text and jsonb column at its widest, occurred_at null (so the row has a null bitmap).
      const values = [
        `'${randomUUID()}'`,
        'now()',
        'NULL',
        ...Array.from({ length: 9 }, (_, i) => `'${shortest(1000 + i)}'`),
        `'${jsonb}'`,
        'now()',
        ...Array.from({ length: properties }, (_, i) => `'${shortest(i)}'`),
      ];
      await warehouse.query(`INSERT INTO ${table} VALUES (${values.join(', ')})`);
      const [size] = await warehouse.query<{ context: number }>(
        `SELECT pg_column_size(context) AS context FROM ${table}`,
      );
      assert.equal(size!.context, 24, 'the jsonb value is as wide as one stays in the row');
    };
    await insert(WIDTH_LIMIT);
    await assert.rejects(insert(WIDTH_LIMIT + 1), /row is too big/);
  });

  it('an event with more short string properties than a row holds lands, the rest in events with a warning', async () => {
    // INLET_WAREHOUSE_MAX_COLUMNS at its default, above the bound: only the row's width bounds the table.
    const wide = await createTestApp();
    try {
      const product = await wide.product('wh-wide');
      const schema = 'wh_wide';
      const created = await admin(
        'POST',
        `/products/${product.id}/destinations`,
        { type: 'postgres', name: 'w', url: warehouse.url, schema, batch: { max_messages: 50, max_wait_ms: 0 } },
        wide.app,
      );
      assert.equal(created.statusCode, 201, created.body);
      const id = created.json().data.id as string;
      const properties = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`p${i}`, shortest(i)]));
      const sent = await wide.app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(product.eventsKey),
        payload: { event: 'wide.row', subject_type: 'user', subject_id: shortest(0), properties },
      });
      assert.equal(sent.statusCode, 201, sent.body);
      const uuid = sent.json().data.uuid as string;
      for (let i = 0; i < 4; i++) {
        await wide.services.destinations.tick();
        await wide.services.destinations.idle();
      }
      const shown = (await admin('GET', `/products/${product.id}/destinations/${id}`, undefined, wide.app)).json().data;
      assert.equal(shown.last_error, null, 'the load did not fail');
      assert.equal(shown.lag, 0);
      const columns = Object.keys(await columnsOf(schema, 'wide_row')).filter((c) => /^p\d+$/.test(c));
      assert.equal(columns.length, WIDTH_LIMIT);
      const [row] = await warehouse.query<Record<string, unknown>>(`SELECT * FROM ${schema}.wide_row`);
      assert.equal(row!.id, uuid);
      for (const column of columns) assert.equal(row![column], properties[column], column);
      const [event] = await warehouse.query<{ properties: Record<string, string> }>(
        `SELECT properties FROM ${schema}.events WHERE id = $1`,
        [uuid],
      );
      assert.deepEqual(event!.properties, properties, 'every value is in events');
      const warnings = (shown.warnings as Array<{ message: string }>).map((w) => w.message).join('\n');
      assert.match(
        warnings,
        new RegExp(
          `column limit \\(${WIDTH_LIMIT}\\) of table "wide_row" reached: ${400 - WIDTH_LIMIT} new properties`,
        ),
      );
    } finally {
      await wide.close();
    }
  });
});

describe('postgres warehouse: a loader that lost the lease', () => {
  it('is refused under the schema lock, so it cannot put back rows loaded (and erased) since', async () => {
    const product = await ctx.product('wh-stale');
    const schema = 'wh_stale';
    await warehouseDestination(product.id, schema);
    const at = new Date().toISOString();
    const message = {
      kind: 'event',
      position: '1',
      event: {
        id: randomUUID(),
        productId: product.id,
        source: 'api',
        externalId: 'gone',
        eventType: 'page',
        action: 'viewed',
        canonicalName: 'page_viewed',
        nameFormat: 'legacy',
        subjectType: 'user',
        subjectId: 'gone',
        occurredAt: at,
        receivedAt: at,
        properties: {},
        apiKeyId: null,
      },
    } as StoredMessage;
    const client = new pg.Client({ connectionString: warehouse.url });
    await client.connect();
    try {
      const load = (holds: boolean) =>
        loadBatch({
          client: client as unknown as pg.PoolClient,
          schema,
          destinationId: 'dst_stale',
          messages: [message],
          messageId: () => 'evt_stale',
          limits: { maxTables: 4, maxColumns: 8 },
          holds: async () => holds,
        });
      await assert.rejects(load(false), StaleLoad);
      assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 0, 'nothing of it was applied');
      assert.equal(await count(`SELECT count(*) AS n FROM ${schema}._inlet_loads`), 0);
      await load(true);
      assert.equal(await count(`SELECT count(*) AS n FROM ${schema}.events`), 1);
    } finally {
      await client.end();
    }
  });
});

describe('postgres warehouse: editing the url', () => {
  it('a new url is checked and connected like at creation, never echoed; loading goes on there from the cursor', async () => {
    const product = await ctx.product('wh-edit');
    const schema = 'wh_edit';
    const d = await warehouseDestination(product.id, schema);
    const first = await track(product.eventsKey, 'page.viewed', 'u1');
    await deliver();
    const other = await createWarehouseDb();
    try {
      const patch = (body: object) => admin('PATCH', `/products/${product.id}/destinations/${d.id}`, body);
      for (const [bad, reason] of [
        ['postgres://postgres@127.0.0.1:1/x', /cannot connect/],
        ['postgres://a,b/x', /one host/],
        ['http://127.0.0.1/x', /postgres:\/\//],
      ] as const) {
        const res = await patch({ url: bad });
        assert.equal(res.statusCode, 400, `${bad}: ${res.body}`);
        assert.match(problemOf(res).errors!.find((e) => e.pointer === '/url')!.message, reason);
      }
      const edited = await patch({ url: other.url });
      assert.equal(edited.statusCode, 200, edited.body);
      assert.ok(!edited.body.includes(other.name) && !edited.body.includes(warehouse.name), edited.body);
      assert.equal(edited.json().data.schema, schema);
      const second = await track(product.eventsKey, 'page.viewed', 'u2');
      await deliver();
      const ids = async (db: WarehouseDb) =>
        (await db.query<{ id: string }>(`SELECT id FROM ${schema}.events ORDER BY id`)).map((r) => r.id);
      assert.deepEqual(await ids(warehouse), [first], 'what was loaded stays in the old warehouse');
      assert.deepEqual(await ids(other), [second], 'the new warehouse gets what comes after the cursor');
      const shown = await admin('GET', `/products/${product.id}/destinations/${d.id}`);
      assert.ok(!shown.body.includes(other.name), shown.body);
      const back = await patch({ url: warehouse.url });
      assert.equal(back.statusCode, 200, back.body);
      const third = await track(product.eventsKey, 'page.viewed', 'u3');
      await deliver();
      assert.deepEqual(await ids(warehouse), [first, third].sort(), 'back in the first warehouse, after its cursor');
    } finally {
      await other.drop();
    }
  });
});

describe('postgres warehouse: the CLI', () => {
  it('creates one with --type postgres --url --schema, edits --url; show gives the schema, never the URL', async () => {
    const product = JSON.parse((await cli('products', 'create', 'wh-cli', '--json')).out).data.id as string;
    const created = await cli(
      'destinations',
      'create',
      '--product',
      product,
      '--type',
      'postgres',
      '--name',
      'wh',
      '--url',
      warehouse.url,
      '--schema',
      'wh_cli',
      '--json',
    );
    assert.equal(created.code, 0, created.err);
    const d = JSON.parse(created.out).data;
    assert.equal(d.type, 'postgres');
    assert.equal(d.schema, 'wh_cli');
    assert.ok(!created.out.includes(warehouse.name));
    const shown = await cli('destinations', 'show', d.id, '--product', product);
    assert.equal(shown.code, 0, shown.err);
    assert.match(shown.out, /wh_cli/);
    assert.ok(!shown.out.includes(warehouse.name));
    const refused = await cli(
      'destinations',
      'create',
      '--product',
      product,
      '--type',
      'postgres',
      '--name',
      'wh',
      '--url',
      'postgres://postgres@127.0.0.1:1/x',
    );
    assert.equal(refused.code, 1);
    assert.match(refused.err, /\/url.*cannot connect/);
    const edited = await cli('destinations', 'edit', d.id, '--product', product, '--url', warehouse.url, '--json');
    assert.equal(edited.code, 0, edited.err);
    assert.ok(!edited.out.includes(warehouse.name), edited.out);
    const badEdit = await cli('destinations', 'edit', d.id, '--product', product, '--url', 'postgres://a,b/x');
    assert.equal(badEdit.code, 1);
    assert.match(badEdit.err, /\/url.*one host/);
  });
});
