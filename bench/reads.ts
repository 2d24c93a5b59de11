// Admin reads and export at size (issue 12): fills one product with --events events straight through the
// storage writer (groups of 5,000), then times the list with each console filter (first page and the page
// after it, newest first, limit 100) through the read service, and an NDJSON export of everything.
//
//   npx tsx bench/reads.ts [--database sqlite|postgres://…] [--events 1000000] [--repeat 15]
//
// Prefill on SQLite runs with synchronous=NORMAL (it is set-up, not the thing measured); on PostgreSQL it ends with
// a VACUUM (ANALYZE) of the events. Received times are spread over 30 days in insertion order, as a live product's
// would be.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { fillSqliteEvents } from './database.js';
import { vacuumPrefilled } from './prefill.js';
import { uuidv7 } from '../src/domain/ids.js';
import { exportText } from '../src/resources/event-export.js';
import { exportPages } from '../src/services/event-export.js';
import { createEventReadService, type EventListParams } from '../src/services/event-read-service.js';
import { openStorage } from '../src/storage/connect.js';
import type { EventInsert } from '../src/storage/types.js';

const { values } = parseArgs({
  options: {
    database: { type: 'string', default: 'sqlite' },
    events: { type: 'string', default: '1000000' },
    repeat: { type: 'string', default: '15' },
    keep: { type: 'boolean', default: false },
  },
});
const total = Number(values.events);
const repeat = Number(values.repeat);

let url: string;
let cleanup: () => Promise<void>;
let postgresSchema: string | undefined;
let sqliteFile: string | undefined;
if (values.database === 'sqlite') {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-reads-'));
  sqliteFile = join(dir, 'inlet.db');
  url = `sqlite:${sqliteFile}`;
  cleanup = async () => rmSync(dir, { recursive: true, force: true });
} else {
  url = values.database!;
  postgresSchema = `reads_bench_${process.pid}`;
  cleanup = async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${postgresSchema} CASCADE`);
    await client.end();
  };
}

const storage = await openStorage(url, {
  sqliteSynchronous: 'normal',
  ...(postgresSchema === undefined ? {} : { postgresSchema }),
});
const productId = 'prod_reads';
await storage.products.create({ id: productId, name: 'reads', createdAt: new Date().toISOString() });
await storage.products.create({ id: 'prod_other', name: 'other', createdAt: new Date().toISOString() });

const NAMES = Array.from({ length: 40 }, (_, i) => [`entity${i % 8}`, `did${Math.floor(i / 8)}`] as const);
const KEYS = ['key_a', 'key_b', 'key_c'];
// The keys exist, as a live product's do: SQLite stores an event's key as the number `key_numbers` gives each key
// when it is created (migration 854), and a key that was never created has none (its events read back without one).
for (const [i, id] of KEYS.entries())
  await storage.apiKeys.create({
    id,
    productId,
    kind: 'events',
    name: id,
    prefix: `inlet_ev_${i}`,
    keyHash: `reads-bench-${id}`,
    createdAt: new Date().toISOString(),
    expiresAt: null,
    revokedAt: null,
    lastUsedAt: null,
  });
const start = Date.now() - 30 * 86_400_000;
const properties = { plan: 'pro', seats: 12, path: '/settings/billing', referrer: 'https://example.com/' };
const propertiesJson = JSON.stringify(properties);
let n = 0;
function row(): EventInsert {
  n++;
  // A skewed name mix: name 0 is ~1/3 of the events, the last names are rare.
  const nameIndex = Math.min(NAMES.length - 1, Math.floor(-Math.log(Math.random()) * 6));
  const [eventType, action] = NAMES[nameIndex]!;
  const at = new Date(start + Math.floor((n / total) * 30 * 86_400_000)).toISOString();
  return {
    id: uuidv7(),
    productId,
    source: n % 20 === 0 ? 'segment' : 'api',
    externalId: crypto.randomUUID(),
    eventType,
    action,
    canonicalName: `${eventType}_${action}`,
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: `user_${Math.floor(Math.random() * 100_000)}`,
    occurredAt: at,
    receivedAt: at,
    properties,
    propertiesJson,
    apiKeyId: KEYS[n % 7 === 0 ? 2 : n % 2]!,
  };
}

const fillStarted = Date.now();
if (sqliteFile !== undefined) {
  // SQLite: straight into the file (bench/database.ts, fillSqliteEvents); rows are made in order, so row()
  // spreads the received times by its own counter.
  fillSqliteEvents(
    sqliteFile,
    total,
    () => {
      const r = row();
      return [
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
      ];
    },
    (filled) => {
      if (process.stderr.isTTY) process.stderr.write(`\rprefill ${filled.toLocaleString('en-US')}`);
    },
  );
} else {
  for (let left = total; left > 0;) {
    const size = Math.min(5000, left);
    left -= size;
    await storage.events.insertMany(Array.from({ length: size }, row));
    if (process.stderr.isTTY) process.stderr.write(`\rprefill ${(total - left).toLocaleString('en-US')}`);
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await vacuumPrefilled(client, postgresSchema);
  } finally {
    await client.end();
  }
}
const fillSeconds = (Date.now() - fillStarted) / 1000;
if (process.stderr.isTTY) process.stderr.write('\n');

const reads = createEventReadService(storage);
const mid = new Date(start + 15 * 86_400_000);
const cases: Array<[string, EventListParams]> = [
  ['no filter', {}],
  ['canonical_name (common, ~1/3)', { canonical_name: 'entity0_did0' }],
  ['canonical_name (rare)', { canonical_name: 'entity7_did4' }],
  ['canonical_name, 3 names', { canonical_name: 'entity1_did0,entity2_did0,entity7_did4' }],
  ['event_type', { event_type: 'entity3' }],
  ['action', { action: 'did1' }],
  ['source (5 %)', { source: 'segment' }],
  ['key_id', { key_id: 'key_c' }],
  ['subject (one user, ~N/100k events)', { subject_type: 'user', subject_id: 'user_4242' }],
  ['user (unknown to identity: its own id)', { user: 'user_777' }],
  ['received last hour', { received_from: new Date(Date.now() - 3_600_000).toISOString() }],
  [
    'received one day, mid-range',
    { received_from: mid.toISOString(), received_to: new Date(mid.getTime() + 86_400_000).toISOString() },
  ],
  [
    'received one day + canonical_name',
    {
      canonical_name: 'entity0_did0',
      received_from: mid.toISOString(),
      received_to: new Date(mid.getTime() + 86_400_000).toISOString(),
    },
  ],
  ['no filter, oldest first', { order: 'asc' }],
];

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

const results: Array<{ case: string; first_p50: number; first_p95: number; next_p50: number; rows: number }> = [];
for (const [name, params] of cases) {
  const first: number[] = [];
  const next: number[] = [];
  let rows = 0;
  for (let i = 0; i < repeat; i++) {
    let t = performance.now();
    const page = await reads.list(productId, { limit: 100, ...params });
    first.push(performance.now() - t);
    rows = page.events.length;
    if (page.nextCursor !== null) {
      t = performance.now();
      await reads.list(productId, { limit: 100, ...params, cursor: page.nextCursor });
      next.push(performance.now() - t);
    }
  }
  first.sort((a, b) => a - b);
  next.sort((a, b) => a - b);
  results.push({
    case: name,
    first_p50: Math.round(percentile(first, 0.5) * 10) / 10,
    first_p95: Math.round(percentile(first, 0.95) * 10) / 10,
    next_p50: next.length === 0 ? 0 : Math.round(percentile(next, 0.5) * 10) / 10,
    rows,
  });
}

const exportCpu = process.cpuUsage();
const exportStarted = performance.now();
let exported = 0;
let bytes = 0;
let peakRss = 0;
for await (const chunk of exportText(
  exportPages(storage, productId, {}, (count) => (exported = count)),
  'ndjson',
)) {
  bytes += Buffer.byteLength(chunk);
  peakRss = Math.max(peakRss, process.memoryUsage().rss);
}
const exportSeconds = (performance.now() - exportStarted) / 1000;
const exportCpuUsed = process.cpuUsage(exportCpu);
const exportCpuMicros = (exportCpuUsed.user + exportCpuUsed.system) / Math.max(exported, 1);

const size = sqliteFile === undefined ? undefined : statSync(sqliteFile).size;
await storage.close();
if (!values.keep) await cleanup();

console.log(
  `database: ${storage.name}, ${total.toLocaleString('en-US')} events in one product (prefill ${fillSeconds.toFixed(0)} s${size === undefined ? '' : `, file ${(size / 1e6).toFixed(0)} MB`})`,
);
console.log('list, newest first unless stated, limit 100, through the read service (no HTTP); ms');
console.log(
  `${'filter'.padEnd(42)} ${'first p50'.padStart(9)} ${'first p95'.padStart(9)} ${'next p50'.padStart(9)} ${'rows'.padStart(5)}`,
);
for (const r of results) {
  console.log(
    `${r.case.padEnd(42)} ${String(r.first_p50).padStart(9)} ${String(r.first_p95).padStart(9)} ${String(r.next_p50).padStart(9)} ${String(r.rows).padStart(5)}`,
  );
}
console.log(
  `export NDJSON (no HTTP, no gzip): ${exported.toLocaleString('en-US')} events, ${(bytes / 1e6).toFixed(0)} MB in ${exportSeconds.toFixed(1)} s = ${Math.round(exported / exportSeconds).toLocaleString('en-US')} events/s wall; ${exportCpuMicros.toFixed(1)} µs CPU/event (= ${Math.round(1e6 / exportCpuMicros).toLocaleString('en-US')} events/s per core); bench process peak RSS ${(peakRss / 1e6).toFixed(0)} MB`,
);
