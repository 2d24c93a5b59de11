// The prefill of `npm run bench -- --prefill N` (issue 11): N events of the bench workload (workload.ts:
// random / v7 / sequential external ids, 100,000 subjects, 8 names, 300-byte properties, source "api", the
// bench's product and key) written into the server's database from the bench process while the server is
// idle. Set-up, not the thing measured, so it goes the fast way:
// - SQLite: a second connection (bench/database.ts, fillSqliteEvents: no fsync, 2 GB page cache). With
//   `rebuild` the secondary indexes are dropped first and built again at the end (a sort instead of N random
//   B-tree inserts; 10 M in minutes instead of ~20). A rebuilt index is packed denser than one grown by random
//   inserts, so the file is smaller than an organically grown one until the run's inserts split its pages:
//   `--prefill-indexes keep` fills with the indexes in place (slow, organic).
// - PostgreSQL: INSERT … SELECT FROM generate_series in the server, 50,000 rows a statement, into
//   event_dedup and events in one statement (as the writer does).
// Received times are spread over the day before the run, rising in insertion order, and shared by each
// `perRequest` events in a row (`--batch-size`, BATCH_SIZE by default): the service gives the events of one request
// one received time, in whole milliseconds, and PostgreSQL's B-tree deduplication packs `events_by_time` by that.
// Event ids are UUIDv7 of their receive time as the service makes them: within one request the same millisecond and
// a rising 12-bit counter. On a PostgreSQL table that already holds events (`--compare-empty`) the times run from just
// after the newest stored event to now instead. Either way the prefill's rows go at the end of the primary key and of
// `events_by_time`, as the service's would, so the bytes per event it leaves are the service's (docs/design.md, "How
// the benches are set up", has what the other choices cost).
// Postgres: event ids built in SQL (48 bits of milliseconds, version 7, the event's place in its request as the
// 12-bit counter, the rest from a random uuid, its variant bits included); v7 external ids as bench/workload.ts's.
import BetterSqlite3 from 'better-sqlite3';
import { request as httpRequest } from 'node:http';
import pg from 'pg';
import { fillSqliteEvents } from './database.js';
import {
  BATCH_SIZE,
  EVENT_NAMES,
  OCCURRED_AT,
  PROPERTIES_TEMPLATE,
  SUBJECTS,
  externalIdMaker,
  workloadEventJson,
  workloadRowValues,
  type IdKind,
} from './workload.js';

export interface PrefillTarget {
  productId: string;
  apiKeyId: string;
}

const DAY_MS = 86_400_000;

function progress(filled: number, total: number): void {
  if (process.stderr.isTTY)
    process.stderr.write(`\rprefill ${filled.toLocaleString('en-US')} / ${total.toLocaleString('en-US')}`);
}

/** The received time of the `i`-th of `total` events from `from` over `span` ms: one per request of `perRequest`. */
function receivedAtOf(i: number, total: number, perRequest: number, from: number, span: number): number {
  return from + Math.floor(((i - (i % perRequest)) / total) * span);
}

export function prefillSqlite(
  file: string,
  total: number,
  ids: IdKind,
  target: PrefillTarget,
  rebuild: boolean,
  perRequest = BATCH_SIZE,
): void {
  const externalId = externalIdMaker(ids, 'prefill');
  const from = Date.now() - DAY_MS;
  let dropped: Array<{ name: string; sql: string }> = [];
  if (rebuild) {
    const db = new BetterSqlite3(file);
    try {
      dropped = db
        .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL`)
        .all() as typeof dropped;
      for (const index of dropped) db.exec(`DROP INDEX ${index.name}`);
    } finally {
      db.close();
    }
  }
  fillSqliteEvents(
    file,
    total,
    (i) => {
      const at = receivedAtOf(i, total, perRequest, from, DAY_MS);
      return workloadRowValues(target.productId, target.apiKeyId, 'api', externalId(at), at);
    },
    (filled) => progress(filled, total),
  );
  if (rebuild) {
    const db = new BetterSqlite3(file);
    try {
      db.pragma('cache_size = -1000000');
      for (const index of dropped) {
        if (process.stderr.isTTY) process.stderr.write(`\rprefill: building ${index.name}          `);
        db.exec(index.sql);
      }
    } finally {
      db.close();
    }
  }
  if (process.stderr.isTTY) process.stderr.write('\n');
}

/** One person among the prefilled events (bench/erasure.ts): every `every`-th event, up to `count`, is theirs. */
export interface PrefillPerson {
  subjectId: string;
  every: number;
  count: number;
}

/**
 * Ends a PostgreSQL prefill: the events and their idempotency keys vacuumed as well as analysed. Rows written over
 * weeks would have been vacuumed by autovacuum as they came, while millions written in minutes leave it a vacuum of
 * the whole table to run beside the measured runs. `schema`: the tables' schema, when not on the search path.
 */
export async function vacuumPrefilled(client: pg.Client, schema?: string): Promise<void> {
  for (const table of ['events', 'event_dedup'])
    await client.query(`VACUUM (ANALYZE) ${schema === undefined ? '' : `${schema}.`}${table}`);
}

export async function prefillPostgres(
  url: string,
  total: number,
  ids: IdKind,
  target: PrefillTarget,
  person?: PrefillPerson,
  perRequest = BATCH_SIZE,
): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const [p0, p1, p2, p3] = PROPERTIES_TEMPLATE.split('%s');
  const newest =
    (await client.query<{ at: Date | null }>('SELECT max(received_at) AS at FROM events')).rows[0]?.at ?? null;
  const now = Date.now();
  const fromMs = newest === null || newest.getTime() >= now ? now - DAY_MS : newest.getTime() + 1;
  const from = new Date(fromMs).toISOString();
  const spanMs = now - fromMs;
  const externalId =
    ids === 'random'
      ? 'gen_random_uuid()::text'
      : ids === 'v7'
        ? `(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 16, 3) || '-' || substr(r, 20, 4) || '-' || substr(r, 25, 12))`
        : `'prefill-' || g`;
  try {
    await client.query('SET synchronous_commit = off');
    for (let at = 0; at < total; at += 50_000) {
      const end = Math.min(total, at + 50_000);
      await client.query(
        `WITH input AS MATERIALIZED (
           SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || sub || '-' || substr(e, 20, 4) || '-' || substr(e, 25, 12))::uuid AS id,
                  ${externalId} AS external_id, k, subject_id, received_at, properties
             FROM (
               SELECT g, floor(random() * ${EVENT_NAMES.length})::int + 1 AS k,
                      CASE WHEN $13::text IS NOT NULL AND g % $14 = 0 AND g / $14 < $15 THEN $13
                           ELSE 'user_' || floor(random() * ${SUBJECTS})::int END AS subject_id,
                      received_at,
                      lpad(to_hex(floor(extract(epoch FROM received_at) * 1000)::bigint + g % $17 / 4096), 12, '0') AS h,
                      -- rand_a: the event's place in its request, as the service's 12-bit counter (past 4096 the
                      -- next millisecond, as src/domain/ids.ts).
                      lpad(to_hex((g % $17 % 4096)::int), 3, '0') AS sub,
                      gen_random_uuid()::text AS r,
                      gen_random_uuid()::text AS e,
                      $3 || substr(md5(random()::text), 1, 8) || $4 || substr(md5(random()::text), 1, 8) || $5 || md5(random()::text) || $6 AS properties
                 FROM generate_series($1::bigint, $2::bigint - 1) g,
                      LATERAL (SELECT $7::timestamptz + floor((g - g % $17)::float8 / $8 * $16) * interval '1 millisecond' AS received_at) t
             ) s
         ), claimed AS (
           INSERT INTO event_dedup (product_id, key_hash, event_id, received_at)
           SELECT $9, inlet_event_dedup_key('api', external_id), id, received_at FROM input
         )
         INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format,
                             subject_type, subject_id, occurred_at, received_at, properties, api_key_id)
         SELECT id, $9, 'api', external_id, ($11::text[])[k], ($12::text[])[k], ($11::text[])[k] || '_' || ($12::text[])[k], 0,
                'user', subject_id, '${OCCURRED_AT}', received_at, properties::json, $10
           FROM input`,
        [
          at,
          end,
          p0,
          p1,
          p2,
          p3,
          from,
          total,
          target.productId,
          target.apiKeyId,
          EVENT_NAMES.map((n) => n[0]),
          EVENT_NAMES.map((n) => n[1]),
          person?.subjectId ?? null,
          person?.every ?? 1,
          person?.count ?? 0,
          spanMs,
          perRequest,
        ],
      );
      progress(end, total);
    }
    await vacuumPrefilled(client);
  } finally {
    await client.end();
  }
  if (process.stderr.isTTY) process.stderr.write('\n');
}

/**
 * SQLite: the prefill merged millions of keys behind the running server, so its next write starts building its
 * key filter again from event_keys (src/storage/sqlite/event-keys.ts), which a restarted server would do at
 * start-up. One event starts it (counted as acknowledged when answered 201); the runs begin once
 * `inlet_sqlite_event_key_filter_bytes` is above 0.
 */
export async function awaitKeyFilter(base: string, headers: Record<string, string>): Promise<number> {
  const started = Date.now();
  // Each request on a connection of its own: the keep-alive connections left from before the prefill were closed
  // by the server while it was idle (a POST on one failed with EPIPE, and fetch does not send a POST again).
  const status = await fresh(
    `${base}/api/v2/events`,
    'POST',
    { ...headers, 'content-type': 'application/json' },
    workloadEventJson(`filter-${Date.now()}`),
  );
  for (;;) {
    const text = (await fresh(`${base}/metrics`, 'GET', {})).body;
    const bytes = Number(/^inlet_sqlite_event_key_filter_bytes ([0-9.e+-]+)$/m.exec(text)?.[1] ?? NaN);
    if (!(bytes === 0) || Date.now() - started > 300_000) {
      process.stdout.write(
        `key filter: ${Number.isFinite(bytes) ? `${(bytes / 1e6).toFixed(1)} MB, ` : ''}ready ${((Date.now() - started) / 1000).toFixed(1)} s after the prefill\n`,
      );
      return status.status === 201 ? 1 : 0;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** One HTTP request on a new connection (no agent, no keep-alive). */
export function fresh(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method, headers, agent: false }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
      );
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}
