// `npm run bench:erasure`: issue 18's performance figures (governance.md §5). One Inlet server (a separate
// process, SQLite with synchronous=FULL, `--max-semi-space-size=32` as npm start), a product pre-filled with
// --events events of which --person belong to one person ("victim-1"), then single events sent by
// autocannon (--connections connections, random uuid v4 external ids) for --seconds without a job, and again
// while that person is erased through the admin API, until the job is done. Reports ingest p50/p99 of both,
// their ratio (target ≤ 2×), and how long the job took from the request (target < 60 s at 10 M events).
//
//   npm run bench:erasure -- [--events 1000000] [--person 100000] [--connections 8] [--seconds 10] [--no-build]
//                               [--database sqlite|postgres://user@127.0.0.1:5432/postgres]
//
// With --database (a PostgreSQL server, as `npm run bench -- --database`) the server runs on a fresh database
// created there (CREATE DATABASE inlet_bench_<random>, dropped at the end), prefilled in the server by the
// ingest bench's prefill (bench/prefill.ts: events and event_dedup as the writer stores them, then ANALYZE).
//
// The prefill goes straight into the database file on a second connection (no fsync, big page cache, the
// secondary indexes dropped and rebuilt after: bench/database.ts) while the server is idle: set-up, not the
// thing measured. 10 M events: `npm run bench:erasure -- --events 10000000 --person 100000`.
import { closeSync, copyFileSync, existsSync, fsyncSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { uuidv7 } from '../src/domain/ids.js';
import { adminClient, parseDatabase, SERVER_NODE_FLAG } from './args.js';
import { runLoad, stopLoad, type LoadResult } from './load.js';
import {
  cleanUp,
  freePort,
  installExitHandlers,
  onCleanup,
  startChild,
  waitUntilReady,
  buildServer,
  serverEnv,
} from './processes.js';
import { fillSqliteEvents, postgresDatabase, tempDirectory } from './database.js';
import { prefillPostgres } from './prefill.js';

const ROOT = new URL('..', import.meta.url).pathname;
const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    person: { type: 'string', default: '100000' },
    connections: { type: 'string', default: '8' },
    seconds: { type: 'string', default: '10' },
    'no-build': { type: 'boolean', default: false },
    database: { type: 'string' },
    // Iterating: the first run saves its prefilled database (and the ids and keys to use it) at this path,
    // later runs with the same --events/--person copy it instead of prefilling (minutes at 10 M events).
    template: { type: 'string' },
  },
});
const TOTAL = Number(values.events);
const PERSON = Number(values.person);
const CONNECTIONS = Number(values.connections);
const SECONDS = Number(values.seconds);
if (![TOTAL, PERSON, CONNECTIONS, SECONDS].every((n) => Number.isInteger(n) && n > 0) || PERSON > TOTAL) {
  process.stderr.write(
    'bench: --events, --person, --connections and --seconds must be whole numbers ≥ 1, --person ≤ --events\n',
  );
  process.exit(2);
}
/** --database as the ingest bench reads it (bench/args.ts: "sqlite" or a postgres:// URL on this machine). */
let POSTGRES_SERVER: string | undefined;
try {
  POSTGRES_SERVER = parseDatabase(values.database ?? 'sqlite');
  if (POSTGRES_SERVER !== undefined && values.template !== undefined) throw new Error('--template is for SQLite only');
} catch (error) {
  process.stderr.write(`bench: ${(error as Error).message}\n`);
  process.exit(2);
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The server's /metrics, one number per series, labels parsed (`name` → [{labels, value}]). */
type Scrape = Map<string, Array<{ labels: Record<string, string>; value: number }>>;
async function scrape(base: string): Promise<Scrape> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const series: Scrape = new Map();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) continue;
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)) labels[pair[1]!] = pair[2]!;
    const list = series.get(match[1]!) ?? [];
    list.push({ labels, value: Number(match[3]) });
    series.set(match[1]!, list);
  }
  return series;
}
function value(scraped: Scrape, name: string, labels: Record<string, string> = {}): number {
  const found = scraped.get(name)?.find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return found?.value ?? 0;
}
/** A histogram's change between two scrapes: count, sum, and how many took longer than `over` seconds. */
function histogram(before: Scrape, after: Scrape, name: string, labels: Record<string, string>, over: number) {
  const count = value(after, `${name}_count`, labels) - value(before, `${name}_count`, labels);
  const sum = value(after, `${name}_sum`, labels) - value(before, `${name}_sum`, labels);
  const within =
    value(after, `${name}_bucket`, { ...labels, le: String(over) }) -
    value(before, `${name}_bucket`, { ...labels, le: String(over) });
  return { count, sum, over: count - within };
}
/** What the server saw during one window (event-loop delay since `before` was scraped: prom-client resets it at each scrape). */
function serverSide(before: Scrape, after: Scrape, seconds: number): string[] {
  const ms = (v: number) => (v * 1000).toFixed(1);
  const cpu = value(after, 'inlet_process_cpu_seconds_total') - value(before, 'inlet_process_cpu_seconds_total');
  const commits = histogram(before, after, 'inlet_ingest_commit_duration_seconds', {}, 0.025);
  const writer = histogram(before, after, 'inlet_sqlite_checkpoint_seconds', { by: 'writer' }, 0.01);
  const thread = histogram(before, after, 'inlet_sqlite_checkpoint_seconds', { by: 'thread' }, 0.1);
  const batches = histogram(before, after, 'inlet_erasure_batch_seconds', {}, 0.01);
  return [
    `    event-loop delay p50 ${ms(value(after, 'inlet_nodejs_eventloop_lag_p50_seconds'))} ms, p99 ${ms(value(after, 'inlet_nodejs_eventloop_lag_p99_seconds'))} ms, max ${ms(value(after, 'inlet_nodejs_eventloop_lag_max_seconds'))} ms; server CPU ${((cpu / seconds) * 100).toFixed(0)} % of a core`,
    `    ingest commits ${commits.count}, mean ${commits.count === 0 ? '-' : ms(commits.sum / commits.count)} ms, over 25 ms: ${commits.over}`,
    ...(POSTGRES_SERVER !== undefined
      ? []
      : [
          `    WAL checkpoints on the event loop (writer): ${writer.count}, ${ms(writer.sum)} ms in all, over 10 ms: ${writer.over}, ${value(after, 'inlet_sqlite_checkpoint_frames_total', { by: 'writer' }) - value(before, 'inlet_sqlite_checkpoint_frames_total', { by: 'writer' })} frames copied; by the thread: ${thread.count}, ${thread.sum.toFixed(1)} s in all, over 100 ms: ${thread.over}; WAL at most ${value(after, 'inlet_sqlite_wal_frames_max')} frames since start`,
        ]),
    ...(batches.count === 0
      ? []
      : [
          `    erasure delete batches ${batches.count}, ${batches.sum.toFixed(1)} s in all, mean ${ms(batches.sum / batches.count)} ms, over 10 ms: ${batches.over}`,
        ]),
  ];
}
const load = () => loadavg()[0]!.toFixed(1);

async function main(): Promise<number> {
  installExitHandlers(3600);
  onCleanup(stopLoad);
  const commandLine = `npm run bench:erasure --${process.argv
    .slice(2)
    .map((a) => ` ${a}`)
    .join('')}`;
  process.stdout.write(`${commandLine}\n`);
  if (!values['no-build']) {
    buildServer();
  }
  const dir = tempDirectory();
  const file = join(dir, 'inlet.db');
  const postgres = POSTGRES_SERVER === undefined ? undefined : await postgresDatabase(POSTGRES_SERVER);
  const port = await freePort();
  const template = values.template;
  const saved =
    template !== undefined && existsSync(`${template}.json`)
      ? (JSON.parse(readFileSync(`${template}.json`, 'utf8')) as {
          events: number;
          person: number;
          adminToken: string;
          productId: string;
          key: string;
          persons: number;
        })
      : undefined;
  if (saved !== undefined && (saved.events !== TOTAL || saved.person !== PERSON))
    throw new Error(`--template ${template} holds ${saved.events} events, ${saved.person} of the person`);
  if (saved !== undefined) {
    // Copied and synced before the server starts, so no write-back of the copy competes with the runs.
    copyFileSync(template!, file);
    const fd = openSync(file, 'r+');
    fsyncSync(fd);
    closeSync(fd);
  }
  const adminToken = saved?.adminToken ?? randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const server = startChild(
    'inlet server',
    process.execPath,
    [SERVER_NODE_FLAG, join(ROOT, 'dist/main.js')],
    serverEnv({ port, databaseUrl: postgres?.url ?? `sqlite:${file}`, adminToken }),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const admin = adminClient(base, adminToken);

  const product = saved === undefined ? await admin('POST', '/products', { name: 'bench' }) : { id: saved.productId };
  const key =
    saved === undefined
      ? await admin('POST', `/products/${product.id as string}/keys`, { kind: 'events', name: 'bench' })
      : { id: '', key: saved.key };

  // Prefill: every (TOTAL / PERSON)-th event is the person's, the rest spread over 100,000 subjects.
  const fillStarted = Date.now();
  const progress = (filled: number) => {
    if (process.stderr.isTTY)
      process.stderr.write(`\rprefill ${filled.toLocaleString('en-US')} / ${TOTAL.toLocaleString('en-US')}`);
  };
  const every = Math.max(1, Math.floor(TOTAL / PERSON));
  let person = 0;
  const at = new Date(Date.now() - 86_400_000).toISOString();
  if (postgres !== undefined) {
    // The ingest bench's workload (bench/prefill.ts: 8 names, ~300-byte properties), the person's every `every`-th.
    await prefillPostgres(
      postgres.url,
      TOTAL,
      'random',
      { productId: product.id as string, apiKeyId: key.id as string },
      { subjectId: 'victim-1', every, count: PERSON },
    );
    person = Math.min(PERSON, Math.ceil(TOTAL / every));
  } else if (saved === undefined)
    fillSqliteEvents(
      file,
      TOTAL,
      (i) => {
        const mine = i % every === 0 && person < PERSON;
        if (mine) person++;
        const properties = `{"path":"/pricing","plan":"pro","seats":${i % 50},"referrer":"https://example.com/"}`;
        return [
          uuidv7(),
          product.id,
          'api',
          randomUUID(),
          'page',
          'viewed',
          'page_viewed',
          'preferred',
          'user',
          mine ? 'victim-1' : `user_${i % 100_000}`,
          at,
          at,
          properties,
          key.id,
        ];
      },
      progress,
      true,
    );
  if (process.stderr.isTTY) process.stderr.write('\n');
  const fillSeconds = (Date.now() - fillStarted) / 1000;
  if (saved !== undefined) person = saved.persons;
  process.stdout.write(
    `prefill: ${TOTAL.toLocaleString('en-US')} events (${person.toLocaleString('en-US')} of the person) in ${fillSeconds.toFixed(0)} s${saved === undefined ? '' : ` (copied from ${template})`}\n`,
  );
  if (template !== undefined && saved === undefined) {
    // The prefill ended with a TRUNCATE checkpoint and the server is idle: the file is the whole database.
    copyFileSync(file, template);
    writeFileSync(
      `${template}.json`,
      JSON.stringify({
        events: TOTAL,
        person: PERSON,
        adminToken,
        productId: product.id,
        key: key.key,
        persons: person,
      }),
    );
  }

  const body = () =>
    `{"event":"page_viewed","subject_type":"user","subject_id":"live_${Math.floor(Math.random() * 10_000)}","external_id":"${randomUUID()}","properties":{"path":"/pricing","plan":"pro"}}`;
  const ingest = (seconds: number): Promise<LoadResult> =>
    runLoad(
      {
        url: base,
        path: '/api/v2/events',
        headers: { authorization: `Bearer ${key.key as string}` },
        body,
        connections: CONNECTIONS,
        durationSeconds: seconds,
      },
      201,
    );

  await ingest(2); // warm-up
  const loadWithout = load();
  const beforeWithout = await scrape(base);
  const without = await ingest(SECONDS);
  const afterWithout = await scrape(base);
  process.stdout.write(
    `ingest without a job: ${Math.round(without.requestsPerSecond)} events/s, p50 ${without.p50Ms} ms, p99 ${without.p99Ms} ms (load ${loadWithout})\n`,
  );

  // During: the load runs (up to 15 minutes) until the job is done, then is stopped.
  const loadDuring = load();
  const during = ingest(900);
  await sleep(1000);
  const beforeJob = await scrape(base);
  const requested = Date.now();
  const job = await admin('POST', `/products/${product.id as string}/erasures`, {
    external_id: 'victim-1',
    reason: 'bench',
  });
  const answered = Date.now();
  let status = job;
  while (status.status !== 'done' && status.status !== 'failed') {
    await sleep(200);
    status = await admin('GET', `/products/${product.id as string}/erasures/${job.id as string}`);
  }
  const finished = Date.now();
  const afterJob = await scrape(base);
  stopLoad();
  const withJob = await during;
  const exitCode = await server.stop();
  const ratio = withJob.p99Ms / without.p99Ms;
  const jobSeconds = (finished - requested) / 1000;
  process.stdout.write(
    [
      '',
      `command:  ${commandLine}`,
      `machine:  ${availableParallelism()} cores, node ${process.version}; load average ${loadWithout} before the runs, ${loadDuring} before the job, ${load()} at the end`,
      `database: ${postgres === undefined ? 'SQLite, synchronous=FULL' : postgres.description}, ${TOTAL.toLocaleString('en-US')} events in the product, ${person.toLocaleString('en-US')} of the person`,
      `load:     autocannon, single events (POST /api/v2/events), ${CONNECTIONS} connections, random uuid v4 external ids`,
      '',
      `ingest without a job:  ${Math.round(without.requestsPerSecond)} events/s, p50 ${without.p50Ms} ms, p99 ${without.p99Ms} ms, not ok ${without.errors + without.timeouts + (Object.values(without.statusCounts).reduce((a, b) => a + b, 0) - without.ok)}`,
      `ingest during the job: ${Math.round(withJob.requestsPerSecond)} events/s, p50 ${withJob.p50Ms} ms, p99 ${withJob.p99Ms} ms over ${withJob.seconds} s`,
      '',
      'server side (/metrics), without the job:',
      ...serverSide(beforeWithout, afterWithout, without.seconds),
      'server side, from the request to the job done:',
      ...serverSide(beforeJob, afterJob, (finished - requested) / 1000),
      `    job phases (s): ${(afterJob.get('inlet_erasure_phase_seconds_total') ?? []).map((s) => `${s.labels.phase} ${s.value.toFixed(2)}`).join(', ')}`,
      '',
      `job: ${status.status}, 202 after ${((answered - requested) / 1000).toFixed(2)} s, done ${jobSeconds.toFixed(1)} s after the request; counts ${JSON.stringify(status.counts)}`,
      '',
      'targets (issue 18):',
      `  ${jobSeconds < 60 ? 'PASS' : 'FAIL'}  erasure of the person done in under 60 s (${jobSeconds.toFixed(1)} s${TOTAL < 10_000_000 ? `; the target is for a product of 10 M, this run has ${TOTAL.toLocaleString('en-US')}` : ''})`,
      `  ${ratio <= 2 ? 'PASS' : 'FAIL'}  ingest p99 during the job ≤ 2× without (${ratio.toFixed(2)}×)`,
      `  ${status.status === 'done' && exitCode === 0 ? 'PASS' : 'FAIL'}  job done, server shut down cleanly (exit ${exitCode})`,
      '',
    ].join('\n'),
  );
  return status.status === 'done' && exitCode === 0 ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (error) {
  process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
} finally {
  await cleanUp();
}
process.exit(code);
