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
//   copy        issue 35's COPY against the writer's unnest: the rows COPYed (binary) into a temporary table, then
//               one statement claims the keys and inserts the events from it, as the writer's does from its arrays
//               (two round trips a group; the claim in byte order of its keys, the events in request order)
//   raw-copy    the raw baseline's rows COPYed (binary) straight into events (no idempotency key)
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { nameFormatCode, nameFormatCodeSql, type Database } from '../src/storage/database.js';
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
    // As the writer stores it (migration 857).
    nameFormatCode(r.nameFormat),
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
// The key as the writer claims it since migration 851: a digest of the source and the external id.
const dedupText = `INSERT INTO event_dedup (product_id, key_hash, event_id, received_at) VALUES ${Array.from(
  { length: batch },
  (_, r) =>
    `($${r * 5 + 1}, inlet_event_dedup_key($${r * 5 + 2}::text, $${r * 5 + 3}::text), $${r * 5 + 4}::uuid, $${r * 5 + 5}::timestamptz)`,
).join(', ')} ON CONFLICT DO NOTHING RETURNING event_id`;

async function connection() {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  return { client, pid };
}

/** The binary COPY format (PostgreSQL's "Binary Format" of COPY): a header, then per row its field count and each
 *  field as a length and its bytes (-1: NULL), then -1. */
class BinaryRows {
  private parts: Buffer[] = [Buffer.from('PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0', 'latin1')];
  private field(bytes: Buffer | null): void {
    const length = Buffer.alloc(4);
    length.writeInt32BE(bytes === null ? -1 : bytes.length);
    this.parts.push(length);
    if (bytes !== null) this.parts.push(bytes);
  }
  row(fields: number): this {
    const count = Buffer.alloc(2);
    count.writeInt16BE(fields);
    this.parts.push(count);
    return this;
  }
  text(value: string | null | undefined): this {
    this.field(value == null ? null : Buffer.from(value, 'utf8'));
    return this;
  }
  uuid(value: string): this {
    this.field(Buffer.from(value.replace(/-/g, ''), 'hex'));
    return this;
  }
  /** timestamptz: microseconds since 2000-01-01 UTC. */
  time(iso: string): this {
    const bytes = Buffer.alloc(8);
    bytes.writeBigInt64BE(BigInt(Date.parse(iso) - 946_684_800_000) * 1000n);
    this.field(bytes);
    return this;
  }
  int2(value: number): this {
    const bytes = Buffer.alloc(2);
    bytes.writeInt16BE(value);
    this.field(bytes);
    return this;
  }
  finish(): Buffer {
    return Buffer.concat([...this.parts, Buffer.from([0xff, 0xff])]);
  }
}
/** The events' fields in ROW_COLUMNS order, the name format as text (`text`) or as its stored number. */
function encodeRows(list: EventInsert[], nameFormat: 'text' | 'number'): Buffer {
  const out = new BinaryRows();
  for (const r of list) {
    out.row(ROW_COLUMNS.length).uuid(r.id).text(r.productId).text(r.source).text(r.externalId);
    out.text(r.eventType).text(r.action).text(r.canonicalName);
    if (nameFormat === 'text') out.text(r.nameFormat);
    else out.int2(nameFormatCode(r.nameFormat) as number);
    out.text(r.subjectType).text(r.subjectId).time(r.occurredAt!).time(r.receivedAt);
    out.text(r.propertiesJson).text(r.apiKeyId);
  }
  return out.finish();
}
async function copyInto(client: pg.Client, target: string, rows: Buffer): Promise<void> {
  await pipeline(
    Readable.from([rows]),
    client.query(copyFrom(`COPY ${target} (${ROW_COLUMNS.join(', ')}) FROM STDIN (FORMAT binary)`)),
  );
}
// The writer's statement over a temporary table instead of its unnest arrays: the same claim and insert.
const STAGE_COLUMNS = ROW_COLUMNS.map((c) =>
  c === 'name_format' ? `${nameFormatCodeSql('s.name_format')} AS name_format` : `s.${c}`,
);
const copyInsertText = `WITH claimed AS (
    INSERT INTO event_dedup (product_id, key_hash, event_id, received_at)
    SELECT product_id, inlet_event_dedup_key(source, external_id), id, received_at
      FROM inlet_stage WHERE external_id IS NOT NULL
     ORDER BY product_id COLLATE "C", source COLLATE "C", external_id COLLATE "C"
    ON CONFLICT DO NOTHING
    RETURNING event_id
  )
    INSERT INTO events (${ROW_COLUMNS.join(', ')})
    SELECT ${STAGE_COLUMNS.join(', ')} FROM inlet_stage s
     WHERE s.external_id IS NULL OR s.id IN (SELECT event_id FROM claimed)
     ORDER BY s.n
    RETURNING id`;

const admin = await connection();
await admin.client.query(`INSERT INTO products (id, name, created_at) VALUES ($1, 'pg-insert bench', now())`, [
  PRODUCT,
]);
// The prefill first: a pooled connection left idle meanwhile would be closed, and its server process with it.
for (let done = 0; done < prefill; done += 1000) {
  const list = rows(Math.min(1000, prefill - done), 'prefill');
  const column = (c: number) => list.map((r) => asValues([r])[c]);
  await admin.client.query(
    `INSERT INTO event_dedup (product_id, key_hash, event_id, received_at) SELECT p, inlet_event_dedup_key(s, e), id, r FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::timestamptz[]) AS k(p, s, e, id, r)`,
    [column(1), column(2), column(3), column(0), column(11)],
  );
  await admin.client.query(
    `INSERT INTO events (${ROW_COLUMNS.join(', ')}) SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int2[], $9::text[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::json[], $14::text[])`,
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
const copying = await connection();
await copying.client.query(
  `CREATE TEMPORARY TABLE inlet_stage (id uuid, product_id text, source text, external_id text, event_type text,
     action text, canonical_name text, name_format text, subject_type text, subject_id text, occurred_at timestamptz,
     received_at timestamptz, properties json, api_key_id text, n int8 GENERATED ALWAYS AS IDENTITY)
   ON COMMIT DELETE ROWS`,
);
const rawCopying = await connection();

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
  {
    name: 'copy',
    pid: () => copying.pid,
    run: async (list) => {
      // One transaction: the temporary table is emptied at its commit (ON COMMIT DELETE ROWS truncates it, where a
      // DELETE would leave dead rows that no autovacuum ever removes from a temporary table).
      await copying.client.query('BEGIN');
      await copyInto(copying.client, 'inlet_stage', encodeRows(list, 'text'));
      const inserted = await copying.client.query({ name: 'copy-insert', text: copyInsertText });
      await copying.client.query('COMMIT');
      if (inserted.rowCount !== list.length)
        throw new Error(`copy: ${inserted.rowCount} of ${list.length} rows stored`);
    },
  },
  {
    name: 'raw-copy',
    pid: () => rawCopying.pid,
    run: (list) => copyInto(rawCopying.client, 'events', encodeRows(list, 'number')),
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
for (const c of [raw, rawDedup, dedup, copying, rawCopying, admin]) await c.client.end();
await cleanUp();
