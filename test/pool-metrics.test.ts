// /metrics shows the PostgreSQL pool of this process (docs/scaling-out.md, "What to watch"): its size is
// INLET_PG_POOL_SIZE, and queries waiting for a connection are visible. SQLite has no pool.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { createTestApp, dialect, type TestContext } from './helpers.js';
import { createCheckpointWatch } from '../src/services/postgres-checkpoints.js';

describe(`connection pool metrics (${dialect})`, () => {
  let ctx: TestContext;
  before(async () => {
    ctx = await createTestApp({ postgresPoolSize: 3 });
  });
  after(() => ctx.close());

  async function scrape(): Promise<string> {
    const response = await ctx.app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(response.statusCode, 200);
    return response.body;
  }

  it(
    dialect === 'postgres'
      ? 'reports the pool size, open and idle connections, and waiting queries'
      : 'has no pool gauges on SQLite',
    async () => {
      const text = await scrape();
      if (dialect === 'sqlite') {
        assert.doesNotMatch(text, /inlet_db_pool/);
        return;
      }
      assert.match(text, /^inlet_db_pool_connections\{state="max"\} 3$/m);
      assert.match(text, /^inlet_db_pool_connections\{state="open"\} [0-3]$/m);
      assert.match(text, /^inlet_db_pool_connections\{state="idle"\} [0-3]$/m);
      assert.match(text, /^inlet_db_pool_waiting 0$/m);
    },
  );

  it(
    dialect === 'postgres'
      ? "says whether commits wait for a standby (the test server has none: 0) and counts the primary's standbys"
      : 'has no replication gauges on SQLite',
    async () => {
      const text = await scrape();
      if (dialect === 'sqlite') {
        assert.doesNotMatch(text, /inlet_postgres_/);
        return;
      }
      const status = await ctx.services.storage.capabilities.telemetry.replicationStatus!();
      assert.equal(status.synchronousStandbyNames, '');
      assert.match(
        text,
        /^inlet_postgres_synchronous_commit\{synchronous_standby_names="",synchronous_commit="[a-z_]+"\} 0$/m,
      );
      for (const state of ['sync', 'quorum', 'potential', 'async', 'unknown'])
        assert.match(text, new RegExp(`^inlet_postgres_standbys\\{sync_state="${state}"\\} 0$`, 'm'));
    },
  );

  it(
    dialect === 'postgres'
      ? "counts the server's checkpoints by kind and its WAL, read from the server at each scrape"
      : 'has no checkpoint counters on SQLite',
    async () => {
      const text = await scrape();
      if (dialect === 'sqlite') {
        assert.doesNotMatch(text, /inlet_postgres_checkpoints_total|inlet_postgres_wal_/);
        return;
      }
      const first = Number(
        /^inlet_postgres_checkpoints_total\{server="[^"]+",kind="requested"\} (\d+)$/m.exec(text)?.[1],
      );
      assert.match(text, /^inlet_postgres_checkpoints_total\{server="[^"]+",kind="timed"\} \d+$/m);
      assert.match(text, /^inlet_postgres_wal_bytes_total\{server="[^"]+"\} \d+$/m);
      assert.match(text, /^inlet_postgres_wal_full_page_images_total\{server="[^"]+"\} \d+$/m);
      await sql`CHECKPOINT`.execute(ctx.services.storage.db);
      const second = Number(
        /^inlet_postgres_checkpoints_total\{server="[^"]+",kind="requested"\} (\d+)$/m.exec(await scrape())?.[1],
      );
      assert.ok(second >= first + 1, `a CHECKPOINT is a requested checkpoint: ${first} → ${second}`);
    },
  );

  it(
    'warns, naming max_wal_size and the docs, when the server made requested checkpoints since the last check',
    { skip: dialect === 'postgres' ? false : 'PostgreSQL only' },
    async () => {
      const warnings: Array<{ details: Record<string, unknown>; message: string }> = [];
      // The timer off: the test runs the checks (the first read is the baseline).
      const watch = createCheckpointWatch(ctx.services.storage.capabilities.telemetry.walStats!, { intervalMs: 0 });
      watch.start({ warn: (details, message) => warnings.push({ details, message }) });
      await watch.check();
      await watch.check();
      assert.equal(
        warnings.length,
        0,
        'no checkpoint requested since the baseline (the test server is otherwise idle enough)',
      );
      for (let i = 0; i < 2; i++) await sql`CHECKPOINT`.execute(ctx.services.storage.db);
      await watch.check();
      assert.equal(warnings.length, 1);
      assert.ok((warnings[0]!.details.requestedCheckpoints as number) >= 2);
      assert.match(warnings[0]!.message, /max_wal_size \(\d+[MG]B\)/);
      assert.match(warnings[0]!.message, /docs\/scaling-out\.md/);
      // (At most one an hour: test/unit/postgres-checkpoints.test.ts, without spending more CHECKPOINTs here.)
      watch.stop();
    },
  );

  it(
    'shows queries waiting while every connection is busy',
    { skip: dialect === 'postgres' ? false : 'PostgreSQL only' },
    async () => {
      const db = ctx.services.storage.db;
      // Four queries of 500 ms on a pool of three: one waits.
      const busy = Array.from({ length: 4 }, () => sql`SELECT pg_sleep(0.5)`.execute(db));
      const deadline = Date.now() + 2000;
      const saturated = () => {
        const stats = ctx.services.storage.capabilities.telemetry.poolStats!();
        return stats.open === 3 && stats.idle === 0 && stats.waiting > 0;
      };
      while (!saturated() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      const text = await scrape();
      await Promise.all(busy);
      assert.match(text, /^inlet_db_pool_connections\{state="open"\} 3$/m);
      assert.match(text, /^inlet_db_pool_connections\{state="idle"\} 0$/m);
      assert.match(text, /^inlet_db_pool_waiting 1$/m);
    },
  );
});
