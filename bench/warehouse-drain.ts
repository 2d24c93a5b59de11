// `npm run bench:warehouse-drain`: a warehouse loader's CPU per loaded event. `--events` events
// (bench/workload.ts's) are ingested with no destination, then a warehouse destination (`--type postgres`, the
// default, or `parquet`: files under a temporary root) is created from the beginning; while it drains, the CPU per loaded event (from /proc) of the delivery worker thread, the main
// thread, the whole server (every thread: V8's GC helpers too) and the warehouse database's backends. Repeated
// `--repeats` times, a fresh schema each (the first pays for the worker's start). `--dist <dir>` runs another
// build of the server (a folder beside dist/, for before and after), `--cpu-prof <dir>` writes the server's CPU
// profiles (every thread), `--database` as bench/warehouse.ts.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { adminClient, parseDatabase, SERVER_NODE_FLAG } from './args.js';
import { postgresDatabase, sqliteDatabase, tempDirectory } from './database.js';
import {
  cpuSeconds,
  freePort,
  installExitHandlers,
  postgresCpuMeter,
  startChild,
  waitUntilReady,
  runBench,
  serverEnv,
} from './processes.js';
import { ExternalIds, batchJson } from './workload.js';

const ROOT = new URL('..', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const { values } = parseArgs({
  options: {
    database: { type: 'string' },
    events: { type: 'string' },
    repeats: { type: 'string' },
    'max-messages': { type: 'string' },
    'cpu-prof': { type: 'string' },
    dist: { type: 'string' },
    type: { type: 'string' },
  },
  strict: true,
});
const type = values.type ?? 'postgres';
if (type !== 'postgres' && type !== 'parquet') throw new Error(`--type: postgres or parquet, not "${type}"`);
const events = Number(values.events ?? 100_000);
const repeats = Number(values.repeats ?? 2);
// PostgreSQL's loads default to 1,000 rows; Parquet to the type's own default (one file per 100,000 rows).
const maxMessages = values['max-messages'] === undefined ? undefined : Number(values['max-messages']);
const batchSize = 100;

/** CPU seconds of one thread of the server so far (0 once it is gone). */
const threadSeconds = (pid: number, tid: number): number => cpuSeconds(pid, tid) ?? 0;

async function main(): Promise<void> {
  installExitHandlers(1800);
  const dir = tempDirectory();
  const storeUrl = parseDatabase(values.database ?? 'sqlite');
  const database = storeUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(storeUrl);
  const warehouse = await postgresDatabase('postgres://postgres@127.0.0.1:5432/postgres');
  const warehouseName = new URL(warehouse.url).pathname.slice(1);
  const port = await freePort();
  const adminToken = randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const nodeArgs = [SERVER_NODE_FLAG];
  if (values['cpu-prof'] !== undefined) nodeArgs.push('--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`);
  const server = startChild(
    'inlet server',
    process.execPath,
    [...nodeArgs, join(ROOT, values.dist ?? 'dist', 'main.js')],
    serverEnv(
      { port, databaseUrl: database.url, adminToken, logLevel: 'info', outbound: true },
      { INLET_FILE_DESTINATIONS_ROOT: join(dir, 'files') },
    ),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const admin = adminClient(base, adminToken);
  const product = await admin('POST', '/products', { name: 'bench' });
  const key = await admin('POST', `/products/${product.id as string}/keys`, { kind: 'events', name: 'bench' });
  const productPath = `/products/${product.id as string}`;
  const ids = new ExternalIds(randomBytes(4).toString('hex'));
  let n = 0;
  const requests = Math.ceil(events / batchSize);
  const send = async () => {
    while (n < requests) {
      const body = batchJson(ids, batchSize, n++);
      const r = await fetch(`${base}/api/v2/events/batch`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key.key as string}`, 'content-type': 'application/json' },
        body,
      });
      if (r.status !== 200) throw new Error(`ingest: ${r.status} ${await r.text()}`);
      await r.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: 8 }, send));
  const pid = server.process.pid!;
  let tid: number | undefined;
  process.stdout.write(
    `${requests * batchSize} events stored; draining into ${type === 'postgres' ? warehouse.description : `Parquet files under ${join(dir, 'files')}`}\n`,
  );
  for (let r = 1; r <= repeats; r++) {
    const startedLoad = loadavg()[0]!;
    const batch = {
      max_messages: maxMessages ?? (type === 'postgres' ? 1000 : undefined),
      max_wait_ms: 1000,
    };
    const d = await admin(
      'POST',
      `${productPath}/destinations`,
      type === 'postgres'
        ? { type, name: `drain_${r}`, url: warehouse.url, schema: `drain_${r}`, start: 'beginning', batch }
        : { type, name: `drain_${r}`, path: `drain_${r}`, start: 'beginning', batch },
    );
    while (tid === undefined) {
      const line = readFileSync(logFile, 'utf8')
        .split('\n')
        .find((l) => l.includes('delivery worker started'));
      if (line !== undefined) tid = (JSON.parse(line) as { tid: number }).tid;
      else await sleep(20);
    }
    const w0 = threadSeconds(pid, tid);
    const m0 = threadSeconds(pid, pid);
    const p0 = cpuSeconds(pid) ?? 0;
    // The warehouse database's own backends: the COPYs and their transactions.
    const meter = postgresCpuMeter(warehouseName, { background: false });
    const t0 = performance.now();
    for (;;) {
      const lag = (await admin('GET', `${productPath}/destinations/${d.id as string}`)).lag as number;
      if (lag === 0) break;
      await sleep(250);
    }
    const backend = meter.stop();
    const seconds = (performance.now() - t0) / 1000;
    const worker = threadSeconds(pid, tid) - w0;
    const main = threadSeconds(pid, pid) - m0;
    // Every thread of the server: V8's GC helpers and libuv's pool work for the worker too.
    const whole = (cpuSeconds(pid) ?? 0) - p0;
    const per = (s: number) => ((s * 1e6) / (requests * batchSize)).toFixed(1);
    process.stdout.write(
      `drain ${r}: ${seconds.toFixed(1)} s; µs/event: worker ${per(worker)}, warehouse backend ${per(backend)}, main ${per(main)}, server (every thread) ${per(whole)}; load ${startedLoad.toFixed(1)}→${loadavg()[0]!.toFixed(1)}\n`,
    );
    await admin('DELETE', `${productPath}/destinations/${d.id as string}`);
  }
}

runBench(main);
