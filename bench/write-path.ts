// The storage write path alone: rows through the real event writer (storage.events.insertMany), in
// groups, as the group-commit writer hands them over. No HTTP, no load generator: on a shared,
// loaded machine this is the steadier way to compare two versions of the table (e.g. with and without
// the commit position). Prints one JSON line: events/s (wall) and CPU µs per event of this process
// (PostgreSQL's own CPU is not in it).
//
//   npx tsx bench/write-path.ts [--database sqlite|postgres://…] [--events 200000] [--group 400] [--prefill 0]
//        [--ids random|v7|sequential] [--variants all,-events_dedup,-events_by_subject,all@inline] [--rounds 1]
//
// Issue 11: on SQLite `--prefill` fills fast (bench/prefill.ts: a second connection, indexes rebuilt after),
// and `--variants` measures the write path with each listed set of indexes: `all`, or `-a-b` for all but a
// and b, or `+a+b` for only a and b (plus the rowid). The variants run in `--rounds` interleaved rounds on one
// file (indexes dropped and built again between them, not timed); one JSON line per measurement, then medians.
// A variant may end in `@inline`: the storage then checkpoints the WAL in the committing call (SQLite's
// default) instead of in its checkpoint thread (src/storage/sqlite/checkpointer.ts); `@cache=65536` sets the
// page cache in KiB; both: `all@inline@cache=65536`; `@synccommit` syncs the WAL inside COMMIT on the event loop
// (before sqlite/wal-sync.ts); `@tail=N` merges the idempotency keys every N events (sqlite/event-keys.ts). `--keep` keeps the SQLite file, `--file <path>` writes into
// a kept one (no new prefill unless `--prefill`). `--settle`: the clock stops only once the SQLite index merges
// (and moves) that the writes started have ended, so that a run pays for all the background work it caused.
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { uuidv7 } from '../src/domain/ids.js';
import { dialectOf, openStorage } from '../src/storage/connect.js';
import type { EventInsert } from '../src/storage/types.js';
import BetterSqlite3 from 'better-sqlite3';
import { prefillSqlite } from './prefill.js';
import { externalIdMaker, randomProperties, type IdKind } from './workload.js';
import { median } from './report.js';

const { values } = parseArgs({
  options: {
    database: { type: 'string', default: 'sqlite' },
    events: { type: 'string', default: '200000' },
    group: { type: 'string', default: '400' },
    prefill: { type: 'string', default: '0' },
    concurrency: { type: 'string', default: '4' },
    ids: { type: 'string', default: 'random' },
    variants: { type: 'string', default: 'all' },
    rounds: { type: 'string', default: '1' },
    file: { type: 'string' },
    'page-size': { type: 'string' },
    keep: { type: 'boolean', default: false },
    settle: { type: 'boolean', default: false },
  },
});
const ids = values.ids as IdKind;
const nextExternalId = externalIdMaker(ids, `wp${process.pid}`);
const total = Number(values.events);
const group = Number(values.group);
const prefill = Number(values.prefill);

let url: string;
let sqliteFile: string | undefined;
let cleanup: () => Promise<void>;
let postgresSchema: string | undefined;
if (values.file !== undefined) {
  // A file kept from an earlier run (`--keep`): prefilled already; nothing is removed at the end.
  sqliteFile = values.file;
  url = `sqlite:${sqliteFile}`;
  cleanup = async () => {};
} else if (values.database === 'sqlite') {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-write-path-'));
  sqliteFile = join(dir, 'inlet.db');
  url = `sqlite:${sqliteFile}`;
  cleanup = async () => rmSync(dir, { recursive: true, force: true });
} else {
  url = values.database!;
  postgresSchema = `write_path_${process.pid}_${Date.now()}`;
  cleanup = async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${postgresSchema} CASCADE`);
    await client.end();
  };
}

if (values['page-size'] !== undefined && sqliteFile !== undefined && values.file === undefined) {
  // A new file with another page size (set before the first table; SQLite's default is 4,096).
  const db = new BetterSqlite3(sqliteFile);
  db.pragma(`page_size = ${Number(values['page-size'])}`);
  db.exec('VACUUM');
  db.close();
}
let storage = await openStorage(url, postgresSchema === undefined ? {} : { postgresSchema });
const productId = 'prod_bench';
if (values.file === undefined)
  await storage.products.create({ id: productId, name: 'bench', createdAt: new Date().toISOString() });

const properties = {
  plan: 'pro',
  seats: 12,
  path: '/settings/billing',
  referrer: 'https://example.com/',
  flags: ['a', 'b'],
};
let n = 0;
function row(): EventInsert {
  n++;
  return {
    id: uuidv7(),
    productId,
    source: 'api',
    externalId: nextExternalId(),
    eventType: 'project',
    action: n % 3 === 0 ? 'created' : 'viewed',
    canonicalName: n % 3 === 0 ? 'project.created' : 'project.viewed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: `user_${Math.floor(Math.random() * 100_000)}`,
    occurredAt: new Date().toISOString(),
    receivedAt: new Date().toISOString(),
    properties,
    propertiesJson: randomProperties(),
    apiKeyId: 'key_bench',
  };
}

async function write(count: number): Promise<void> {
  // SQLite: two groups in flight, as the service allows (one is written while the other's WAL sync runs, off
  // the event loop); PostgreSQL gets `concurrency`.
  const lanes = dialectOf(url) === 'sqlite' ? 2 : Number(values.concurrency);
  let left = count;
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (left > 0) {
        const size = Math.min(group, left);
        left -= size;
        await storage.events.insertMany(Array.from({ length: size }, row));
        // As the group-commit writer, which starts every commit from setImmediate: timers and messages (the
        // checkpoint thread's) run between commits, not only microtasks.
        await new Promise((resolve) => setImmediate(resolve));
      }
    }),
  );
}

if (prefill > 0 && sqliteFile !== undefined) {
  const started = Date.now();
  prefillSqlite(sqliteFile, prefill, ids, { productId, apiKeyId: 'key_bench' }, true);
  process.stderr.write(`prefill ${prefill} in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
} else if (prefill > 0) await write(prefill);

/** SQLite: the index definitions of events, to drop and build again per variant. */
const indexes = new Map<string, string>();
if (sqliteFile !== undefined) {
  const db = new BetterSqlite3(sqliteFile);
  for (const row of db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL`)
    .all() as Array<{ name: string; sql: string }>)
    indexes.set(row.name, row.sql);
  db.close();
}

function wanted(variant: string): Set<string> {
  if (variant === 'all') return new Set(indexes.keys());
  const names = variant.split(/(?=[+-])/).map((part) => part.slice(1));
  for (const name of names)
    if (!indexes.has(name)) throw new Error(`no index ${name} on events (have ${[...indexes.keys()].join(', ')})`);
  return variant.startsWith('+')
    ? new Set(names)
    : new Set([...indexes.keys()].filter((name) => !names.includes(name)));
}

function applyVariant(variant: string): void {
  if (sqliteFile === undefined) {
    if (variant !== 'all') throw new Error('--variants is for SQLite only');
    return;
  }
  const keep = wanted(variant);
  const db = new BetterSqlite3(sqliteFile);
  try {
    db.pragma('cache_size = -1000000');
    const present = new Set(
      (
        db
          .prepare(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL`)
          .all() as Array<{ name: string }>
      ).map((r) => r.name),
    );
    for (const name of present) if (!keep.has(name)) db.exec(`DROP INDEX ${name}`);
    for (const name of keep) if (!present.has(name)) db.exec(indexes.get(name)!);
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
}

const variants = values.variants!.split(',');
const results = new Map<
  string,
  Array<{ eventsPerSecond: number; cpuMicrosPerEvent: number; mainThreadCpuMicrosPerEvent: number; walMB: number }>
>();
for (let round = 1; round <= Number(values.rounds); round++) {
  for (const variant of variants) {
    const [indexSet, ...flags] = variant.split('@');
    applyVariant(indexSet!);
    if (sqliteFile !== undefined) {
      // A fresh storage per measurement, with the variant's options (`@inline`: WAL checkpoints in the commit,
      // SQLite's default, instead of the checkpoint thread).
      await storage.close();
      const cache = flags.find((flag) => flag.startsWith('cache='));
      const tail = flags.find((flag) => flag.startsWith('tail='));
      storage = await openStorage(url, {
        sqliteCheckpointThread: !flags.includes('inline'),
        sqliteSyncOffLoop: !flags.includes('synccommit'),
        ...(cache === undefined ? {} : { sqliteCacheKib: Number(cache.slice(6)) }),
        ...(tail === undefined ? {} : { sqliteEventKeysTail: Number(tail.slice(5)) }),
      });
    }
    // SQLite: the key and subject tails rebuilt and the key filter built before the clock starts, as the server
    // does at start-up (a build takes seconds at 10 M keys).
    await storage.capabilities.eventIndexes?.warm();
    const cpu = process.cpuUsage();
    const ioBefore = processIo();
    const indexesBefore = indexWork();
    const mainBefore = mainThreadCpuSeconds();
    const started = process.hrtime.bigint();
    await write(total);
    // `--settle`: the clock stops once the index merges started by these writes have ended too (SQLite).
    if (values.settle) await storage.capabilities.eventIndexes?.settle();
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const used = process.cpuUsage(cpu);
    const main = mainThreadCpuSeconds() - mainBefore;
    const io = processIo();
    const indexes = indexWork();
    const figures = {
      eventsPerSecond: Math.round(total / seconds),
      cpuMicrosPerEvent: Math.round(((used.user + used.system) / total) * 100) / 100,
      // The main thread alone (the event loop in the server); the rest is the checkpoint thread's.
      mainThreadCpuMicrosPerEvent: Math.round(((main * 1e6) / total) * 100) / 100,
      // Bytes this process wrote (write calls: WAL frames, checkpoint copies) and caused to be written to the disk.
      writtenBytesPerEvent: Math.round((io.wchar - ioBefore.wchar) / total),
      diskBytesPerEvent: Math.round((io.writeBytes - ioBefore.writeBytes) / total),
      // SQLite: merges (and moves) of the key and subject indexes, and the time they held the event loop.
      merges: indexes.merges - indexesBefore.merges,
      moves: indexes.moves - indexesBefore.moves,
      indexBusySeconds: Math.round((indexes.busySeconds - indexesBefore.busySeconds) * 100) / 100,
      walMB:
        sqliteFile === undefined || !existsSync(`${sqliteFile}-wal`)
          ? 0
          : Math.round(statSync(`${sqliteFile}-wal`).size / 1e6),
    };
    results.set(variant, [...(results.get(variant) ?? []), figures]);
    process.stdout.write(
      `${JSON.stringify({ database: storage.name, ids, round, variant, events: total, group, prefill, ...figures })}\n`,
    );
  }
}
await storage.close();
if (values.keep && sqliteFile !== undefined) process.stderr.write(`kept ${sqliteFile} (use --file ${sqliteFile})\n`);
else await cleanup();
/** CPU seconds of this process's main thread (Linux /proc; 10 ms resolution). */
/** /proc/self/io: bytes passed to write calls, and bytes the process caused to be written to the disk. */
function processIo(): { wchar: number; writeBytes: number } {
  try {
    const text = readFileSync('/proc/self/io', 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
    return { wchar: field('wchar'), writeBytes: field('write_bytes') };
  } catch {
    return { wchar: NaN, writeBytes: NaN };
  }
}

/** Both SQLite hash indexes together (zeros on PostgreSQL); `moves` is 0 where the storage has no levels. */
function indexWork(): { merges: number; moves: number; busySeconds: number } {
  const { telemetry } = storage.capabilities;
  const all = [telemetry.eventKeyStats?.(), telemetry.eventSubjectStats?.()];
  const sum = (pick: (stats: NonNullable<(typeof all)[number]>) => number | undefined) =>
    all.reduce((total, stats) => total + (stats === undefined ? 0 : (pick(stats) ?? 0)), 0);
  return {
    merges: sum((s) => s.merges),
    moves: sum((s) => (s as { moves?: number }).moves),
    busySeconds: sum((s) => s.busySeconds),
  };
}

function mainThreadCpuSeconds(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

for (const [variant, list] of results) {
  process.stdout.write(
    `median ${variant}: ${median(list.map((r) => r.eventsPerSecond))} events/s, ${median(list.map((r) => r.cpuMicrosPerEvent))} µs CPU/event, main thread ${median(list.map((r) => r.mainThreadCpuMicrosPerEvent))} (${list.length} rounds; load ${loadavg()[0]!.toFixed(1)})\n`,
  );
}
