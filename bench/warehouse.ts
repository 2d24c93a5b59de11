// `npm run bench:warehouse`: issue 34's figures for the PostgreSQL warehouse destination, against one Inlet
// server (SQLite by default, or --database postgres://…) and a fresh warehouse database on the local PostgreSQL:
// 1. ingest at full load in interleaved rounds without and with a warehouse destination (ratio: within 10 %?),
//    each run after `--warmup` seconds (default 2) of unmeasured load, as in the destinations bench, and the
//    delivery worker started and warmed by a destination deleted before the first round; each round's
//    destination creates its tables when it is created,
//    with the server's and the warehouse backends' CPU per ingested event (until the backlog is loaded); every
//    other round starts with the destination. Beside the ratio of the best of each (the target), each round's
//    ratio, with their median and range;
// 2. ingest paced at half the peak measured in step 1 with the destination: the warehouse lag, sampled every
//    second as the age of the newest loaded event and as messages behind (< 10 s?);
// 3. every stored event is in the warehouse once;
// 4. the same half load with a Parquet destination (max_wait_ms 2000): how old the newest event in the files
//    is, sampled every second with DuckDB (files within max_wait_ms?). See bench/README.md ("Warehouses").
// Before step 1, `--prefill` events (default 1,000,000; 0: none) are written into Inlet's store as the ingest bench
// does, so that the rounds run on a table that is not new: the first round on an empty table was the fastest run
// of all by a fifth to a third, and the target line compares the best of each.
// `--dist <dir>` runs another build of the server (a folder beside dist/, for before and after; with --no-build).
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DuckDBInstance } from '@duckdb/node-api';
import pg from 'pg';
import { adminClient, parseDatabase, SERVER_NODE_FLAG } from './args.js';
import { postgresDatabase, sqliteDatabase, tempDirectory } from './database.js';
import { runLoad, stopLoad } from './load.js';
import {
  cpuSeconds,
  freePort,
  installExitHandlers,
  postgresCpuMeter,
  onCleanup,
  startChild,
  waitUntilReady,
  buildServer,
  runBench,
  serverEnv,
} from './processes.js';
import { awaitKeyFilter, prefillPostgres, prefillSqlite } from './prefill.js';
import { ExternalIds, batchJson } from './workload.js';
import { inRoundOrder, median } from './report.js';

const ROOT = new URL('..', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

const { values } = parseArgs({
  options: {
    database: { type: 'string' },
    warehouse: { type: 'string' },
    rounds: { type: 'string' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    connections: { type: 'string' },
    'batch-size': { type: 'string' },
    'max-messages': { type: 'string' },
    'no-build': { type: 'boolean' },
    'file-wait': { type: 'string' },
    dist: { type: 'string' },
    prefill: { type: 'string' },
  },
  strict: true,
});
const rounds = Number(values.rounds ?? 2);
const durationSeconds = Number(values.duration ?? 8);
const warmupSeconds = Number(values.warmup ?? 2);
const connections = Number(values.connections ?? 16);
const batchSize = Number(values['batch-size'] ?? 100);
const maxMessages = Number(values['max-messages'] ?? 1000);
const fileWaitMs = Number(values['file-wait'] ?? 2000);
const prefill = Number(values.prefill ?? 1_000_000);
if (!Number.isInteger(prefill) || prefill < 0)
  throw new Error(`--prefill: a whole number of events, not "${values.prefill}"`);
/** The server the warehouse database is made on (never the one Inlet stores in, when that is PostgreSQL too). */
const warehouseServer = values.warehouse ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function main(): Promise<void> {
  installExitHandlers(rounds * 2 * (warmupSeconds + durationSeconds + 60) + 300 + prefill / 10_000);
  onCleanup(stopLoad);
  process.stdout.write(
    `npm run bench:warehouse --${process.argv
      .slice(2)
      .map((a) => ` ${a}`)
      .join('')}\n`,
  );
  if (values['no-build'] !== true) {
    buildServer();
  }
  const dir = tempDirectory();
  const storeUrl = parseDatabase(values.database ?? 'sqlite');
  const database = storeUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(storeUrl);
  const warehouse = await postgresDatabase(warehouseServer);
  process.stdout.write(`inlet: ${database.description}\nwarehouse: ${warehouse.description}\n`);
  const wh = new pg.Pool({ connectionString: warehouse.url, max: 2 });
  onCleanup(() => wh.end());
  const port = await freePort();
  const adminToken = randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const server = startChild(
    'inlet server',
    process.execPath,
    [SERVER_NODE_FLAG, join(ROOT, values.dist ?? 'dist', 'main.js')],
    serverEnv(
      { port, databaseUrl: database.url, adminToken, outbound: true },
      { INLET_FILE_DESTINATIONS_ROOT: join(dir, 'files') },
    ),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const serverPid = server.process.pid!;
  const warehouseName = new URL(warehouse.url).pathname.slice(1);
  const admin = adminClient(base, adminToken);
  const product = await admin('POST', '/products', { name: 'bench' });
  const key = await admin('POST', `/products/${product.id as string}/keys`, { kind: 'events', name: 'bench' });
  const productPath = `/products/${product.id as string}`;
  const headers = { authorization: `Bearer ${key.key as string}` };
  if (prefill > 0) {
    const started = Date.now();
    const target = { productId: product.id as string, apiKeyId: key.id as string };
    if (database.dialect === 'sqlite') {
      prefillSqlite(database.url.slice('sqlite:'.length), prefill, 'random', target, true);
      await awaitKeyFilter(base, headers);
    } else await prefillPostgres(database.url, prefill, 'random', target);
    process.stdout.write(`prefill: ${fmt(prefill)} events in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
  }
  const runId = randomBytes(4).toString('hex');
  let requestN = 0;
  const body = (ids: ExternalIds) => () => batchJson(ids, batchSize, requestN++);

  const createWarehouse = async (schema: string) => {
    const d = await admin('POST', `${productPath}/destinations`, {
      type: 'postgres',
      name: schema,
      url: warehouse.url,
      schema,
      start: 'now',
      batch: { max_messages: maxMessages, max_wait_ms: 1000 },
    });
    return d.id as string;
  };
  const lagOf = async (id: string) => (await admin('GET', `${productPath}/destinations/${id}`)).lag as number;
  const drain = async (id: string) => {
    const started = performance.now();
    while ((await lagOf(id)) > 0) {
      if (performance.now() - started > 300_000) throw new Error('the warehouse did not drain in 300 s');
      await sleep(200);
    }
    return (performance.now() - started) / 1000;
  };

  /** Batches as fast as the server answers, for `seconds`, with external ids of their own (`label`). */
  const fullLoad = (label: string, seconds: number) =>
    runLoad(
      {
        url: base,
        path: '/api/v2/events/batch',
        headers,
        body: body(new ExternalIds(`${runId}-${label}`)),
        connections,
        durationSeconds: seconds,
      },
      200,
    );

  // 0. The delivery worker's thread starts with the first destination and runs from then on: a destination loads
  // one warm-up run's events and is deleted before the measured rounds, so that no round pays for the thread's
  // start and its code's first optimisations, as no round pays for the server's (each run's warm-up). Without it
  // the first round with the warehouse was the slowest of nearly every run (bench/runs/2026-11-warehouses.md).
  if (warmupSeconds > 0) {
    const id = await createWarehouse('warm_up');
    await fullLoad('worker-warm', warmupSeconds * 2);
    await drain(id);
    await admin('DELETE', `${productPath}/destinations/${id}`);
  }

  // 1. Full load, without and with the warehouse, interleaved.
  const rates: Record<'without' | 'with', number[]> = { without: [], with: [] };
  const lines: string[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const variant of inRoundOrder(['without', 'with'] as const, round - 1)) {
      const id = variant === 'with' ? await createWarehouse(`full_${round}`) : undefined;
      if (warmupSeconds > 0) await fullLoad(`${round}-${variant}-warm`, warmupSeconds);
      // CPU of the server (every thread) and of the warehouse's backends, from the load's start until the
      // backlog is loaded: what ingest and the loader cost together, per event ingested.
      const server0 = cpuSeconds(serverPid) ?? 0;
      const backends = postgresCpuMeter(warehouseName, { background: false });
      const load = await fullLoad(`${round}-${variant}`, durationSeconds);
      const rate = load.requestsPerSecond * batchSize;
      rates[variant].push(rate);
      const drained = id === undefined ? undefined : await drain(id);
      const ingested = load.ok * batchSize;
      const perEvent = (seconds: number) => ((seconds * 1e6) / ingested).toFixed(1);
      const cpu = `  CPU µs/event: server ${perEvent((cpuSeconds(serverPid) ?? 0) - server0)}, warehouse backends ${perEvent(backends.stop())}`;
      // Deleted once drained: only the destination measured next loads.
      if (id !== undefined) await admin('DELETE', `${productPath}/destinations/${id}`);
      lines.push(
        `round ${round} ${variant.padEnd(7)} ${fmt(rate).padStart(7)} events/s  load ${loadavg()[0]!.toFixed(1)}` +
          (drained === undefined ? '' : `  backlog loaded ${drained.toFixed(1)} s after the load`) +
          cpu,
      );
      process.stdout.write(`${lines.at(-1)}\n`);
    }
  }
  const best = (xs: number[]) => Math.max(...xs);
  const peak = best(rates.without);
  const ratio = best(rates.with) / peak;
  // The same ratio round by round (each with its own round's without, run back to back): its median is less at
  // the mercy of one lucky or unlucky run than the best of each, and its range shows how much the machine moved.
  const roundRatios = rates.with.map((rate, i) => rate / rates.without[i]!);
  const spread = (xs: number[]) =>
    `${xs.map((x) => x.toFixed(3)).join(', ')}; median ${median(xs).toFixed(3)} (range ${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)})`;

  // 2. Half the peak, paced, with a fresh warehouse destination: lag sampled every second.
  const id = await createWarehouse('half');
  const targetPerSecond = peak / 2;
  const requestsPerSecond = targetPerSecond / batchSize;
  /** Sends batches at `requestsPerSecond` until stopped; returns how many were sent. */
  const paced = (label: string) => {
    const ids = new ExternalIds(`${runId}-${label}`);
    const state = { stop: false, sent: 0, startedAt: performance.now() };
    const done = (async () => {
      const inFlight = new Set<Promise<void>>();
      while (!state.stop) {
        const due = Math.floor(((performance.now() - state.startedAt) / 1000) * requestsPerSecond);
        while (state.sent < due && inFlight.size < connections) {
          state.sent++;
          const p: Promise<void> = fetch(`${base}/api/v2/events/batch`, {
            method: 'POST',
            headers: { ...headers, 'content-type': 'application/json' },
            body: batchJson(ids, batchSize, requestN++),
          }).then(async (r) => {
            await r.arrayBuffer();
            inFlight.delete(p);
          });
          inFlight.add(p);
        }
        await sleep(5);
      }
      await Promise.all(inFlight);
    })();
    return {
      state,
      async stop() {
        state.stop = true;
        await done;
        return (state.sent * batchSize) / ((performance.now() - state.startedAt) / 1000);
      },
    };
  };
  const half = paced('half');
  const samples: Array<{ ageSeconds: number; messages: number }> = [];
  const halfSeconds = Math.max(durationSeconds * 2, 15);
  for (let s = 0; s < halfSeconds; s++) {
    await sleep(1000);
    const newest = await wh.query<{ at: Date | null }>(`SELECT max(received_at) AS at FROM half.events`);
    const at = newest.rows[0]!.at;
    samples.push({ ageSeconds: at === null ? s + 1 : (Date.now() - at.getTime()) / 1000, messages: await lagOf(id) });
  }
  const achieved = await half.stop();
  const sent = half.state.sent;
  await drain(id);
  await admin('DELETE', `${productPath}/destinations/${id}`);
  const maxAge = Math.max(...samples.slice(2).map((s) => s.ageSeconds));
  const maxMessagesBehind = Math.max(...samples.map((s) => s.messages));

  // 3. Every stored event in the warehouse once (the half run's schema: everything it was sent).
  const stored = await wh.query<{ n: string; d: string }>(
    `SELECT count(*) AS n, count(DISTINCT id) AS d FROM half.events`,
  );
  const loaded = Number(stored.rows[0]!.n);
  const distinct = Number(stored.rows[0]!.d);
  const expected = sent * batchSize;

  // 4. Parquet files at half load: the age of the newest event in the files, every second.
  const files = await admin('POST', `${productPath}/destinations`, {
    type: 'parquet',
    name: 'files',
    path: 'bench',
    start: 'now',
    batch: { max_wait_ms: fileWaitMs },
  });
  const duck = await (await DuckDBInstance.create(':memory:')).connect();
  const glob = `read_parquet('${join(dir, 'files', 'bench')}/events/**/*.parquet', hive_partitioning = true)`;
  const fileLoad = paced('files');
  const fileAges: number[] = [];
  const fileStarted = Date.now();
  for (let s = 0; s < halfSeconds; s++) {
    await sleep(1000);
    let newest: number | undefined;
    try {
      const [row] = (
        await duck.runAndReadAll(`SELECT epoch_ms(max(received_at))::BIGINT AS at FROM ${glob}`)
      ).getRowObjectsJson();
      newest = row?.at === null || row?.at === undefined ? undefined : Number(row.at);
    } catch {
      newest = undefined; // no file yet
    }
    fileAges.push((Date.now() - (newest ?? fileStarted)) / 1000);
  }
  const fileRate = await fileLoad.stop();
  await drain(files.id as string);
  const [fileCount] = (
    await duck.runAndReadAll(`SELECT count(*)::BIGINT AS n, count(DISTINCT id)::BIGINT AS d FROM ${glob}`)
  ).getRowObjectsJson();
  duck.closeSync();
  const fileExpected = fileLoad.state.sent * batchSize;
  const maxFileAge = Math.max(...fileAges.slice(Math.ceil(fileWaitMs / 1000) + 1));

  process.stdout.write(
    [
      '',
      `full load (${durationSeconds} s measured after ${warmupSeconds} s of warm-up each): without ${rates.without.map(fmt).join(', ')}; with ${rates.with.map(fmt).join(', ')} events/s`,
      `  ingest with a warehouse / without (best of each): ${ratio.toFixed(3)}× (target ≥ 0.9): ${ratio >= 0.9 ? 'PASS' : 'FAIL'}`,
      `  round by round (with / its round's without): ${spread(roundRatios)}`,
      `half load: ${fmt(achieved)} events/s paced (target ${fmt(targetPerSecond)}), ${halfSeconds} s`,
      `  warehouse lag, age of the newest loaded event (after the first 2 s): max ${maxAge.toFixed(1)} s (target < 10 s): ${maxAge < 10 ? 'PASS' : 'FAIL'}`,
      `  messages behind: max ${fmt(maxMessagesBehind)}; samples ${samples.map((s) => s.ageSeconds.toFixed(1)).join(' ')}`,
      `exactly once: ${fmt(loaded)} rows, ${fmt(distinct)} distinct, ${fmt(expected)} sent: ${loaded === distinct && loaded === expected ? 'PASS' : 'FAIL'}`,
      `parquet files at half load: ${fmt(fileRate)} events/s paced, max_wait_ms ${fileWaitMs}`,
      `  age of the newest event in the files (after the first wait): max ${maxFileAge.toFixed(1)} s (target ≤ max_wait_ms + 1 s poll and write): ${maxFileAge <= fileWaitMs / 1000 + 1.5 ? 'PASS' : 'FAIL'}`,
      `  samples ${fileAges.map((a) => a.toFixed(1)).join(' ')}`,
      `  exactly once: ${fmt(Number(fileCount!.n))} rows, ${fmt(Number(fileCount!.d))} distinct, ${fmt(fileExpected)} sent: ${Number(fileCount!.n) === fileExpected && Number(fileCount!.d) === fileExpected ? 'PASS' : 'FAIL'}`,
      `load average at the end: ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    ].join('\n') + '\n',
  );
  await admin('DELETE', `${productPath}/destinations/${files.id as string}`);
}

runBench(main);
