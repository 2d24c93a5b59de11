// Command-line flags of `npm run bench`.
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { BATCH_SIZE } from './workload.js';

/** The V8 flag `npm start` gives the server (docs/operations.md); every bench's server runs with it. */
export const SERVER_NODE_FLAG = '--max-semi-space-size=32';

export type Scenario = 'single' | 'batch' | 'segment';
export type IdKind = 'random' | 'v7' | 'sequential';

export interface BenchArgs {
  durationSeconds: number;
  warmupSeconds: number;
  /** Connections of the single-event run. */
  connections: number;
  /** Connections of the batch and Segment runs (issue 11: 16). */
  batchConnections: number;
  batchSize: number;
  /** Events written into the table before the measured runs (issue 11: 10,000,000). */
  prefill: number;
  /** SQLite prefill: drop the secondary indexes and build them after (fast) or keep them (organic growth). */
  prefillIndexes: 'rebuild' | 'keep';
  /** Also measure on the empty table first, for the "flat within 15 %" target. */
  compareEmpty: boolean;
  /** external_id of every event: random uuid v4 (default, as Segment and RudderStack SDKs), uuid v7, or sequential. */
  ids: IdKind;
  /** wrk (with a Lua script) when installed, else autocannon. */
  generator: 'wrk' | 'autocannon';
  /** undefined: SQLite on a temp file; otherwise a postgres:// server URL. */
  postgresUrl: string | undefined;
  scenarios: Scenario[];
  sqliteSynchronous: 'full' | 'normal';
  logLevel: string;
  build: boolean;
  cpuProfileDir: string | undefined;
  /** Print where the server's time per event goes, stage by stage (bench/stages.ts; implies CPU profiling). */
  stages: boolean;
  /** SQLite: the bytes by table and index too (dbstat reads every page of the file; PostgreSQL always prints them). */
  footprintParts: boolean;
  /** V8 flags of the server process (default as `npm start`: --max-semi-space-size=32). */
  serverNodeOptions: string[];
  /** Issue 35: after the last phase's runs, batches until this many events are acknowledged (0: not run). */
  sustained: number;
}

export const USAGE = `npm run bench -- [options]
  --duration <s>            seconds of load per run (default 10)
  --warmup <s>              seconds of unmeasured load before each run (default 2)
  --connections <n>         concurrent connections of the single-event run (default 50)
  --batch-connections <n>   concurrent connections of the batch and Segment runs (default 16)
  --prefill <n>             events written into the table before the runs, fast, from a second
                            connection (default 0; issue 11's targets are at 10000000)
  --prefill-indexes <m>     SQLite: rebuild (default: drop the secondary indexes, fill, build them again)
                            | keep (fill with the indexes in place: slow, grown as in production)
  --compare-empty           with --prefill: run everything on the empty table first, then prefill and run
                            again (the "flat within 15 %" target)
  --ids <kind>              external_id: random (uuid v4, default) | v7 | sequential
  --generator <g>           wrk (default when installed; one thread, Lua-built requests) | autocannon
  --batch-size <n>          events per batch request (default 100)
  --database <url|sqlite>   sqlite (default: fresh temp file) or postgres://… (a fresh database is
                            created on that server and dropped afterwards); also INLET_BENCH_DATABASE_URL
  --scenario <s>            single | batch | segment (/v1/batch, analytics-node-shaped) | all (default all)
  --sqlite-synchronous <m>  full (default, as the service) | normal (operator opt-in)
  --log-level <level>       server INLET_LOG_LEVEL (default info, as the service)
  --no-build                use dist/ as it is instead of running the build first
  --cpu-prof <dir>          run the server with node --cpu-prof, profiles written to <dir>
  --footprint-parts         SQLite: print the bytes per event by table and index too (dbstat reads the whole
                            file, ~a minute at 10 M events); PostgreSQL prints them always, from the catalog
  --stages                  print the server's µs per event stage by stage (socket + parse, auth, validate,
                            draft, insert, commit, respond, …) for each measured run, from CPU profiles
  --sustained <n>           after the runs, batches until n events are acknowledged: the rate over all of them
                            and of their first and last 250,000 (a quarter of a shorter run; issue 35: 3 M)
  --server-node-options <s> node flags of the server, space-separated (default "--max-semi-space-size=32",
                            as npm start; "" for Node's defaults)
  (machine cores: ${availableParallelism()})`;

function positiveInteger(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`--${name} must be a whole number, got "${raw}"`);
  return value;
}

/** `--database`: "sqlite" (undefined) or a postgres:// URL of a server on this machine. */
export function parseDatabase(database: string): string | undefined {
  if (/^postgres(ql)?:\/\//.test(database)) {
    const host = new URL(database).hostname;
    if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host))
      throw new Error(`--database must be a server on this machine (127.0.0.1), got host "${host}"`);
    return database;
  }
  if (database !== 'sqlite') throw new Error(`--database must be "sqlite" or a postgres:// URL, got "${database}"`);
  return undefined;
}

/** A JSON client of the admin API (`/admin/v1…`) of a bench server: the answer's `data`, undefined for 204. */
export function adminClient(base: string, token: string) {
  return async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const response = await fetch(`${base}/admin/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${await response.text()}`);
    return response.status === 204 ? {} : ((await response.json()) as { data: Record<string, unknown> }).data;
  };
}

export function parseBenchArgs(argv: string[], env: NodeJS.ProcessEnv): BenchArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      'batch-connections': { type: 'string' },
      prefill: { type: 'string' },
      'prefill-indexes': { type: 'string' },
      'compare-empty': { type: 'boolean' },
      ids: { type: 'string' },
      generator: { type: 'string' },
      'batch-size': { type: 'string' },
      database: { type: 'string' },
      scenario: { type: 'string' },
      'sqlite-synchronous': { type: 'string' },
      'log-level': { type: 'string' },
      'no-build': { type: 'boolean' },
      'cpu-prof': { type: 'string' },
      stages: { type: 'boolean' },
      'footprint-parts': { type: 'boolean' },
      'server-node-options': { type: 'string' },
      sustained: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const postgresUrl = parseDatabase(values.database ?? env.INLET_BENCH_DATABASE_URL ?? 'sqlite');
  const scenario = values.scenario ?? 'all';
  if (!['single', 'batch', 'segment', 'all'].includes(scenario))
    throw new Error(`--scenario must be single, batch, segment or all, got "${scenario}"`);
  const synchronous = values['sqlite-synchronous'] ?? 'full';
  if (synchronous !== 'full' && synchronous !== 'normal')
    throw new Error(`--sqlite-synchronous must be full or normal, got "${synchronous}"`);
  const connections = positiveInteger('connections', values.connections, 50);
  const batchSize = positiveInteger('batch-size', values['batch-size'], BATCH_SIZE);
  const durationSeconds = positiveInteger('duration', values.duration, 10);
  if (connections < 1 || batchSize < 1 || durationSeconds < 1)
    throw new Error('--connections, --batch-size and --duration must be at least 1');
  const ids = values.ids ?? 'random';
  if (ids !== 'random' && ids !== 'v7' && ids !== 'sequential')
    throw new Error(`--ids must be random, v7 or sequential, got "${ids}"`);
  const generator =
    values.generator ??
    (spawnSync('wrk', ['--version'], { stdio: 'ignore' }).error === undefined ? 'wrk' : 'autocannon');
  if (generator !== 'wrk' && generator !== 'autocannon')
    throw new Error(`--generator must be wrk or autocannon, got "${generator}"`);
  const prefillIndexes = values['prefill-indexes'] ?? 'rebuild';
  if (prefillIndexes !== 'rebuild' && prefillIndexes !== 'keep')
    throw new Error(`--prefill-indexes must be rebuild or keep, got "${prefillIndexes}"`);
  const batchConnections = positiveInteger('batch-connections', values['batch-connections'], 16);
  if (batchConnections < 1) throw new Error('--batch-connections must be at least 1');
  return {
    batchConnections,
    prefill: positiveInteger('prefill', values.prefill, 0),
    prefillIndexes,
    compareEmpty: values['compare-empty'] === true,
    ids,
    generator,
    durationSeconds,
    warmupSeconds: positiveInteger('warmup', values.warmup, 2),
    connections,
    batchSize,
    postgresUrl,
    // segment is compared with batch in the same run, so asking for it runs batch too.
    scenarios:
      scenario === 'all'
        ? ['single', 'batch', 'segment']
        : scenario === 'segment'
          ? ['batch', 'segment']
          : [scenario as Scenario],
    sqliteSynchronous: synchronous,
    logLevel: values['log-level'] ?? 'info',
    build: values['no-build'] !== true,
    cpuProfileDir: values['cpu-prof'],
    stages: values.stages === true,
    footprintParts: values['footprint-parts'] === true,
    serverNodeOptions: (values['server-node-options'] ?? SERVER_NODE_FLAG).split(' ').filter((o) => o !== ''),
    sustained: positiveInteger('sustained', values.sustained, 0),
  };
}
