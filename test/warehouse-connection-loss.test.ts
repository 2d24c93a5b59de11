// A PostgreSQL warehouse whose server ends the loader's connection in the middle of a load (a restart, an
// administrator's pg_terminate_backend): the load fails and is tried again, nothing is loaded twice, and the
// process goes on (a connection that dies while checked out emits 'error' on its client, which without a
// listener is an uncaught exception: the server, or the delivery worker, would die with it).
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createTestApp, type TestContext } from './helpers.js';
import { createWarehouseDb, type WarehouseDb } from './support/warehouse-db.js';
import { warehouseTestKit } from './support/warehouse-tests.js';

let ctx: TestContext;
let warehouse: WarehouseDb;

before(async () => {
  ctx = await createTestApp();
  warehouse = await createWarehouseDb();
});
after(async () => {
  await ctx.close();
  await warehouse.drop();
});

const { admin, track, deliver } = warehouseTestKit(() => ctx);

describe('a warehouse connection ended during a load', () => {
  it('fails that load, and the next one loads every event once', async () => {
    const product = await ctx.product('wh-lost');
    const res = await admin('POST', `/products/${product.id}/destinations`, {
      type: 'postgres',
      name: 'warehouse',
      url: warehouse.url,
      schema: 'lost',
      batch: { max_messages: 50, max_wait_ms: 0 },
    });
    assert.equal(res.statusCode, 201, res.body);
    const id = res.json().data.id as string;
    for (let i = 0; i < 3; i++) await track(product.eventsKey, 'page.viewed', `u${i}`, { n: i });

    // The loader waits on a lock held here; its backend is then ended as an administrator would.
    const holder = new pg.Client({ connectionString: warehouse.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE lost.events IN ACCESS EXCLUSIVE MODE');
    const delivering = deliver();
    let loader: number | undefined;
    for (let i = 0; i < 200 && loader === undefined; i++) {
      const [row] = await warehouse.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
      );
      loader = row?.pid;
      if (loader === undefined) await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.ok(loader !== undefined, 'the load never waited on the lock');
    await warehouse.query('SELECT pg_terminate_backend($1)', [loader]);
    await holder.query('ROLLBACK');
    await holder.end();
    await delivering;

    const failed = (await admin('GET', `/products/${product.id}/destinations/${id}`)).json().data;
    assert.match(String(failed.last_error), /terminat/i, JSON.stringify(failed));
    // The retry is scheduled: deliver again once it is due.
    ctx.clock.advance(10 * 60_000);
    await deliver();
    const shown = (await admin('GET', `/products/${product.id}/destinations/${id}`)).json().data;
    assert.equal(shown.lag, 0, JSON.stringify(shown));
    const [loaded] = await warehouse.query<{ n: string; d: string }>(
      'SELECT count(*) AS n, count(DISTINCT id) AS d FROM lost.events',
    );
    assert.deepEqual(loaded, { n: '3', d: '3' });
  });
});
