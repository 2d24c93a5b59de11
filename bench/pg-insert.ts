// `npx tsx bench/pg-insert.ts [--batch 100] [--statements 150] [--rounds 3] [--prefill 100000]`: where PostgreSQL's
// CPU goes per stored event, statement by statement, without HTTP or a load generator (issue 16, "Scaling out"
// in bench/README.md). On a fresh database (the real migrations) with `--prefill` rows already in events and
// event_dedup, it runs each statement below over the same issue-11 workload rows (random uuid v4 external ids,
// 100,000 subjects, 300-byte properties) in interleaved rounds, each from its own connection, and reports the CPU
// of that connection's server process (/proc/<pid>/stat, so other databases' work on the machine is not counted),
// the wall time and the WAL written, per event:
//   inlet       Inlet's writer (storage/postgres/event-writer.ts): the event_dedup claim and the events insert, on the
//               service's own pool (postgres/pool.ts), which runs the statement prepared (its `inlet:prepare` mark)
//   inlet-unprepared  the same writer on a plain pg pool: the statement parsed and planned at every call, as
//               before the mark
//   raw         the scaling bench's raw baseline: one multi-row INSERT into events (no idempotency key)
//   raw+dedup   the same INSERT after a multi-row INSERT … ON CONFLICT DO NOTHING into event_dedup, one transaction
//   dedup       the event_dedup claim alone
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { Database } from '../src/storage/database.js';
import { openStorage } from '../src/storage/connect.js';
import { parsePostgresUrl } from '../src/storage/postgres/connection-url.js';
import { postgresEventWriter } from '../src/storage/postgres/event-writer.js';
import { createFailoverPool } from '../src/storage/postgres/pool.js';
import type { EventInsert } from '../src/storage/types.js';
import { postgresDatabase } from './database.js';
import { cleanUp, installExitHandlers } from './processes.js';
import { ROW_COLUMNS, externalIdMaker, workloadRowValues } from './workload.js';

const { values } = parseArgs({
  options: {
    database: { type: 'string' },
    batch: { type: 'string' },
    statements: { type: 'string' },
    rounds: { type: 'string' },
    prefill: { type: 'string' },
  },
});
const serverUrl =
  values.database ?? process.env.INLET_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
if (!['127.0.0.1', 'localhost', '[::1]'].includes(new URL(serverUrl).hostname))
  throw new Error('--database must be a server on this machine');
const batch = Number(values.batch ?? 100);
const statements = Number(values.statements ?? 150);
const rounds = Number(values.rounds ?? 3);
const prefill = Number(values.prefill ?? 100_000);
const CLOCK_TICKS = 100;
const PRODUCT = 'prd_pginsert';

function cpuSecondsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

installExitHandlers(rounds * 4 * 120 + 600);
const database = await postgresDatabase(serverUrl);
const migrated = await openStorage(database.url);
await migrated.close();
const nextId = externalIdMaker('random', 'pg-insert');

function rows(n: number, source = 'api'): EventInsert[] {
  return Array.from({ length: n }, () => {
    const v = workloadRowValues(PRODUCT, 'key_pginsert', source, nextId()) as string[];
    return {
      id: v[0]!,
      productId: v[1]!,
      source: v[2]!,
      externalId: v[3]!,
      eventType: v[4]!,
      action: v[5]!,
      canonicalName: v[6]!,
      nameFormat: 'preferred',
      subjectType: v[8]!,
      subjectId: v[9]!,
      occurredAt: v[10]!,
      receivedAt: v[11]!,
      properties: {},
      propertiesJson: v[12]!,
      apiKeyId: v[13]!,
    };
  });
}
const asValues = (list: EventInsert[]) =>
  list.flatMap((r) => [
    r.id,
    r.productId,
    r.source,
    r.externalId,
    r.eventType,
    r.action,
    r.canonicalName,
    r.nameFormat,
    r.subjectType,
    r.subjectId,
    r.occurredAt,
    r.receivedAt,
    r.propertiesJson,
    r.apiKeyId,
  ]);
const keyValues = (list: EventInsert[]) =>
  list.flatMap((r) => [r.productId, r.source, r.externalId, r.id, r.receivedAt]);
const placeholders = (n: number, width: number) =>
  Array.from(
    { length: n },
    (_, r) => `(${Array.from({ length: width }, (_, c) => `$${r * width + c + 1}`).join(', ')})`,
  ).join(', ');
const rawText = `INSERT INTO events (${ROW_COLUMNS.join(', ')}) VALUES ${placeholders(batch, ROW_COLUMNS.length)}`;
const dedupText = `INSERT INTO event_dedup (product_id, source, external_id, event_id, received_at) VALUES ${placeholders(batch, 5)} ON CONFLICT DO NOTHING RETURNING event_id`;

async function connection() {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  return { client, pid };
}

const admin = await connection();
await admin.client.query(`INSERT INTO products (id, name, created_at) VALUES ($1, 'pg-insert bench', now())`, [
  PRODUCT,
]);
// The prefill first: a pooled connection left idle meanwhile would be closed, and its server process with it.
for (let done = 0; done < prefill; done += 1000) {
  const list = rows(Math.min(1000, prefill - done), 'prefill');
  const column = (c: number) => list.map((r) => asValues([r])[c]);
  await admin.client.query(
    `INSERT INTO event_dedup (product_id, source, external_id, event_id, received_at) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::timestamptz[])`,
    [column(1), column(2), column(3), column(0), column(11)],
  );
  await admin.client.query(
    `INSERT INTO events (${ROW_COLUMNS.join(', ')}) SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::json[], $14::text[])`,
    ROW_COLUMNS.map((_, c) => column(c)),
  );
}
await admin.client.query('ANALYZE');
await admin.client.query('CHECKPOINT');

// Inlet's writer on a Kysely of its own one-connection pool: the service's pool (prepared statement) and a plain one.
// Its server process is asked before each run: a pool replaces a connection that was idle for 10 s.
function writerOn(pool: pg.Pool) {
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const pid = async () => (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db)).rows[0]!.pid;
  return { db, pid, writer: postgresEventWriter(db) };
}
const inlet = writerOn(createFailoverPool(parsePostgresUrl(database.url), { max: 1 }).pool);
const unprepared = writerOn(new pg.Pool({ connectionString: database.url, max: 1, idleTimeoutMillis: 0 }));
const raw = await connection();
const rawDedup = await connection();
const dedup = await connection();

const variants: Array<{
  name: string;
  pid: () => Promise<number> | number;
  run: (list: EventInsert[]) => Promise<unknown>;
}> = [
  { name: 'inlet', pid: inlet.pid, run: (list) => inlet.writer.insertMany(list) },
  { name: 'inlet-unprepared', pid: unprepared.pid, run: (list) => unprepared.writer.insertMany(list) },
  {
    name: 'raw',
    pid: () => raw.pid,
    run: (list) => raw.client.query({ name: 'raw', text: rawText, values: asValues(list) }),
  },
  {
    name: 'raw+dedup',
    pid: () => rawDedup.pid,
    run: async (list) => {
      await rawDedup.client.query('BEGIN');
      await rawDedup.client.query({ name: 'dedup', text: dedupText, values: keyValues(list) });
      await rawDedup.client.query({ name: 'raw', text: rawText, values: asValues(list) });
      await rawDedup.client.query('COMMIT');
    },
  },
  {
    name: 'dedup',
    pid: () => dedup.pid,
    run: (list) => dedup.client.query({ name: 'dedup', text: dedupText, values: keyValues(list) }),
  },
];

const totals = new Map<string, { cpu: number; wall: number; wal: number; events: number }>();
// An unmeasured round first: right after the prefill's CHECKPOINT the first statements write the full pages of
// whatever they touch into the WAL, a cost that would fall on whichever variant ran first.
for (const variant of variants) for (let i = 0; i < statements; i++) await variant.run(rows(batch));
for (let round = 0; round < rounds; round++) {
  // Each round starts with the next variant, so that none always follows the same one.
  for (let v = 0; v < variants.length; v++) {
    const variant = variants[(v + round) % variants.length]!;
    const sets = Array.from({ length: statements }, () => rows(batch));
    const lsn = (await admin.client.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!
      .lsn;
    const pid = await variant.pid();
    const cpuBefore = cpuSecondsOf(pid);
    const started = process.hrtime.bigint();
    for (const set of sets) await variant.run(set);
    const wall = Number(process.hrtime.bigint() - started) / 1e9;
    const cpu = cpuSecondsOf(pid) - cpuBefore;
    // Cluster-wide WAL: other databases' writes meanwhile count too (small on a quiet server).
    const wal = Number(
      (await admin.client.query<{ d: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1) AS d', [lsn]))
        .rows[0]!.d,
    );
    const total = totals.get(variant.name) ?? { cpu: 0, wall: 0, wal: 0, events: 0 };
    totals.set(variant.name, {
      cpu: total.cpu + cpu,
      wall: total.wall + wall,
      wal: total.wal + wal,
      events: total.events + statements * batch,
    });
  }
}
process.stdout.write(
  `bench/pg-insert.ts: ${batch} rows per statement, ${statements} statements per variant and round, ${rounds} rounds, ${prefill} rows prefilled\n`,
);
process.stdout.write('| statement | server CPU µs/event | wall µs/event | WAL B/event |\n|---|---:|---:|---:|\n');
for (const [name, t] of totals) {
  process.stdout.write(
    `| ${name} | ${((t.cpu * 1e6) / t.events).toFixed(1)} | ${((t.wall * 1e6) / t.events).toFixed(1)} | ${Math.round(t.wal / t.events)} |\n`,
  );
}
await inlet.db.destroy();
await unprepared.db.destroy();
for (const c of [raw, rawDedup, dedup, admin]) await c.client.end();
await cleanUp();
