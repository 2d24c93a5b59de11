// Warehouse destinations under kill -9 (warehouses.md §1, §2 "exactly once"), with the real server as a child
// process on the backend under test: the server is killed twice while events arrive and loads run, then
// restarted. PostgreSQL (a second database of its own as the warehouse): every acknowledged event ends up in
// `events` and in its event table exactly once. Parquet (a root of its own, read back with DuckDB): every
// acknowledged event in exactly one file. On PostgreSQL also two live instances, each type: the holder frozen
// mid-load, a takeover, the thaw, then a hand-over at shutdown.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createTestServices, testDatabase, dialect, postgresUrl } from '../helpers.js';
import { startServerProcess, type ServerProcess } from '../support/server-process.js';
import { createWarehouseDb, type WarehouseDb } from '../support/warehouse-db.js';
import { sendEvents, serverEnv, until } from './support/instances.js';

const SCHEMA = 'crash';

/** Sends events of two names with a few properties until stopped; records the acknowledged uuids. */
function load(server: ServerProcess, key: string, workers: number, acknowledged: Set<string>) {
  return sendEvents(server, key, workers, acknowledged, (n) => ({
    event: n % 2 ? 'crash.odd' : 'crash.even',
    subject_type: 'user',
    subject_id: `u${n % 50}`,
    properties: { n, half: n / 2, label: `l${n}` },
  }));
}

type Services = Awaited<ReturnType<typeof createTestServices>>['services'];

/** The pid of the instance that holds the destination's lease (its holder name ends in `:<pid>`), if one does. */
function leaseHolderPid(services: Services, productId: string, destinationId: string) {
  return async (): Promise<number | undefined> => {
    const d = await services.destinations.show(productId, destinationId);
    return d.leaseHolder === null ? undefined : Number(d.leaseHolder.split(':')[1]);
  };
}

/** Sessions in a transaction on the destinations' rows, or waiting for a lock on them (any test's, on this server). */
async function destinationLocks(): Promise<string> {
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ state: string; wait: string | null; query: string }>(
      `SELECT state, wait_event_type AS wait, left(query, 100) AS query FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND query LIKE '%destinations%'
          AND (state LIKE 'idle in transaction%' OR wait_event_type = 'Lock')`,
    );
    return JSON.stringify(rows);
  } finally {
    await client.end();
  }
}

/**
 * Freezes whichever of `a` and `b` holds the lease (SIGSTOP) and waits for the other to take it over. A holder
 * frozen inside a transaction on the destination's row (its state write, a lease renewal) keeps the row locked
 * until the server ends its session, the lease's length after it went idle (storage/destinations/state.ts): the
 * takeover still comes within about two leases. Should it not, the sessions on the rows are in the message.
 */
async function freezeHolder(a: ServerProcess, b: ServerProcess, holderPid: () => Promise<number | undefined>) {
  const first = await holderPid();
  const [holder, other] = first === a.child.pid ? [a, b] : [b, a];
  assert.ok(first === a.child.pid || first === b.child.pid, `one of the two holds the lease (${first})`);
  holder.child.kill('SIGSTOP');
  const frozen = Date.now();
  const locksAtFreeze = await destinationLocks();
  try {
    await until(async () => (await holderPid()) === other.child.pid, 15_000, 'the other instance to take over');
    if (locksAtFreeze !== '[]')
      console.log(`frozen inside a transaction (${locksAtFreeze}): taken over after ${Date.now() - frozen} ms`);
    return { holder, other };
  } catch (error) {
    const locks = await destinationLocks();
    holder.child.kill('SIGCONT');
    throw new Error(`${(error as Error).message}; locks: ${locks}`);
  }
}

/** A hand-over: `from` shuts down (its lease released) and `to` takes over at once. */
async function handOver(from: ServerProcess, to: ServerProcess, holderPid: () => Promise<number | undefined>) {
  from.child.kill('SIGTERM');
  await from.exited;
  await until(async () => (await holderPid()) === to.child.pid, 30_000, 'the hand-over');
}

describe(`warehouse destination under kill -9 (${dialect})`, () => {
  const servers: ServerProcess[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const server of servers) server.child.kill('SIGKILL');
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  test('kill -9 twice during loads: every acknowledged event in the warehouse exactly once', async () => {
    const warehouse: WarehouseDb = await createWarehouseDb();
    cleanups.push(() => warehouse.drop());
    const database = testDatabase();
    cleanups.push(() => database.drop());
    const { services } = await createTestServices({}, database);
    const product = await services.keys.createProduct('Warehouse crash');
    const { key } = await services.keys.createKey(product.id, { kind: 'events' });
    await services.destinations.create(product.id, {
      type: 'postgres',
      name: 'crash',
      url: warehouse.url,
      schema: SCHEMA,
      batch: { max_messages: 100, max_wait_ms: 0 },
    });
    await services.close();

    const count = async (sql: string) => Number((await warehouse.query<{ n: string }>(sql))[0]!.n);
    const acknowledged = new Set<string>();
    for (let round = 0; round < 2; round++) {
      const server = await startServerProcess(serverEnv(database), 60_000);
      servers.push(server);
      const traffic = load(server, key, 8, acknowledged);
      const target = acknowledged.size + 400;
      const loadedBefore = await count(`SELECT count(*) AS n FROM ${SCHEMA}.events`);
      // Killed while events arrive and loads run.
      await until(
        async () =>
          acknowledged.size >= target && (await count(`SELECT count(*) AS n FROM ${SCHEMA}.events`)) > loadedBefore,
        90_000,
        `${target} acknowledged events and a load`,
      );
      server.child.kill('SIGKILL');
      await server.exited;
      await traffic.stop();
    }
    const server = await startServerProcess(serverEnv(database), 60_000);
    servers.push(server);
    const wanted = [...acknowledged];
    await until(
      async () =>
        Number(
          (
            await warehouse.query<{ n: string }>(
              `SELECT count(*) AS n FROM ${SCHEMA}.events WHERE id = ANY($1::uuid[])`,
              [wanted],
            )
          )[0]!.n,
        ) === wanted.length,
      120_000,
      `all ${acknowledged.size} acknowledged events loaded`,
    );
    // A little longer: a duplicate would show up now if one were coming.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    server.child.kill('SIGTERM');
    await server.exited;

    const ids = (await warehouse.query<{ id: string }>(`SELECT id FROM ${SCHEMA}.events`)).map((r) => r.id);
    assert.equal(new Set(ids).size, ids.length, 'no event twice in events');
    const loaded = new Set(ids);
    for (const uuid of acknowledged) assert.ok(loaded.has(uuid), `acknowledged ${uuid} is in events`);
    const tables = await count(
      `SELECT (SELECT count(*) FROM ${SCHEMA}.crash_odd) + (SELECT count(*) FROM ${SCHEMA}.crash_even) AS n`,
    );
    assert.equal(tables, ids.length, 'every event once in its event table');
    const distinct = await count(
      `SELECT count(DISTINCT id) AS n FROM (SELECT id FROM ${SCHEMA}.crash_odd UNION ALL SELECT id FROM ${SCHEMA}.crash_even) t`,
    );
    assert.equal(distinct, ids.length);
    console.log(`${ids.length} events loaded, ${acknowledged.size} acknowledged`);
  });

  test(
    'two live instances on PostgreSQL: a takeover from a frozen holder, then a hand-over at shutdown, load no row twice',
    { skip: dialect !== 'postgres' && 'PostgreSQL only: SQLite serves one process (docs/scaling-out.md)' },
    async () => {
      const schema = 'takeover';
      const warehouse: WarehouseDb = await createWarehouseDb();
      cleanups.push(() => warehouse.drop());
      const database = testDatabase();
      cleanups.push(() => database.drop());
      const { services } = await createTestServices({}, database);
      cleanups.push(() => services.close());
      const product = await services.keys.createProduct('Warehouse takeover');
      const { key } = await services.keys.createKey(product.id, { kind: 'events' });
      const created = await services.destinations.create(product.id, {
        type: 'postgres',
        name: 'takeover',
        url: warehouse.url,
        schema,
        batch: { max_messages: 50, max_wait_ms: 0 },
      });
      const holderPid = leaseHolderPid(services, product.id, created.destination.id);
      const count = async (sql: string) => Number((await warehouse.query<{ n: string }>(sql))[0]!.n);
      const loaded = () => count(`SELECT count(*) AS n FROM ${schema}.events`);
      // A short lease, so that a frozen holder loses it within seconds.
      const env = serverEnv(database, { INLET_DESTINATION_LEASE_MS: '2000' });
      const a = await startServerProcess(env, 60_000);
      const b = await startServerProcess(env, 60_000);
      servers.push(a, b);
      const acknowledged = new Set<string>();
      const traffic = [load(a, key, 4, acknowledged), load(b, key, 4, acknowledged)];
      await until(async () => (await loaded()) >= 200, 60_000, 'the first loads');

      // The holder freezes (SIGSTOP) while it loads: the other takes the lease and loads the same messages from
      // the stored cursor, while the frozen one still holds its batch (and perhaps the schema's lock). Thawed, it
      // finishes the load it was in.
      const { holder, other } = await freezeHolder(a, b, holderPid);
      const atTakeover = await loaded();
      // The new holder loads, unless the frozen one holds the schema's lock (mid-load): then it waits for the thaw.
      const blocked = await until(async () => (await loaded()) > atTakeover, 5_000, 'a load by the new holder').then(
        () => false,
        () => true,
      );
      holder.child.kill('SIGCONT');
      const thawed = await loaded();
      await until(async () => (await loaded()) > thawed + 100, 30_000, 'loads after the thaw');

      // A hand-over: the new holder shuts down and the thawed one takes over at once.
      await handOver(other, holder, holderPid);
      for (const t of traffic) await t.stop();
      const wanted = [...acknowledged];
      await until(
        async () =>
          (await count(
            `SELECT count(*) AS n FROM ${schema}.events WHERE id = ANY('{${wanted.join(',')}}'::uuid[])`,
          )) === wanted.length,
        120_000,
        `all ${wanted.length} acknowledged events loaded`,
      );
      // A little longer: a duplicate would show up now if one were coming.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      holder.child.kill('SIGTERM');
      await holder.exited;

      const ids = (await warehouse.query<{ id: string }>(`SELECT id FROM ${schema}.events`)).map((r) => r.id);
      assert.equal(new Set(ids).size, ids.length, 'no event twice in events');
      const inTables = await count(
        `SELECT count(*) AS n FROM (SELECT id FROM ${schema}.crash_odd UNION ALL SELECT id FROM ${schema}.crash_even) t`,
      );
      assert.equal(inTables, ids.length, 'every event once in its event table');
      const distinct = await count(
        `SELECT count(DISTINCT id) AS n FROM (SELECT id FROM ${schema}.crash_odd UNION ALL SELECT id FROM ${schema}.crash_even) t`,
      );
      assert.equal(distinct, ids.length, 'no event twice in its event table');
      console.log(
        `${ids.length} events loaded, ${acknowledged.size} acknowledged; the new holder ${blocked ? 'waited for the frozen one to finish its load' : 'loaded while the old one was frozen'}`,
      );
    },
  );

  test(
    'two live instances on one Parquet folder: a takeover from a frozen holder, then a hand-over, write no event twice',
    { skip: dialect !== 'postgres' && 'PostgreSQL only: SQLite serves one process (docs/scaling-out.md)' },
    async () => {
      const root = mkdtempSync(join(tmpdir(), 'inlet-files-takeover-'));
      cleanups.push(async () => rmSync(root, { recursive: true, force: true }));
      const database = testDatabase();
      cleanups.push(() => database.drop());
      const { services } = await createTestServices({ fileDestinationsRoot: root }, database);
      cleanups.push(() => services.close());
      const product = await services.keys.createProduct('Files takeover');
      const { key } = await services.keys.createKey(product.id, { kind: 'events' });
      const created = await services.destinations.create(product.id, {
        type: 'parquet',
        name: 'takeover',
        path: 'lake',
        batch: { max_messages: 50, max_wait_ms: 0 },
      });
      const holderPid = leaseHolderPid(services, product.id, created.destination.id);
      const duck = await (await DuckDBInstance.create(':memory:')).connect();
      cleanups.push(async () => duck.closeSync());
      const glob = `read_parquet('${join(root, 'lake')}/events/**/*.parquet', hive_partitioning = true)`;
      /** The ids in the files; none while there is no file yet, or while one is being replaced under the read. */
      const ids = async (): Promise<string[] | undefined> => {
        try {
          return (await duck.runAndReadAll(`SELECT id FROM ${glob}`)).getRowObjectsJson().map((r) => String(r.id));
        } catch {
          return undefined;
        }
      };
      const loaded = async () => (await ids())?.length ?? 0;
      // A short lease, so that a frozen holder loses it within seconds.
      const env = serverEnv(database, { INLET_DESTINATION_LEASE_MS: '2000', INLET_FILE_DESTINATIONS_ROOT: root });
      const a = await startServerProcess(env, 60_000);
      const b = await startServerProcess(env, 60_000);
      servers.push(a, b);
      const acknowledged = new Set<string>();
      const traffic = [load(a, key, 4, acknowledged), load(b, key, 4, acknowledged)];
      await until(async () => (await loaded()) >= 200, 60_000, 'the first files');

      // The holder freezes (SIGSTOP) while it writes: the other takes the lease and writes the same messages from
      // the stored cursor (in batches of other bounds, as more events came meanwhile), while the frozen one still
      // holds its batch. Thawed, it finishes the file it was in: the new holder's files that meet it keep their
      // rows (their fencing token is newer) and its own file gives up those it shares with them.
      const { holder, other } = await freezeHolder(a, b, holderPid);
      const atTakeover = await loaded();
      await until(async () => (await loaded()) > atTakeover, 30_000, 'a file by the new holder');
      holder.child.kill('SIGCONT');
      const thawed = await loaded();
      await until(async () => (await loaded()) > thawed + 100, 30_000, 'files after the thaw');

      // A hand-over: the new holder shuts down and the thawed one takes over at once.
      await handOver(other, holder, holderPid);
      for (const t of traffic) await t.stop();
      // What the last look saw, for the message should the wait time out.
      let seen = { missing: acknowledged.size, rows: 0 };
      await until(
        async () => {
          const rows = await ids();
          const inFiles = new Set(rows);
          seen = { missing: [...acknowledged].filter((id) => !inFiles.has(id)).length, rows: rows?.length ?? -1 };
          return seen.missing === 0;
        },
        120_000,
        `all ${acknowledged.size} acknowledged events in files`,
      ).catch(async (error: Error) => {
        const d = await services.destinations.show(product.id, created.destination.id);
        throw new Error(
          `${error.message}: ${seen.missing} missing, ${seen.rows} rows read (-1: the read failed); cursor ${JSON.stringify(d.cursor)}, last error ${d.lastError}`,
        );
      });
      // A little longer: a duplicate would show up now if one were coming.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      holder.child.kill('SIGTERM');
      await holder.exited;

      const all = (await ids()) ?? [];
      assert.equal(new Set(all).size, all.length, 'no event in two files');
      const inFiles = new Set(all);
      for (const uuid of acknowledged) assert.ok(inFiles.has(uuid), `acknowledged ${uuid} is in a file`);
      const [row] = (
        await duck.runAndReadAll(`SELECT count(*)::BIGINT AS n, count(DISTINCT id)::BIGINT AS d FROM ${glob}`)
      ).getRowObjectsJson();
      assert.equal(Number(row!.n), Number(row!.d), 'DuckDB reads every id once');
      console.log(`${all.length} events in files, ${acknowledged.size} acknowledged`);
    },
  );

  test('kill -9 twice during Parquet writes: every acknowledged event in exactly one file', async () => {
    const root = mkdtempSync(join(tmpdir(), 'inlet-files-crash-'));
    cleanups.push(async () => rmSync(root, { recursive: true, force: true }));
    const env = { INLET_FILE_DESTINATIONS_ROOT: root };
    const database = testDatabase();
    cleanups.push(() => database.drop());
    const { services } = await createTestServices({ fileDestinationsRoot: root }, database);
    const product = await services.keys.createProduct('Files crash');
    const { key } = await services.keys.createKey(product.id, { kind: 'events' });
    await services.destinations.create(product.id, {
      type: 'parquet',
      name: 'crash',
      path: 'lake',
      batch: { max_messages: 100, max_wait_ms: 0 },
    });
    await services.close();

    const duck = await (await DuckDBInstance.create(':memory:')).connect();
    const glob = `read_parquet('${join(root, 'lake')}/events/**/*.parquet', hive_partitioning = true)`;
    const ids = async (): Promise<string[]> => {
      try {
        return (await duck.runAndReadAll(`SELECT id FROM ${glob}`)).getRowObjectsJson().map((r) => String(r.id));
      } catch {
        return []; // no file yet
      }
    };
    const acknowledged = new Set<string>();
    for (let round = 0; round < 2; round++) {
      const server = await startServerProcess(serverEnv(database, env), 60_000);
      servers.push(server);
      const traffic = load(server, key, 8, acknowledged);
      const target = acknowledged.size + 400;
      const before = (await ids()).length;
      await until(
        async () => acknowledged.size >= target && (await ids()).length > before,
        90_000,
        `${target} acknowledged events and a file`,
      );
      server.child.kill('SIGKILL');
      await server.exited;
      await traffic.stop();
    }
    const server = await startServerProcess(serverEnv(database, env), 60_000);
    servers.push(server);
    await until(
      async () => {
        const loaded = new Set(await ids());
        return [...acknowledged].every((id) => loaded.has(id));
      },
      120_000,
      `all ${acknowledged.size} acknowledged events in files`,
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    server.child.kill('SIGTERM');
    await server.exited;
    const all = await ids();
    assert.equal(new Set(all).size, all.length, 'no event in two files');
    const temporary = readdirSync(join(root, 'lake'), { recursive: true }).filter(
      (f) => String(f).endsWith('.parquet') === false && String(f).includes('.tmp'),
    );
    console.log(
      `${all.length} events in files, ${acknowledged.size} acknowledged, ${temporary.length} temporary files left`,
    );
    duck.closeSync();
  });
});
