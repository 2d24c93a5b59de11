// A product of the test app to put transformation steps on (transformations.md §3), with what the transformation
// tests read back: its admin requests, `put(steps)` (asserting 200), a native batch, a Segment batch, the stored
// events and the recorded rejections; and `assertNoTrace`, that a masked value is nowhere on disk (§1).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { bearer, dialect, postgresUrl, productAdmin, type TestContext } from '../helpers.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows read back from JSON answers
type Row = Record<string, any>;

export async function transformedProduct(ctx: TestContext, name: string) {
  const product = await ctx.product(name);
  const admin = productAdmin(ctx.app, product.id);
  const put = async (steps: unknown[]) => {
    const res = await admin('PUT', '/transformation', { steps });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data;
  };
  const batch = (events: unknown[]) =>
    ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(product.eventsKey),
      payload: { events },
    });
  /** `POST /v1/batch` with the events key as Segment's Basic user name. */
  const segment = (items: unknown[]) =>
    ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: { authorization: `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}` },
      payload: { batch: items },
    });
  const events = async () => (await admin('GET', '/events?limit=100')).json().data as Row[];
  const rejections = async () => {
    await ctx.services.rejections.flush();
    return (await admin('GET', '/rejections')).json().data as Row[];
  };
  return { ...product, admin, put, batch, segment, events, rejections };
}

/**
 * That `marker` is in none of the product's reads (events, rejections) and nowhere in the database itself: the
 * SQLite file and its WAL byte by byte, every table of the PostgreSQL schema as text. Rejections recorded by
 * another instance on the same database are flushed by the caller first.
 */
export async function assertNoTrace(
  ctx: TestContext,
  p: Awaited<ReturnType<typeof transformedProduct>>,
  marker: string,
): Promise<void> {
  assert.equal(JSON.stringify(await p.rejections()).includes(marker), false, 'rejections');
  assert.equal(JSON.stringify(await p.events()).includes(marker), false, 'events');
  await ctx.services.governance.catalog.flush();
  if (dialect === 'sqlite') {
    const file = ctx.database.databaseUrl.slice('sqlite:'.length);
    for (const path of [file, `${file}-wal`])
      if (existsSync(path)) assert.equal(readFileSync(path).includes(marker), false, path);
    return;
  }
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  try {
    const schema = ctx.database.postgresSchema!;
    const { rows } = await client.query<{ name: string }>(
      `SELECT relname AS name FROM pg_class WHERE relnamespace = $1::text::regnamespace AND relkind = 'r'`,
      [schema],
    );
    for (const { name } of rows) {
      const found = await client.query(`SELECT 1 FROM ${schema}."${name}" t WHERE t::text LIKE $1 LIMIT 1`, [
        `%${marker}%`,
      ]);
      assert.equal(found.rowCount, 0, name);
    }
  } finally {
    await client.end();
  }
}
