// `npm run bench`: the real server (a separate process, on a fresh database) against a bare
// node:http server and a raw-insert baseline, loaded by autocannon on 127.0.0.1. See bench/README.md.
import BetterSqlite3 from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseBenchArgs, USAGE, type BenchArgs, type Scenario } from './args.js';
import { postgresRawInsert, sqliteRawInsert, type BaselineResult } from './baselines.js';
import { postgresDatabase, postgresRunMeter, sqliteDatabase, tempDirectory, type BenchDatabase } from './database.js';
import { memorySampler, postgresFootprint, sqliteFootprint, type DiskFootprint, type MemoryPeak } from './footprint.js';
import { runLoad, runWrk, stopLoad, stopWrk, wrkAvailable, type LoadResult } from './load.js';
import { awaitKeyFilter, prefillPostgres, prefillSqlite } from './prefill.js';
import { SOURCE_CODES } from '../src/storage/database.js';
import {
  cleanUp,
  cpuSeconds,
  freePort,
  installExitHandlers,
  onCleanup,
  postgresCpuMeter,
  startChild,
  waitUntilReady,
  buildServer,
  serverEnv,
} from './processes.js';
import { formatTable, formatTargets, type Line, type TargetCheck } from './report.js';
import { formatBreakdowns, monotonicMicros, stageBreakdowns, type StageWindow } from './stages.js';
import { runSustained, type SustainedResult } from './sustained.js';
import {
  PROPERTIES_BYTES,
  SUBJECTS,
  externalIdMaker,
  segmentBatchJson,
  workloadBatchJson,
  workloadEventJson,
} from './workload.js';

const ROOT = new URL('..', import.meta.url).pathname;

interface Measured extends LoadResult {
  /** Server CPU time (user + system) per request, in microseconds; noise-resistant on a shared machine. */
  cpuMicrosPerRequest: number | undefined;
  commits: string;
  /** CPU of the load generator over the run, as a share of one core. */
  generatorCpuShare: number | undefined;
}

interface ScenarioFigures {
  scenario: Scenario;
  inlet: Measured;
  /** Not run for segment: that scenario is compared with the native batch. */
  bare: Measured | undefined;
  eventsPerRequest: number;
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

async function startInlet(args: BenchArgs, database: BenchDatabase, dir: string) {
  const port = await freePort();
  const adminToken = randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const nodeArgs = args.cpuProfileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${args.cpuProfileDir}`];
  const server = startChild(
    'inlet server',
    process.execPath,
    [...nodeArgs, ...args.serverNodeOptions, join(ROOT, 'dist/main.js')],
    serverEnv(
      { port, databaseUrl: database.url, adminToken, logLevel: args.logLevel },
      {
        INLET_SQLITE_SYNCHRONOUS: args.sqliteSynchronous,
        // Comparing the limiter's stores (memory, postgres, redis): passed through when set.
        ...(process.env.INLET_RATE_LIMIT_STORE === undefined
          ? {}
          : { INLET_RATE_LIMIT_STORE: process.env.INLET_RATE_LIMIT_STORE }),
        ...(process.env.INLET_REDIS_URL === undefined ? {} : { INLET_REDIS_URL: process.env.INLET_REDIS_URL }),
        // The SQLite writer thread (off by default), passed through when set.
        ...(process.env.INLET_SQLITE_WRITER_THREAD_AFTER === undefined
          ? {}
          : { INLET_SQLITE_WRITER_THREAD_AFTER: process.env.INLET_SQLITE_WRITER_THREAD_AFTER }),
      },
    ),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const product = await adminPost(base, adminToken, '/admin/v1/products', { name: 'bench' });
  const key = await adminPost(base, adminToken, `/admin/v1/products/${product.id}/keys`, {
    kind: 'events',
    name: 'bench',
  });
  return { server, base, productId: product.id!, keyId: key.id!, key: key.key!, logFile };
}

async function startBare(dir: string) {
  const port = await freePort();
  const logFile = join(dir, 'bare.log');
  const bare = startChild(
    'bare server',
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'bench/bare-server.ts')],
    { PATH: process.env.PATH, PORT: String(port) },
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(bare, base, logFile);
  return { bare, base };
}

interface CommitCounters {
  commits: number;
  events: number;
  seconds: number;
  /** Commits that took longer than 25 ms and 100 ms (the histogram's buckets), for stalls. */
  over25ms: number;
  over100ms: number;
  /**
   * The server's event-loop delay since its previous /metrics scrape (prom-client resets it at each scrape),
   * so the scrape after a run gives the run's: max and p99, in ms.
   */
  loopMaxMs: number;
  loopP99Ms: number;
  /** SQLite: WAL checkpoints the writer ran on the event loop (when the WAL starts over), their count and seconds. */
  writerCheckpoints: number;
  writerCheckpointSeconds: number;
  writerCheckpointsOver25ms: number;
  /** SQLite: WAL frames (4 KiB pages) copied into the database file by the thread and the writer. */
  framesCopied: number;
  /** SQLite: merges of the key and subject indexes ended, and the seconds background work on them (merges, sweeps,
   *  the key filter's build) held the event loop. */
  merges: number;
  mergeBusySeconds: number;
  /** SQLite: the key and subject indexes' level moves (a level merged into the next, larger one). */
  levelMoves: number;
}

/** Group-commit counters and stall figures from the server's own /metrics, before and after each run. */
async function commitCounters(base: string): Promise<CommitCounters | undefined> {
  try {
    const text = await (await fetch(`${base}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
    const bucket = (le: string) =>
      value(`inlet_ingest_commit_duration_seconds_bucket\\{le="${le.replace('.', '\\.')}"\\}`);
    const total = value('inlet_ingest_commit_duration_seconds_count');
    // Absent on PostgreSQL and before the checkpoint thread started: 0.
    const writerCheckpoints = value('inlet_sqlite_checkpoint_seconds_count\\{by="writer"\\}') || 0;
    const counters = {
      commits: value('inlet_ingest_commit_events_count'),
      events: value('inlet_ingest_commit_events_sum'),
      seconds: value('inlet_ingest_commit_duration_seconds_sum'),
      over25ms: total - bucket('0.025'),
      over100ms: total - bucket('0.1'),
      loopMaxMs: value('inlet_nodejs_eventloop_lag_max_seconds') * 1000,
      loopP99Ms: value('inlet_nodejs_eventloop_lag_p99_seconds') * 1000,
      writerCheckpoints,
      writerCheckpointSeconds: value('inlet_sqlite_checkpoint_seconds_sum\\{by="writer"\\}') || 0,
      framesCopied:
        (value('inlet_sqlite_checkpoint_frames_total\\{by="thread"\\}') || 0) +
        (value('inlet_sqlite_checkpoint_frames_total\\{by="writer"\\}') || 0),
      merges:
        (value('inlet_sqlite_event_key_merges_total') || 0) + (value('inlet_sqlite_event_subject_merges_total') || 0),
      mergeBusySeconds:
        (value('inlet_sqlite_event_key_maintenance_busy_seconds_total') || 0) +
        (value('inlet_sqlite_event_subject_maintenance_busy_seconds_total') || 0),
      levelMoves:
        (value('inlet_sqlite_event_key_level_moves_total') || 0) +
        (value('inlet_sqlite_event_subject_level_moves_total') || 0),
      writerCheckpointsOver25ms:
        writerCheckpoints - (value('inlet_sqlite_checkpoint_seconds_bucket\\{le="0\\.025",by="writer"\\}') || 0),
    };
    const missing = Object.entries(counters).filter(([, v]) => !Number.isFinite(v));
    if (missing.length === 0) return counters;
    console.error(`/metrics: not a number: ${missing.map(([name]) => name).join(', ')}`);
    return undefined;
  } catch (error) {
    console.error(`/metrics: ${(error as Error).message}`);
    return undefined;
  }
}

function describeCommits(before: CommitCounters | undefined, after: CommitCounters | undefined): string {
  if (before === undefined || after === undefined) return 'unknown';
  const commits = after.commits - before.commits;
  if (commits === 0) return 'no commits';
  const events = after.events - before.events;
  const ms = ((after.seconds - before.seconds) * 1000) / commits;
  return (
    `${commits} commits, ${(events / commits).toFixed(1)} events and ${ms.toFixed(2)} ms each on average; ` +
    `${after.over25ms - before.over25ms} over 25 ms, ${after.over100ms - before.over100ms} over 100 ms; ` +
    `event-loop delay p99 ${after.loopP99Ms.toFixed(1)} ms, max ${after.loopMaxMs.toFixed(1)} ms` +
    (after.framesCopied > before.framesCopied && events > 0
      ? `; ${(((after.framesCopied - before.framesCopied) * 4096) / events).toFixed(0)} B of WAL frames per event`
      : '') +
    (after.mergeBusySeconds > before.mergeBusySeconds
      ? `; ${after.merges - before.merges} index merges ended, merges, sweeps and the filter's build held the event loop ${(after.mergeBusySeconds - before.mergeBusySeconds).toFixed(2)} s`
      : '') +
    (after.levelMoves > before.levelMoves ? `; ${after.levelMoves - before.levelMoves} index level moves` : '') +
    (after.writerCheckpoints > before.writerCheckpoints
      ? `; ${after.writerCheckpoints - before.writerCheckpoints} WAL checkpoints by the writer on the event loop, ` +
        `${((1000 * (after.writerCheckpointSeconds - before.writerCheckpointSeconds)) / (after.writerCheckpoints - before.writerCheckpoints)).toFixed(1)} ms each on average, ` +
        `${after.writerCheckpointsOver25ms - before.writerCheckpointsOver25ms} over 25 ms`
      : '')
  );
}

function describeStatus(result: LoadResult, okStatus: number): string {
  const others = Object.entries(result.statusCounts).filter(([status]) => status !== String(okStatus));
  const parts = others.map(([status, count]) => `${count}×${status}`);
  if (result.errors > 0) parts.push(`${result.errors} errors`);
  if (result.timeouts > 0) parts.push(`${result.timeouts} timeouts`);
  return parts.length === 0 ? '0' : parts.join(', ');
}

interface Phase {
  /** Events in the table before this phase's runs (prefill included, earlier phases' events not). */
  prefilled: number;
  label: string;
  figures: ScenarioFigures[];
  /** Disk use after the native runs (before the Segment run, whose rows carry a context). */
  disk: DiskFootprint | undefined;
}

async function main(): Promise<number> {
  // `--instances 1,2,4` (with `--backend postgres`): the scaling figure, bench/scaling.ts.
  if (
    process.argv
      .slice(2)
      .some(
        (a) => a === '--instances' || a.startsWith('--instances=') || a === '--backend' || a.startsWith('--backend='),
      )
  ) {
    return (await import('./scaling.js')).scalingMain(process.argv.slice(2));
  }
  // `--destinations`: ingest without and with a webhook and a NATS destination, bench/destinations.ts.
  if (process.argv.slice(2).includes('--destinations'))
    return (await import('./destinations.js')).destinationsMain(process.argv.slice(2));
  let args: BenchArgs;
  try {
    args = parseBenchArgs(process.argv.slice(2), process.env);
  } catch (error) {
    process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
    return 2;
  }
  if (args.generator === 'wrk' && !wrkAvailable()) {
    process.stderr.write('bench: --generator wrk, but wrk is not installed (apt-get install wrk)\n');
    return 2;
  }
  const phases: Phase[] = (args.prefill > 0 && args.compareEmpty ? [0, args.prefill] : [args.prefill]).map(
    (prefilled) => ({
      prefilled,
      label: prefilled === 0 ? 'empty table' : `prefilled with ${prefilled.toLocaleString('en-US')} events`,
      figures: [],
      disk: undefined,
    }),
  );
  const perRun = args.warmupSeconds + args.durationSeconds + 2;
  // The prefill: ~60 µs an event on SQLite (rebuild, 1 M in 60 s at load 7), unknown at 10 M on PostgreSQL; generous.
  installExitHandlers(
    phases.length * (perRun * 2 * args.scenarios.length + 60) +
      args.durationSeconds +
      180 +
      (args.prefill * 400) / 1e6 +
      // The sustained run at 1,000 events/s at worst.
      args.sustained / 1000,
  );
  onCleanup(stopLoad);
  onCleanup(stopWrk);

  const commandLine = `npm run bench --${process.argv
    .slice(2)
    .map((a) => ` ${a}`)
    .join('')}`;
  process.stdout.write(`${commandLine}\n`);
  if (args.build) buildServer();

  const loadBefore = loadavg()[0]!;
  const dir = tempDirectory();
  // --stages profiles the server (into --cpu-prof's directory when given).
  if (args.stages) args = { ...args, cpuProfileDir: args.cpuProfileDir ?? join(dir, 'profiles') };
  const stageWindows: StageWindow[] = [];
  const database = args.postgresUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(args.postgresUrl);
  process.stdout.write(`database: ${database.description}\n`);
  const inlet = await startInlet(args, database, dir);
  const memory = memorySampler(inlet.server.process.pid);
  const { bare, base: bareBase } = await startBare(dir);
  const headers = { authorization: `Bearer ${inlet.key}` };
  const sqliteFile = database.dialect === 'sqlite' ? database.url.slice('sqlite:'.length) : undefined;

  const acknowledged = { api: 0, segment: 0 };
  // Events the server may have stored without the generator seeing the answer (in flight at the end of a run).
  const unseenBound = { api: 0, segment: 0 };
  let prefillSeconds = 0;
  let sustained: SustainedResult | undefined;
  let sustainedCommits = 'unknown';
  // SQLite: the positions the prefill took (so the count of the run's rows skips them by rowid range).
  let prefillPositions: { from: number; to: number } | undefined;
  for (const phase of phases) {
    if (phase.prefilled > 0) {
      process.stdout.write(`prefill: ${phase.prefilled.toLocaleString('en-US')} events, ${args.ids} external ids…\n`);
      const started = Date.now();
      const target = { productId: inlet.productId, apiKeyId: inlet.keyId };
      if (sqliteFile !== undefined) {
        const from = sqliteFootprint(sqliteFile).events + 1;
        prefillSqlite(sqliteFile, phase.prefilled, args.ids, target, args.prefillIndexes === 'rebuild', args.batchSize);
        prefillPositions = { from, to: sqliteFootprint(sqliteFile).events };
      } else {
        await prefillPostgres(database.url, phase.prefilled, args.ids, target, undefined, args.batchSize);
      }
      prefillSeconds = (Date.now() - started) / 1000;
      process.stdout.write(`prefill: done in ${prefillSeconds.toFixed(0)} s\n`);
      if (sqliteFile !== undefined) acknowledged.api += await awaitKeyFilter(inlet.base, headers);
    }
    for (const scenario of args.scenarios) {
      if (scenario === 'segment' && phase.disk === undefined)
        phase.disk = await footprint(database, sqliteFile, args.footprintParts);
      const eventsPerRequest = scenario === 'single' ? 1 : args.batchSize;
      const connections = scenario === 'single' ? args.connections : args.batchConnections;
      const path =
        scenario === 'single' ? '/api/v2/events' : scenario === 'batch' ? '/api/v2/events/batch' : '/v1/batch';
      const okStatus = scenario === 'single' ? 201 : 200;
      // analytics-node sends Basic auth (and the key in the body) under application/json.
      const scenarioHeaders =
        scenario === 'segment'
          ? { authorization: `Basic ${Buffer.from(`${inlet.key}:`).toString('base64')}` }
          : headers;
      const source = scenario === 'segment' ? 'segment' : 'api';
      const run = async (target: 'inlet' | 'bare', seconds: number): Promise<Measured> => {
        const pid = target === 'inlet' ? inlet.server.process.pid : bare.process.pid;
        const url = target === 'inlet' ? inlet.base : bareBase;
        const commitsBefore = target === 'inlet' ? await commitCounters(inlet.base) : undefined;
        const postgresMeter =
          target === 'inlet' && database.dialect === 'postgres' ? await postgresRunMeter(database.url) : undefined;
        const cpuBefore = cpuSeconds(pid);
        let result: LoadResult;
        let generatorCpuSeconds: number | undefined;
        if (args.generator === 'wrk') {
          const wrk = await runWrk(
            {
              url,
              path,
              headers: scenarioHeaders,
              shape: scenario,
              batchSize: args.batchSize,
              ids: args.ids,
              writeKey: inlet.key,
              connections,
              durationSeconds: seconds,
              scriptPath: join(dir, 'load.lua'),
            },
            target === 'inlet' ? okStatus : 201,
          );
          result = wrk;
          generatorCpuSeconds = wrk.generatorCpuSeconds;
        } else {
          const next = externalIdMaker(
            args.ids,
            `${randomBytes(4).toString('hex')}-${scenario}-${target}-${Date.now()}`,
          );
          let n = 0;
          const body =
            scenario === 'single'
              ? () => workloadEventJson(next())
              : scenario === 'batch'
                ? () => workloadBatchJson(next, args.batchSize)
                : () => segmentBatchJson(args.batchSize, n++, inlet.key);
          const generatorBefore = process.cpuUsage();
          result = await runLoad(
            { url, path, headers: scenarioHeaders, body, connections, durationSeconds: seconds },
            target === 'inlet' ? okStatus : 201,
          );
          const used = process.cpuUsage(generatorBefore);
          generatorCpuSeconds = (used.user + used.system) / 1e6;
        }
        const cpuAfter = cpuSeconds(pid);
        const commits =
          target === 'inlet'
            ? describeCommits(commitsBefore, await commitCounters(inlet.base)) +
              (postgresMeter === undefined ? '' : `; ${await postgresMeter.stop(result.ok * eventsPerRequest)}`)
            : '';
        const answered = Object.values(result.statusCounts).reduce((sum, count) => sum + count, 0);
        const cpuMicrosPerRequest =
          cpuBefore === undefined || cpuAfter === undefined || answered === 0
            ? undefined
            : ((cpuAfter - cpuBefore) * 1e6) / answered;
        if (target === 'inlet') {
          acknowledged[source] += result.ok * eventsPerRequest;
          // Requests that timed out or were cut off may still have been stored.
          unseenBound[source] += (connections + result.errors) * eventsPerRequest;
        }
        return {
          ...result,
          cpuMicrosPerRequest,
          commits,
          generatorCpuShare: generatorCpuSeconds === undefined ? undefined : generatorCpuSeconds / result.seconds,
        };
      };
      process.stdout.write(`${phase.label}, ${scenario}: inlet…`);
      if (args.warmupSeconds > 0) await run('inlet', args.warmupSeconds);
      const measuredFrom = monotonicMicros();
      const inletResult = await run('inlet', args.durationSeconds);
      stageWindows.push({
        label: `${phase.prefilled === 0 ? '' : `${phase.prefilled / 1e6} M `}${scenario}`,
        fromUs: measuredFrom,
        toUs: monotonicMicros(),
        events: inletResult.ok * eventsPerRequest,
      });
      let bareResult: Measured | undefined;
      if (scenario !== 'segment') {
        process.stdout.write(' bare…');
        if (args.warmupSeconds > 0) await run('bare', args.warmupSeconds);
        bareResult = await run('bare', args.durationSeconds);
      }
      process.stdout.write(' done\n');
      phase.figures.push({ scenario, inlet: inletResult, bare: bareResult, eventsPerRequest });
    }
    if (args.sustained > 0 && phase === phases[phases.length - 1]) {
      process.stdout.write(`${phase.label}, sustained: ${args.sustained.toLocaleString('en-US')} events…`);
      const next = externalIdMaker(args.ids, `${randomBytes(4).toString('hex')}-sustained-${Date.now()}`);
      const databaseMeter =
        database.dialect === 'postgres' ? postgresCpuMeter(new URL(database.url).pathname.slice(1)) : undefined;
      const commitsBefore = await commitCounters(inlet.base);
      sustained = await runSustained(
        {
          url: inlet.base,
          path: '/api/v2/events/batch',
          headers,
          body: () => workloadBatchJson(next, args.batchSize),
          connections: args.batchConnections,
          events: args.sustained,
          eventsPerRequest: args.batchSize,
          serverPid: inlet.server.process.pid,
          ...(databaseMeter === undefined ? {} : { databaseCpu: databaseMeter.read }),
        },
        200,
      );
      databaseMeter?.stop();
      sustainedCommits = describeCommits(commitsBefore, await commitCounters(inlet.base));
      acknowledged.api += sustained.ok * args.batchSize;
      unseenBound.api += (args.batchConnections + sustained.errors) * args.batchSize;
      process.stdout.write(' done\n');
    }
    phase.disk ??= await footprint(database, sqliteFile, args.footprintParts);
  }

  const exitCode = await inlet.server.stop();
  const rss = memory.stop();
  // The profiles are written as the server exits.
  let stages = '';
  if (args.stages) {
    try {
      stages = formatBreakdowns(stageBreakdowns(args.cpuProfileDir!, inlet.server.process.pid!, stageWindows));
      if (database.dialect === 'postgres')
        stages +=
          '\n(PostgreSQL: "insert" and "commit" are the server process\'s side only; the database server\'s own CPU is not in them)';
    } catch (error) {
      stages = `stage breakdown unavailable: ${error instanceof Error ? error.message : String(error)}`;
    }
  }
  await bare.stop();
  const stored = {
    api: await countRun(database, sqliteFile, 'api', prefillPositions, args.prefill),
    segment: await countRun(database, sqliteFile, 'segment', prefillPositions, 0),
  };

  let baseline: BaselineResult | undefined;
  if (args.scenarios.includes('batch')) {
    process.stdout.write('raw insert baseline (fresh table)…\n');
    baseline =
      database.dialect === 'sqlite'
        ? await sqliteRawInsert(dir, args.sqliteSynchronous, args.batchSize, args.durationSeconds, args.ids)
        : await postgresRawInsert(
            database.url,
            inlet.productId,
            inlet.keyId,
            args.batchSize,
            args.durationSeconds,
            args.ids,
          );
  }

  const checks: TargetCheck[] = [];
  const tables: string[] = [];
  const last = phases[phases.length - 1]!;
  const empty = phases.length > 1 ? phases[0] : undefined;
  for (const phase of phases) {
    const lines: Line[] = [];
    for (const f of phase.figures) {
      const label =
        f.scenario === 'single'
          ? 'single v2 event'
          : f.scenario === 'batch'
            ? `batch of ${args.batchSize}`
            : `Segment /v1/batch of ${args.batchSize}`;
      for (const [who, result] of [
        ['inlet', f.inlet],
        ['bare node:http (generator ceiling)', f.bare],
      ] as const) {
        if (result === undefined) continue;
        lines.push({
          name: `${label}: ${who}`,
          requestsPerSecond: result.requestsPerSecond,
          eventsPerSecond: result.requestsPerSecond * f.eventsPerRequest,
          p50Ms: result.p50Ms,
          p99Ms: result.p99Ms,
          cpuMicrosPerRequest: result.cpuMicrosPerRequest,
          generatorCpuShare: result.generatorCpuShare,
          failures: describeStatus(result, who === 'inlet' && f.scenario !== 'single' ? 200 : 201),
        });
      }
    }
    if (phase === last && baseline !== undefined) {
      lines.push({
        name: `baseline: ${baseline.label}`,
        requestsPerSecond: undefined,
        eventsPerSecond: baseline.eventsPerSecond,
        p50Ms: undefined,
        p99Ms: undefined,
        cpuMicrosPerRequest: undefined,
        generatorCpuShare: undefined,
        failures: '0',
      });
    }
    const disk = phase.disk === undefined ? '' : `; on disk ${describeDisk(phase.disk)}`;
    const parts =
      phase.disk?.parts === undefined ? [] : [`  bytes per event by table and index: ${describeParts(phase.disk)}`];
    tables.push(
      `${phase.label}${disk}:`,
      ...parts,
      formatTable(lines),
      '',
      "group commit (from the server's /metrics, measured runs):",
      ...phase.figures.map((f) => `  ${f.scenario}: ${f.inlet.commits}`),
      '',
    );
  }
  if (sustained !== undefined) {
    const rate = (n: number) => `${Math.round(n).toLocaleString('en-US')} events/s`;
    tables.push(
      `sustained batches of ${args.batchSize} (${args.batchConnections} connections) until ${args.sustained.toLocaleString('en-US')} events: ${rate(sustained.eventsPerSecond)} over ${sustained.seconds.toFixed(0)} s` +
        `${sustained.serverMicrosPerEvent === undefined ? '' : `, server CPU ${sustained.serverMicrosPerEvent.toFixed(1)} µs per event`}` +
        `${sustained.databaseMicrosPerEvent === undefined ? '' : `, PostgreSQL's ${sustained.databaseMicrosPerEvent.toFixed(1)}`}; ` +
        `first ${sustained.window.toLocaleString('en-US')} events ${rate(sustained.firstWindowRate)}, last ${rate(sustained.lastWindowRate)}; ` +
        `${sustained.notOk} answers not 200, ${sustained.errors} errors or timeouts`,
      `  each ${sustained.window.toLocaleString('en-US')} events in turn, thousand events/s: ${sustained.windows.map((w) => (w.eventsPerSecond / 1000).toFixed(1)).join(' ')}`,
      `  the same windows, server CPU µs an event: ${sustained.windows.map((w) => (w.serverMicrosPerEvent === undefined ? '?' : w.serverMicrosPerEvent.toFixed(1))).join(' ')}`,
      ...(sustained.databaseMicrosPerEvent === undefined
        ? []
        : [
            `  the same windows, PostgreSQL's CPU µs an event: ${sustained.windows.map((w) => (w.databaseMicrosPerEvent === undefined ? '?' : w.databaseMicrosPerEvent.toFixed(1))).join(' ')}`,
          ]),
      `  the same windows, the machine's cores idle / stolen by the hypervisor, %: ${sustained.windows.map((w) => `${Math.round(w.idleShare * 100)}/${Math.round(w.stealShare * 100)}`).join(' ')}`,
      `  group commit over the whole run (the server's /metrics): ${sustainedCommits}`,
      '',
    );
  }

  // Issue 2's targets (on the last phase), then issue 11's.
  for (const f of last.figures) {
    if (f.scenario === 'segment') {
      const native = last.figures.find((g) => g.scenario === 'batch');
      if (native !== undefined) {
        const versus = f.inlet.requestsPerSecond / native.inlet.requestsPerSecond;
        checks.push({
          description: 'Segment /v1/batch events/s ≥ 0.8× native batch events/s, same run (issue 10)',
          actual: `${versus.toFixed(2)}×`,
          pass: versus >= 0.8,
        });
      }
      continue;
    }
    const ratio = f.inlet.requestsPerSecond / f.bare!.requestsPerSecond;
    if (f.scenario === 'single') {
      checks.push({
        description: 'single event req/s ≥ 0.6× bare node:http (issue 2)',
        actual: `${ratio.toFixed(2)}×`,
        pass: ratio >= 0.6,
      });
      checks.push({
        description: 'single event p99 ≤ 5 ms (issue 2)',
        actual: `${f.inlet.p99Ms.toFixed(1)} ms`,
        pass: f.inlet.p99Ms <= 5,
      });
    } else if (baseline !== undefined) {
      const events = f.inlet.requestsPerSecond * f.eventsPerRequest;
      const versus = events / baseline.eventsPerSecond;
      const target = database.dialect === 'sqlite' ? 0.6 : 0.7;
      checks.push({
        description: `batch events/s ≥ ${target}× raw insert baseline on a fresh table (issue ${database.dialect === 'sqlite' ? 2 : 4})`,
        actual: `${versus.toFixed(2)}×`,
        pass: versus >= target,
      });
    }
  }
  checks.push(...issue11Checks(args, database.dialect, last, empty, rss));
  if (sustained !== undefined) {
    const target = database.dialect === 'sqlite' ? 50_000 : 40_000;
    const at = `${args.sustained.toLocaleString('en-US')} events after ${last.prefilled.toLocaleString('en-US')} prefilled`;
    checks.push({
      description: `sustained ≥ ${target.toLocaleString('en-US')} events/s over ${at} (issue 35)`,
      actual: `${Math.round(sustained.eventsPerSecond).toLocaleString('en-US')} events/s`,
      pass: sustained.eventsPerSecond >= target,
    });
    const ratio = sustained.firstWindowRate > 0 ? sustained.lastWindowRate / sustained.firstWindowRate : 0;
    checks.push({
      description: `last ${sustained.window.toLocaleString('en-US')} events ≥ 0.85× the first ${sustained.window.toLocaleString('en-US')} (issue 35)`,
      actual: `${ratio.toFixed(2)}×`,
      pass: ratio >= 0.85,
    });
  }

  let storedOk = true;
  for (const source of ['api', 'segment'] as const) {
    if (source === 'segment' && !args.scenarios.includes('segment')) continue;
    const sourceOk =
      stored[source] >= acknowledged[source] && stored[source] - acknowledged[source] <= unseenBound[source];
    checks.push({
      description: `every acknowledged event is stored (rows with source "${source}"${source === 'api' && args.prefill > 0 ? ', prefill not counted' : ''} vs ${source === 'api' ? '201s / 200s' : '200s'} × batch size, warm-up included)`,
      actual: `${stored[source]} stored, ${acknowledged[source]} acknowledged${stored[source] > acknowledged[source] ? ` (+${stored[source] - acknowledged[source]} answered after the generator stopped listening, at most ${unseenBound[source]})` : ''}`,
      pass: sourceOk,
    });
    storedOk &&= sourceOk;
  }
  checks.push({
    description: 'server shut down cleanly (SIGTERM → exit 0)',
    actual: `exit code ${exitCode}`,
    pass: exitCode === 0,
  });

  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const generator =
    args.generator === 'wrk'
      ? 'wrk 1 thread, requests built by a Lua script (its CPU share of one core in the "gen CPU" column)'
      : 'autocannon in the bench process (its CPU share in the "gen CPU" column)';
  process.stdout.write(
    [
      '',
      `command:  ${commandLine}`,
      `machine:  ${availableParallelism()} cores (${cpu}), node ${process.version}, ${process.platform}/${process.arch}; load average ${loadBefore.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end`,
      `database: ${database.description}${database.dialect === 'sqlite' ? `, synchronous=${args.sqliteSynchronous.toUpperCase()}` : ''}${args.prefill > 0 ? `; prefill ${args.prefill.toLocaleString('en-US')} events in ${prefillSeconds.toFixed(0)} s${database.dialect === 'sqlite' ? ` (indexes: ${args.prefillIndexes})` : ''}` : ''}`,
      `server:   node ${[...args.serverNodeOptions, 'dist/main.js'].join(' ')}; RSS max ${mb(rss.rssBytes)} (anonymous ${mb(rss.anonBytes)}, file-backed ${mb(rss.fileBytes)}), sampled every 250 ms`,
      `load:     ${generator}; ${args.connections} connections single, ${args.batchConnections} batch; ${args.durationSeconds} s per run after ${args.warmupSeconds} s warm-up; ${args.ids} external ids, ${SUBJECTS.toLocaleString('en-US')} subjects, ${PROPERTIES_BYTES}-byte properties; server log level ${args.logLevel}, rate limit on but 10,000,000/s`,
      '',
      ...tables,
      ...(stages === ''
        ? []
        : [
            "where the server's time goes (--stages; main thread, wall time sampled by V8, so a synchronous fsync counts):",
            stages,
            '',
          ]),
      'targets:',
      formatTargets(checks),
      '',
    ].join('\n'),
  );
  // Performance targets depend on the machine; only a correctness failure makes the run fail.
  return storedOk && exitCode === 0 ? 0 : 1;
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`;

function describeDisk(disk: DiskFootprint): string {
  const perEvent = disk.events === 0 ? 0 : disk.bytes / disk.events;
  return `${mb(disk.bytes)} for ${disk.events.toLocaleString('en-US')} events (${disk.what}) = ${perEvent.toFixed(0)} B/event, ${(perEvent - PROPERTIES_BYTES).toFixed(0)} beyond the ${PROPERTIES_BYTES} B of properties`;
}

/** `events (rows) 572, events_by_name 138, …` (B/event, parts of 1 B/event or more). */
function describeParts(disk: DiskFootprint): string {
  const perEvent = (bytes: number) => (disk.events === 0 ? 0 : bytes / disk.events);
  return (disk.parts ?? [])
    .filter((p) => perEvent(p.bytes) >= 1)
    .map((p) => `${p.name} ${perEvent(p.bytes).toFixed(0)}`)
    .join(', ');
}

async function footprint(
  database: BenchDatabase,
  sqliteFile: string | undefined,
  parts: boolean,
): Promise<DiskFootprint> {
  return sqliteFile !== undefined ? sqliteFootprint(sqliteFile, parts) : postgresFootprint(database.url);
}

/** Rows of one source the runs stored (the prefill's rows left out). */
async function countRun(
  database: BenchDatabase,
  sqliteFile: string | undefined,
  source: 'api' | 'segment',
  prefill: { from: number; to: number } | undefined,
  prefilled: number,
): Promise<number> {
  if (sqliteFile === undefined) return (await database.countEvents(source)) - prefilled;
  const db = new BetterSqlite3(sqliteFile, { readonly: true });
  try {
    const count = (where: string, ...params: unknown[]) =>
      (
        db
          .prepare(`SELECT count(*) AS n FROM events WHERE source = ? AND ${where}`)
          .get(SOURCE_CODES.code(source), ...params) as {
          n: number;
        }
      ).n;
    return prefill === undefined ? count('1') : count('position < ?', prefill.from) + count('position > ?', prefill.to);
  } finally {
    db.close();
  }
}

function issue11Checks(
  args: BenchArgs,
  dialect: 'sqlite' | 'postgres',
  last: Phase,
  empty: Phase | undefined,
  rss: MemoryPeak,
): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const at = `at ${last.prefilled.toLocaleString('en-US')} prefilled${last.prefilled < 10_000_000 ? ', target is at 10 M' : ''}`;
  const batch = last.figures.find((f) => f.scenario === 'batch');
  const single = last.figures.find((f) => f.scenario === 'single');
  if (batch !== undefined) {
    const events = batch.inlet.requestsPerSecond * batch.eventsPerRequest;
    const target = dialect === 'sqlite' ? 50_000 : 40_000;
    checks.push({
      description: `batch ≥ ${target.toLocaleString('en-US')} events/s, ${args.ids} ids (issue 11, ${at})`,
      actual: `${Math.round(events).toLocaleString('en-US')} events/s`,
      pass: events >= target,
    });
  }
  if (single !== undefined && single.bare !== undefined) {
    const target = dialect === 'sqlite' ? 0.5 : 0.4;
    const ratio = single.inlet.requestsPerSecond / single.bare.requestsPerSecond;
    checks.push({
      description: `single event req/s ≥ ${target}× bare node:http (issue 11, ${at})`,
      actual: `${ratio.toFixed(2)}×`,
      pass: ratio >= target,
    });
    const p99 = single.inlet.p99Ms / single.bare.p99Ms;
    checks.push({
      description: `single event p99 ≤ 3× bare p99 (issue 11)`,
      actual: `${single.inlet.p99Ms.toFixed(1)} ms = ${p99.toFixed(1)}× ${single.bare.p99Ms.toFixed(1)} ms`,
      pass: p99 <= 3,
    });
  }
  if (empty !== undefined) {
    for (const f of last.figures) {
      const before = empty.figures.find((g) => g.scenario === f.scenario);
      if (before === undefined || f.scenario === 'segment') continue;
      const throughput = f.inlet.requestsPerSecond / before.inlet.requestsPerSecond;
      const p99 = f.inlet.p99Ms / before.inlet.p99Ms;
      checks.push({
        description: `${f.scenario}: flat, throughput and p99 at ${last.prefilled.toLocaleString('en-US')} within 15 % of the empty table (issue 11)`,
        actual: `throughput ${throughput.toFixed(2)}×, p99 ${p99.toFixed(2)}×`,
        pass: throughput >= 0.85 && p99 <= 1.15,
      });
    }
  }
  if (last.disk !== undefined && last.disk.events > 0) {
    const beyond = last.disk.bytes / last.disk.events - PROPERTIES_BYTES;
    checks.push({
      description: `≤ 250 bytes per event on disk beyond the properties' JSON bytes (issue 11, clarifications §9; ${last.disk.events.toLocaleString('en-US')} events)`,
      actual: `${beyond.toFixed(0)} B`,
      pass: beyond <= 250,
    });
  }
  checks.push({
    description: 'server RSS ≤ 300 MB throughout (issue 11)',
    actual: `max ${mb(rss.rssBytes)}`,
    pass: rss.rssBytes <= 300e6,
  });
  return checks;
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
