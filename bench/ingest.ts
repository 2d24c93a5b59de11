// `npm run bench`: the real server (a separate process, on a fresh database) against a bare
// node:http server and a raw-insert baseline, loaded by autocannon on 127.0.0.1. See bench/README.md.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseBenchArgs, USAGE, type BenchArgs, type Scenario } from './args.js';
import { postgresRawInsert, sqliteRawInsert, type BaselineResult } from './baselines.js';
import { postgresDatabase, sqliteDatabase, tempDirectory, type BenchDatabase } from './database.js';
import { runLoad, stopLoad, type LoadResult } from './load.js';
import { cleanUp, cpuSeconds, freePort, installExitHandlers, onCleanup, startChild, waitUntilReady } from './processes.js';
import { formatTable, formatTargets, type Line, type TargetCheck } from './report.js';
import { ExternalIds, batchJson, eventJson, segmentBatchJson } from './workload.js';

const ROOT = new URL('..', import.meta.url).pathname;

interface Measured extends LoadResult {
  /** Server CPU time (user + system) per request, in microseconds; noise-resistant on a shared machine. */
  cpuMicrosPerRequest: number | undefined;
  commits: string;
}

interface ScenarioFigures {
  scenario: Scenario;
  inlet: Measured;
  /** Not run for segment: that scenario is compared with the native batch. */
  bare: Measured | undefined;
  eventsPerRequest: number;
}

function build(): void {
  const result = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (result.status !== 0) throw new Error('npm run build failed');
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
  const server = startChild('inlet server', process.execPath, [...nodeArgs, ...args.serverNodeOptions, join(ROOT, 'dist/main.js')], {
    PATH: process.env.PATH,
    HOST: '127.0.0.1',
    PORT: String(port),
    INLET_DATABASE_URL: database.url,
    INLET_ADMIN_TOKEN: adminToken,
    INLET_LOG_LEVEL: args.logLevel,
    INLET_SQLITE_SYNCHRONOUS: args.sqliteSynchronous,
    // The limiter runs as in production, with a budget too large to refuse (2000/s by default would cap the run).
    INLET_RATE_LIMIT_RPS: '10000000',
  }, logFile);
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const product = await adminPost(base, adminToken, '/admin/v1/products', { name: 'bench' });
  const key = await adminPost(base, adminToken, `/admin/v1/products/${product.id}/keys`, { kind: 'events', name: 'bench' });
  return { server, base, productId: product.id!, keyId: key.id!, key: key.key!, logFile };
}

async function startBare(dir: string) {
  const port = await freePort();
  const logFile = join(dir, 'bare.log');
  const bare = startChild('bare server', process.execPath, ['--import', 'tsx', join(ROOT, 'bench/bare-server.ts')], { PATH: process.env.PATH, PORT: String(port) }, logFile);
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(bare, base, logFile);
  return { bare, base };
}

interface CommitCounters {
  commits: number;
  events: number;
  seconds: number;
}

/** Group-commit counters from the server's own /metrics, to show how large its commits were. */
async function commitCounters(base: string): Promise<CommitCounters | undefined> {
  try {
    const text = await (await fetch(`${base}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
    const counters = {
      commits: value('inlet_ingest_commit_events_count'),
      events: value('inlet_ingest_commit_events_sum'),
      seconds: value('inlet_ingest_commit_duration_seconds_sum'),
    };
    return Object.values(counters).every(Number.isFinite) ? counters : undefined;
  } catch {
    return undefined;
  }
}

function describeCommits(before: CommitCounters | undefined, after: CommitCounters | undefined): string {
  if (before === undefined || after === undefined) return 'unknown';
  const commits = after.commits - before.commits;
  if (commits === 0) return 'no commits';
  const events = after.events - before.events;
  const ms = ((after.seconds - before.seconds) * 1000) / commits;
  return `${commits} commits, ${(events / commits).toFixed(1)} events and ${ms.toFixed(2)} ms each on average`;
}

function describeStatus(result: LoadResult, okStatus: number): string {
  const others = Object.entries(result.statusCounts).filter(([status]) => status !== String(okStatus));
  const parts = others.map(([status, count]) => `${count}×${status}`);
  if (result.errors > 0) parts.push(`${result.errors} errors`);
  if (result.timeouts > 0) parts.push(`${result.timeouts} timeouts`);
  return parts.length === 0 ? '0' : parts.join(', ');
}

async function main(): Promise<number> {
  // `--instances 1,2,4` (with `--backend postgres`): the scaling figure, bench/scaling.ts.
  if (process.argv.slice(2).some((a) => a === '--instances' || a.startsWith('--instances=') || a === '--backend' || a.startsWith('--backend='))) {
    return (await import('./scaling.js')).scalingMain(process.argv.slice(2));
  }
  // `--destinations`: ingest without and with a webhook and a NATS destination, bench/destinations.ts.
  if (process.argv.slice(2).includes('--destinations')) return (await import('./destinations.js')).destinationsMain(process.argv.slice(2));
  let args: BenchArgs;
  try {
    args = parseBenchArgs(process.argv.slice(2), process.env);
  } catch (error) {
    process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
    return 2;
  }
  const perRun = args.warmupSeconds + args.durationSeconds + 2;
  installExitHandlers(perRun * 2 * args.scenarios.length + args.durationSeconds + 180);
  onCleanup(stopLoad);

  const commandLine = `npm run bench --${process.argv.slice(2).map((a) => ` ${a}`).join('')}`;
  process.stdout.write(`${commandLine}\n`);
  if (args.build) build();

  const loadBefore = loadavg()[0]!;
  const dir = tempDirectory();
  const database = args.postgresUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(args.postgresUrl);
  process.stdout.write(`database: ${database.description}\n`);
  const inlet = await startInlet(args, database, dir);
  const { bare, base: bareBase } = await startBare(dir);
  const runId = randomBytes(4).toString('hex');
  const headers = { authorization: `Bearer ${inlet.key}` };

  const figures: ScenarioFigures[] = [];
  const acknowledged = { api: 0, segment: 0 };
  // Events the server may have stored without autocannon seeing the answer (in flight at the end of a run).
  const unseenBound = { api: 0, segment: 0 };
  for (const scenario of args.scenarios) {
    const eventsPerRequest = scenario === 'single' ? 1 : args.batchSize;
    const path = scenario === 'single' ? '/api/v2/events' : scenario === 'batch' ? '/api/v2/events/batch' : '/v1/batch';
    const okStatus = scenario === 'single' ? 201 : 200;
    // analytics-node sends Basic auth (and the key in the body) under application/json.
    const scenarioHeaders = scenario === 'segment' ? { authorization: `Basic ${Buffer.from(`${inlet.key}:`).toString('base64')}` } : headers;
    const source = scenario === 'segment' ? 'segment' : 'api';
    const run = async (target: 'inlet' | 'bare', seconds: number): Promise<Measured> => {
      const pid = target === 'inlet' ? inlet.server.process.pid : bare.process.pid;
      const ids = new ExternalIds(`${runId}-${scenario}-${target}-${seconds}-${Date.now()}`);
      let n = 0;
      const body =
        scenario === 'single' ? () => eventJson(ids.take(), n++) : scenario === 'batch' ? () => batchJson(ids, args.batchSize, n++) : () => segmentBatchJson(args.batchSize, n++, inlet.key);
      const commitsBefore = target === 'inlet' ? await commitCounters(inlet.base) : undefined;
      const cpuBefore = cpuSeconds(pid);
      const result = await runLoad(
        { url: target === 'inlet' ? inlet.base : bareBase, path, headers: scenarioHeaders, body, connections: args.connections, durationSeconds: seconds },
        target === 'inlet' ? okStatus : 201,
      );
      const cpuAfter = cpuSeconds(pid);
      const commits = target === 'inlet' ? describeCommits(commitsBefore, await commitCounters(inlet.base)) : '';
      const answered = Object.values(result.statusCounts).reduce((sum, count) => sum + count, 0);
      const cpuMicrosPerRequest = cpuBefore === undefined || cpuAfter === undefined || answered === 0 ? undefined : ((cpuAfter - cpuBefore) * 1e6) / answered;
      if (target === 'inlet') {
        acknowledged[source] += result.ok * eventsPerRequest;
        // Requests that timed out or were cut off may still have been stored.
        unseenBound[source] += (args.connections + result.errors) * eventsPerRequest;
      }
      return { ...result, cpuMicrosPerRequest, commits };
    };
    process.stdout.write(`${scenario}: inlet…`);
    if (args.warmupSeconds > 0) await run('inlet', args.warmupSeconds);
    const inletResult = await run('inlet', args.durationSeconds);
    let bareResult: Measured | undefined;
    if (scenario !== 'segment') {
      process.stdout.write(' bare…');
      if (args.warmupSeconds > 0) await run('bare', args.warmupSeconds);
      bareResult = await run('bare', args.durationSeconds);
    }
    process.stdout.write(' done\n');
    figures.push({ scenario, inlet: inletResult, bare: bareResult, eventsPerRequest });
  }

  const exitCode = await inlet.server.stop();
  await bare.stop();
  const stored = { api: await database.countEvents('api'), segment: await database.countEvents('segment') };

  let baseline: BaselineResult | undefined;
  if (args.scenarios.includes('batch')) {
    process.stdout.write('raw insert baseline…\n');
    baseline =
      database.dialect === 'sqlite'
        ? await sqliteRawInsert(dir, args.sqliteSynchronous, args.batchSize, args.durationSeconds)
        : await postgresRawInsert(database.url, inlet.productId, inlet.keyId, args.batchSize, args.durationSeconds);
  }

  const lines: Line[] = [];
  const checks: TargetCheck[] = [];
  for (const f of figures) {
    const label = f.scenario === 'single' ? 'single v2 event' : f.scenario === 'batch' ? `batch of ${args.batchSize}` : `Segment /v1/batch of ${args.batchSize}`;
    for (const [who, result] of [['inlet', f.inlet], ['bare node:http', f.bare]] as const) {
      if (result === undefined) continue;
      lines.push({
        name: `${label}: ${who}`,
        requestsPerSecond: result.requestsPerSecond,
        eventsPerSecond: result.requestsPerSecond * f.eventsPerRequest,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        cpuMicrosPerRequest: result.cpuMicrosPerRequest,
        failures: describeStatus(result, who === 'inlet' && f.scenario !== 'single' ? 200 : 201),
      });
    }
    if (f.scenario === 'segment') {
      const native = figures.find((g) => g.scenario === 'batch');
      if (native !== undefined) {
        const versus = f.inlet.requestsPerSecond / native.inlet.requestsPerSecond;
        checks.push({ description: 'Segment /v1/batch events/s ≥ 0.8× native batch events/s, same run (issue 10)', actual: `${versus.toFixed(2)}×`, pass: versus >= 0.8 });
      }
      continue;
    }
    const ratio = f.inlet.requestsPerSecond / f.bare!.requestsPerSecond;
    if (f.scenario === 'single') {
      checks.push({ description: 'single event req/s ≥ 0.6× bare node:http (issue 2)', actual: `${ratio.toFixed(2)}×`, pass: ratio >= 0.6 });
      checks.push({ description: 'single event p99 ≤ 5 ms (issue 2)', actual: `${f.inlet.p99Ms.toFixed(1)} ms`, pass: f.inlet.p99Ms <= 5 });
    } else {
      checks.push({ description: 'batch req/s vs bare node:http (no target)', actual: `${ratio.toFixed(2)}×`, pass: true });
      if (baseline !== undefined) {
        const events = f.inlet.requestsPerSecond * f.eventsPerRequest;
        const versus = events / baseline.eventsPerSecond;
        const target = database.dialect === 'sqlite' ? 0.6 : 0.7;
        checks.push({
          description: `batch events/s ≥ ${target}× raw insert baseline (issue ${database.dialect === 'sqlite' ? 2 : 4})`,
          actual: `${versus.toFixed(2)}×`,
          pass: versus >= target,
        });
      }
    }
  }
  if (baseline !== undefined) {
    lines.push({ name: `baseline: ${baseline.label}`, requestsPerSecond: undefined, eventsPerSecond: baseline.eventsPerSecond, p50Ms: undefined, p99Ms: undefined, cpuMicrosPerRequest: undefined, failures: '0' });
  }
  let storedOk = true;
  for (const source of ['api', 'segment'] as const) {
    if (source === 'segment' && !args.scenarios.includes('segment')) continue;
    const sourceOk = stored[source] >= acknowledged[source] && stored[source] - acknowledged[source] <= unseenBound[source];
    checks.push({
      description: `every acknowledged event is stored (rows with source "${source}" vs ${source === 'api' ? '201s / 200s' : '200s'} × batch size, warm-up included)`,
      actual: `${stored[source]} stored, ${acknowledged[source]} acknowledged${stored[source] > acknowledged[source] ? ` (+${stored[source] - acknowledged[source]} answered after autocannon stopped listening, at most ${unseenBound[source]})` : ''}`,
      pass: sourceOk,
    });
    storedOk &&= sourceOk;
  }
  checks.push({ description: 'server shut down cleanly (SIGTERM → exit 0)', actual: `exit code ${exitCode}`, pass: exitCode === 0 });

  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  process.stdout.write(
    [
      '',
      `command:  ${commandLine}`,
      `machine:  ${availableParallelism()} cores (${cpu}), node ${process.version}, ${process.platform}/${process.arch}; load average ${loadBefore.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end`,
      `database: ${database.description}${database.dialect === 'sqlite' ? `, synchronous=${args.sqliteSynchronous.toUpperCase()}` : ''}`,
      `server:   node ${[...args.serverNodeOptions, 'dist/main.js'].join(' ')}`,
      `load:     autocannon, ${args.connections} connections, ${args.durationSeconds} s per run after ${args.warmupSeconds} s warm-up, unique external_id per event; server log level ${args.logLevel}, rate limit on but 10,000,000/s`,
      '',
      formatTable(lines),
      '',
      'group commit (from the server\'s /metrics, measured runs):',
      ...figures.map((f) => `  ${f.scenario}: ${f.inlet.commits}`),
      '',
      'targets:',
      formatTargets(checks),
      '',
    ].join('\n'),
  );
  // Performance targets depend on the machine; only a correctness failure makes the run fail.
  return storedOk && exitCode === 0 ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (error) {
  process.stderr.write(`bench: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
} finally {
  await cleanUp();
}
process.exit(code);
