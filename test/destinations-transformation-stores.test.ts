// A destination's own transformation (transformations.md §1) on the types that keep the data: a PostgreSQL
// warehouse (a database of its own on the local server) and Parquet files (read back with DuckDB) load what the
// steps leave (masked, renamed, dropped), with the product's stored event unchanged.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { adminHeaders, bearer, createTestApp, type TestContext } from './helpers.js';
import { createWarehouseDb, type WarehouseDb } from './support/warehouse-db.js';

let ctx: TestContext;
let root: string;
let warehouse: WarehouseDb;
let duck: DuckDBConnection;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'inlet-files-tf-'));
  ctx = await createTestApp({ fileDestinationsRoot: root });
  warehouse = await createWarehouseDb();
  duck = await (await DuckDBInstance.create(':memory:')).connect();
});
after(async () => {
  duck.closeSync();
  await ctx.close();
  await warehouse.drop();
  rmSync(root, { recursive: true, force: true });
});

const STEPS = [
  { kind: 'drop', where: { '==': [{ var: 'event' }, 'page_viewed'] } },
  { kind: 'mask', paths: ['properties.email'], with: 'redact' },
  { kind: 'rename_property', from: 'properties.plan', to: 'properties.tier' },
];

async function create(productId: string, body: Record<string, unknown>): Promise<string> {
  const res = await ctx.app.inject({
    method: 'POST',
    url: `/admin/v1/products/${productId}/destinations`,
    headers: adminHeaders(),
    payload: { ...body, transformation: { steps: STEPS } },
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().data.id as string;
}

async function track(key: string, event: string, properties: Record<string, unknown>): Promise<string> {
  const res = await ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events',
    headers: bearer(key),
    payload: { event, subject_type: 'user', subject_id: 'u1', properties },
  });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().data.uuid as string;
}

async function deliver(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    await ctx.services.destinations.tick();
    await ctx.services.destinations.idle();
  }
}

describe('destination transformations on warehouses and files', () => {
  it('a PostgreSQL warehouse and Parquet files load what the steps leave; the stored event is unchanged', async () => {
    const product = await ctx.product('tf-stores');
    const schema = 'tf_stores';
    const warehouseId = await create(product.id, {
      type: 'postgres',
      name: 'warehouse',
      url: warehouse.url,
      schema,
      batch: { max_messages: 50, max_wait_ms: 0 },
    });
    const filesId = await create(product.id, {
      type: 'parquet',
      name: 'files',
      path: 'tf',
      batch: { max_messages: 50, max_wait_ms: 0 },
    });
    const kept = await track(product.eventsKey, 'order.placed', { email: 'ada@example.com', plan: 'pro' });
    await track(product.eventsKey, 'page.viewed', { email: 'ada@example.com' });
    await deliver();

    const loaded = await warehouse.query<{ canonical_name: string; properties: unknown }>(
      `SELECT canonical_name, properties FROM ${schema}.events ORDER BY received_at`,
    );
    assert.deepEqual(loaded, [{ canonical_name: 'order_placed', properties: { email: '[redacted]', tier: 'pro' } }]);

    const files = (
      await duck.runAndReadAll(
        `SELECT id, canonical_name, properties FROM read_parquet('${join(root, 'tf')}/events/**/*.parquet', hive_partitioning = true)`,
      )
    ).getRowObjectsJson() as Array<{ id: string; canonical_name: string; properties: string }>;
    assert.deepEqual(
      files.map((f) => [f.id, f.canonical_name, JSON.parse(f.properties)]),
      [[kept, 'order_placed', { email: '[redacted]', tier: 'pro' }]],
    );

    const stored = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${product.id}/events/${kept}`,
      headers: adminHeaders(),
    });
    assert.deepEqual(stored.json().data.properties, { email: 'ada@example.com', plan: 'pro' });
    for (const id of [warehouseId, filesId]) {
      const shown = await ctx.app.inject({
        method: 'GET',
        url: `/admin/v1/products/${product.id}/destinations/${id}`,
        headers: adminHeaders(),
      });
      assert.equal(shown.json().data.lag, 0, `${id}: the dropped message is passed`);
    }
  });
});
