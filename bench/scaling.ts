// `npm run bench -- --backend postgres --instances 1,2,4`: batch ingest through N Inlet instances on one
// PostgreSQL (a fresh database), beside that PostgreSQL's own raw insert rate into the same events table
// measured in the same run. Each instance gets its own load generator (wrk when installed, else autocannon;
// the connections split evenly), as a balancer would spread it. Every run also reports where the CPU went:
// the Inlet instances, PostgreSQL's processes and the generator, in µs per event. See bench/README.md
// ("Scaling out").
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { SERVER_NODE_FLAG } from './args.js';
import { postgresRawInsert, type BaselineResult } from './baselines.js';
import { postgresDatabase, redact, tempDirectory } from './database.js';
import { runLoad, runWrk, wrkAvailable, type LoadResult } from './load.js';
import {
  cleanUp,
  cpuSeconds,
  freePort,
  installExitHandlers,
  postgresCpuMeter,
  startChild,
  waitUntilReady,
  type Child,
  buildServer,
  serverEnv,
} from './processes.js';
import { externalIdMaker, workloadBatchJson } from './workload.js';

const ROOT = new URL('..', import.meta.url).pathname;

export const SCALING_USAGE = `npm run bench -- --backend postgres --instances 1,2,4 [options]
  --instances <list>        instance counts to run, comma-separated (default 1,2,4)
  --database <url>          PostgreSQL server on 127.0.0.1 (default postgres://postgres@127.0.0.1:5432/postgres,
                            or INLET_BENCH_DATABASE_URL); a fresh database is created and dropped
  --duration <s>            seconds of load per run (default 10)
  --warmup <s>              seconds of unmeasured load before each run (default 2)
  --connections <n>         HTTP connections in total, split between the instances (default 32)
  --batch-size <n>          events per batch request (default 100)
  --rate-limit-store <s>    INLET_RATE_LIMIT_STORE of the instances: postgres (default, shared) | memory
  --generator <g>           wrk (default when installed: one single-threaded wrk per instance, a Lua script
                            builds each batch) | autocannon (in the bench process)
  --no-build                use dist/ as it is
The workload is the ingest bench's (bench/workload.ts): random uuid v4 external ids, 100,000 subjects,
300-byte properties.`;

interface ScalingArgs {
  instances: number[];
  serverUrl: string;
  durationSeconds: number;
  warmupSeconds: number;
  connections: number;
  batchSize: number;
  rateLimitStore: 'postgres' | 'memory';
  generator: 'wrk' | 'autocannon';
  build: boolean;
}

function parse(argv: string[]): ScalingArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      backend: { type: 'string' },
      instances: { type: 'string' },
      database: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      'batch-size': { type: 'string' },
      'rate-limit-store': { type: 'string' },
      generator: { type: 'string' },
      'no-build': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${SCALING_USAGE}\n`);
    process.exit(0);
  }
  if ((values.backend ?? 'postgres') !== 'postgres')
    throw new Error('--instances needs --backend postgres (several instances share one PostgreSQL)');
  const number = (name: string, raw: string | undefined, fallback: number) => {
    const value = raw === undefined ? fallback : Number(raw);
    if (!Number.isInteger(value) || value < 0) throw new Error(`--${name} must be a whole number, got "${raw}"`);
    return value;
  };
  const instances = (values.instances ?? '1,2,4').split(',').map((n) => number('instances', n.trim(), 1));
  if (instances.some((n) => n < 1 || n > 16)) throw new Error('--instances: each count from 1 to 16');
  const serverUrl =
    values.database ?? process.env.INLET_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(new URL(serverUrl).hostname))
    throw new Error('--database must be a server on this machine');
  const store = values['rate-limit-store'] ?? 'postgres';
  if (store !== 'postgres' && store !== 'memory') throw new Error('--rate-limit-store must be postgres or memory');
  const generator = values.generator ?? (wrkAvailable() ? 'wrk' : 'autocannon');
  if (generator !== 'wrk' && generator !== 'autocannon') throw new Error('--generator must be wrk or autocannon');
  if (generator === 'wrk' && !wrkAvailable())
    throw new Error('--generator wrk, but wrk is not installed (apt-get install wrk)');
  return {
    instances,
    serverUrl,
    durationSeconds: number('duration', values.duration, 10),
    warmupSeconds: number('warmup', values.warmup, 2),
    connections: number('connections', values.connections, 32),
    batchSize: number('batch-size', values['batch-size'], 100),
    rateLimitStore: store,
    generator,
    build: !values['no-build'],
  };
}

async function adminPost(base: string, token: string, path: string, body: unknown): Promise<Record<string, string>> {
  const response = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.status !== 201) throw new Error(`POST ${path} answered ${response.status}: ${await response.text()}`);
  return ((await response.json()) as { data: Record<string, string> }).data;
}

async function startInstances(
  count: number,
  url: string,
  adminToken: string,
  store: string,
  dir: string,
  tag: string,
): Promise<Array<{ child: Child; base: string }>> {
  const started: Array<{ child: Child; base: string }> = [];
  for (let i = 0; i < count; i++) {
    const port = await freePort();
    const logFile = join(dir, `inlet-${tag}-${i}.log`);
    const child = startChild(
      `inlet ${i + 1}/${count}`,
      process.execPath,
      [SERVER_NODE_FLAG, join(ROOT, 'dist/main.js')],
      serverEnv(
        { port, databaseUrl: url, adminToken },
        { INLET_RATE_LIMIT_STORE: store, INLET_TRAFFIC_SYNC_INTERVAL_MS: '0' },
      ),
      logFile,
    );
    const base = `http://127.0.0.1:${port}`;
    await waitUntilReady(child, `${base}/readyz`, logFile, 60_000);
    started.push({ child, base });
  }
  return started;
}

interface RunLoad {
  results: LoadResult[];
  /** CPU seconds of the load generators over the run (wrk processes, or this process for autocannon). */
  generatorCpuSeconds: number | undefined;
}

async function loadAll(
  bases: string[],
  key: string,
  args: ScalingArgs,
  dir: string,
  seconds: number,
): Promise<RunLoad> {
  const per = Math.max(1, Math.floor(args.connections / bases.length));
  const path = '/api/v2/events/batch';
  const headers = { authorization: `Bearer ${key}` };
  if (args.generator === 'wrk') {
    const runs = await Promise.all(
      bases.map((url, i) =>
        runWrk(
          {
            url,
            path,
            headers,
            shape: 'batch',
            batchSize: args.batchSize,
            ids: 'random',
            connections: per,
            durationSeconds: seconds,
            scriptPath: join(dir, `load-${i}.lua`),
          },
          200,
        ),
      ),
    );
    const cpu = runs.map((r) => r.generatorCpuSeconds);
    return {
      results: runs,
      generatorCpuSeconds: cpu.includes(undefined) ? undefined : cpu.reduce((a, b) => a! + b!, 0),
    };
  }
  const next = externalIdMaker('random', `scale-${Date.now()}`);
  const before = process.cpuUsage();
  const results = await Promise.all(
    bases.map((url) =>
      runLoad(
        {
          url,
          path,
          headers,
          body: () => workloadBatchJson(next, args.batchSize),
          connections: per,
          durationSeconds: seconds,
        },
        200,
      ),
    ),
  );
  const used = process.cpuUsage(before);
  return { results, generatorCpuSeconds: (used.user + used.system) / 1e6 };
}

async function parallelRawInsert(
  url: string,
  productId: string,
  keyId: string,
  batchSize: number,
  seconds: number,
  connections: number,
): Promise<BaselineResult> {
  const started = Date.now();
  const runs = await Promise.all(
    Array.from({ length: connections }, () => postgresRawInsert(url, productId, keyId, batchSize, seconds, 'random')),
  );
  const rows = runs.reduce((sum, r) => sum + r.rows, 0);
  const wall = (Date.now() - started) / 1000;
  return {
    label: `raw multi-row INSERT, ${batchSize} rows per statement, ${connections} connections`,
    rows,
    seconds: wall,
    eventsPerSecond: rows / wall,
  };
}

export async function scalingMain(argv: string[]): Promise<number> {
  const args = parse(argv);
  installExitHandlers(args.instances.length * (args.durationSeconds + args.warmupSeconds + 60) + 300);
  const uptime = spawnSync('uptime', { encoding: 'utf8' }).stdout.trim();
  if (args.build) {
    buildServer();
  }
  const dir = tempDirectory();
  const database = await postgresDatabase(args.serverUrl);
  // PostgreSQL's CPU: this database's backends and the server's background processes only, not other
  // databases' work on a shared machine (processes.ts).
  const databaseName = decodeURIComponent(new URL(database.url).pathname.slice(1));
  const postgresCpu = () => postgresCpuMeter(databaseName);
  const adminToken = randomBytes(24).toString('hex');
  // One instance migrates and creates the product and key; every run then starts its instances anew.
  const [first] = await startInstances(1, database.url, adminToken, args.rateLimitStore, dir, 'setup');
  const product = await adminPost(first!.base, adminToken, '/admin/v1/products', { name: 'bench' });
  const key = await adminPost(first!.base, adminToken, `/admin/v1/products/${product.id}/keys`, { kind: 'events' });
  await first!.child.stop();

  const rows: Array<{ label: string; eventsPerSecond: number; p99?: number; errors?: string; cpu?: string }> = [];
  for (const count of args.instances) {
    const instances = await startInstances(count, database.url, adminToken, args.rateLimitStore, dir, `n${count}`);
    const bases = instances.map((i) => i.base);
    if (args.warmupSeconds > 0) await loadAll(bases, key.key!, args, dir, args.warmupSeconds);
    const inletCpu = () => instances.reduce((sum, i) => sum + (cpuSeconds(i.child.process.pid) ?? 0), 0);
    const inletBefore = inletCpu();
    const postgresMeter = postgresCpu();
    const { results, generatorCpuSeconds } = await loadAll(bases, key.key!, args, dir, args.durationSeconds);
    const inletUsed = inletCpu() - inletBefore;
    const postgresUsed = postgresMeter.stop();
    const ok = results.reduce((sum, r) => sum + r.ok, 0);
    const seconds = Math.max(...results.map((r) => r.seconds));
    const events = ok * args.batchSize;
    const bad = results.flatMap((r) =>
      Object.entries(r.statusCounts)
        .filter(([status]) => status !== '200')
        .map(([s, c]) => `${s}×${c}`),
    );
    const errors = results.reduce((sum, r) => sum + r.errors + r.timeouts, 0);
    // µs of CPU per stored event, and cores busy over the run, for each party on the machine.
    const share = (cpu: number | undefined, who: string) =>
      cpu === undefined
        ? `${who} ?`
        : `${who} ${events > 0 ? Math.round((cpu * 1e6) / events) : '–'} µs (${(cpu / seconds).toFixed(2)} cores)`;
    rows.push({
      label: `Inlet × ${count} (${args.connections} connections, batches of ${args.batchSize})`,
      eventsPerSecond: events / seconds,
      p99: Math.max(...results.map((r) => r.p99Ms)),
      cpu: [
        share(inletUsed, 'inlet'),
        share(postgresUsed, 'postgres'),
        share(generatorCpuSeconds, args.generator),
      ].join(', '),
      ...(bad.length + errors > 0
        ? { errors: [...bad, errors > 0 ? `errors×${errors}` : ''].filter(Boolean).join(' ') }
        : {}),
    });
    await Promise.all(instances.map((i) => i.child.stop()));
  }
  const rawCpu = async (run: () => Promise<BaselineResult>) => {
    const meter = postgresCpu();
    const result = await run();
    const used = meter.stop();
    return {
      result,
      note: `postgres ${Math.round((used * 1e6) / result.rows)} µs (${(used / result.seconds).toFixed(2)} cores)`,
    };
  };
  const raw1 = await rawCpu(() =>
    postgresRawInsert(database.url, product.id!, key.id!, args.batchSize, args.durationSeconds, 'random'),
  );
  const raw4 = await rawCpu(() =>
    parallelRawInsert(database.url, product.id!, key.id!, args.batchSize, args.durationSeconds, 4),
  );
  const best = Math.max(...rows.map((r) => r.eventsPerSecond));
  const rawBest = Math.max(raw1.result.eventsPerSecond, raw4.result.eventsPerSecond);

  const out: string[] = [];
  out.push(
    `npm run bench -- --backend postgres --instances ${args.instances.join(',')} (duration ${args.durationSeconds} s, rate-limit store ${args.rateLimitStore}, generator ${args.generator})`,
  );
  out.push(
    `database: ${redact(database.url)} — PostgreSQL and every Inlet instance and the load generator share this machine's ${availableParallelism()} cores`,
  );
  out.push(
    `machine load before the run: ${uptime} (loadavg now ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')})`,
  );
  out.push('');
  out.push('| what | events/s | p99 ms | CPU per event (cores busy) | notes |');
  out.push('|---|---:|---:|---|---|');
  for (const row of rows)
    out.push(
      `| ${row.label} | ${Math.round(row.eventsPerSecond)} | ${row.p99 ?? ''} | ${row.cpu ?? ''} | ${row.errors ?? ''} |`,
    );
  out.push(
    `| ${raw1.result.label} | ${Math.round(raw1.result.eventsPerSecond)} | | ${raw1.note} | into the same events table, no dedup table |`,
  );
  out.push(`| ${raw4.result.label} | ${Math.round(raw4.result.eventsPerSecond)} | | ${raw4.note} | |`);
  out.push('');
  out.push(`best Inlet / best raw = ${(best / rawBest).toFixed(2)} (target ≥ 0.70)`);
  process.stdout.write(`${out.join('\n')}\n`);
  await cleanUp();
  return 0;
}
