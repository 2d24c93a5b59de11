// `npm run bench -- --destinations`: issue 13's performance figures. The batch ingest bench against one Inlet
// server, in interleaved rounds without and with two destinations (events-out §6): a webhook with batches of
// 100 to a local receiver that verifies every signature with `standardwebhooks` (bench/webhook-receiver.ts,
// its own process), and a NATS JetStream destination to a nats-server of its own. Reports ingest events/s
// of both variants, delivered messages/s, the lag sampled every second during the load (does it grow?),
// how long the backlog took to drain after the load, and whether every stored event reached both
// destinations. See bench/README.md ("Destinations").
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { adminClient, parseDatabase, SERVER_NODE_FLAG } from './args.js';
import { postgresDatabase, sqliteDatabase, tempDirectory } from './database.js';
import { pacedLoad, runLoad, stopLoad, type LoadResult } from './load.js';
import {
  cpuSeconds,
  freePort,
  installExitHandlers,
  machineSeconds,
  onCleanup,
  startChild,
  waitUntilReady,
  buildServer,
  serverEnv,
} from './processes.js';
import { ExternalIds, batchJson } from './workload.js';
import { median } from './report.js';

const ROOT = new URL('..', import.meta.url).pathname;

export const DESTINATIONS_USAGE = `npm run bench -- --destinations [options]
  --database <url|sqlite>   sqlite (default: fresh temp file) or postgres://… on 127.0.0.1 (fresh database)
  --rounds <n>              interleaved rounds of (without, with destinations) (default 3)
  --duration <s>            seconds of measured load per run (default 10)
  --warmup <s>              seconds of unmeasured load before each run (default 2)
  --connections <n>         concurrent connections (default 16)
  --batch-size <n>          events per batch request (default 100)
  --webhook-batch <n>       the webhook destination's batch.max_messages (default 100)
  --verify-official         the receiver verifies every request with the official standardwebhooks package (default:
                            node:crypto HMAC on every request, the official package on every 10th, checked byte-equal)
  --drain <n>               instead of the rounds: ingest n events first, then time each destination (webhook, NATS,
                            both) delivering them from the beginning with nothing else running, CPU per message by part
  --transformation <file>   with --drain: time the webhook alone, alternating without and with this {"steps": […]} as
                            the webhook's own transformation (twice each), instead of webhook, NATS and both
  --webhook-only            the rounds with the webhook alone (issue 35: a live webhook costs ingest at most 10 %), then
                            ingest paced at half the rounds' peak with a fresh webhook: how long each request's
                            oldest message took from being received by Inlet to reaching the receiver (≤ 2 s)
  --in-process              deliver on the server's main thread (INLET_DESTINATIONS_WORKER=false), not in its worker
  --no-build                use dist/ as it is
  --cpu-prof <dir>          run the server with node --cpu-prof, profiles written to <dir>`;

interface Args {
  postgresUrl: string | undefined;
  rounds: number;
  durationSeconds: number;
  warmupSeconds: number;
  connections: number;
  batchSize: number;
  webhookBatch: number;
  build: boolean;
  cpuProfileDir: string | undefined;
  inProcess: boolean;
  webhookOnly: boolean;
  verifyOfficial: boolean;
  drain: number | undefined;
  /** A destination transformation ({"steps": […]}) for the drain's webhook. */
  transformation: unknown;
}

function parse(argv: string[]): Args {
  const { values } = parseArgs({
    args: argv,
    options: {
      destinations: { type: 'boolean' },
      database: { type: 'string' },
      rounds: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      'batch-size': { type: 'string' },
      'webhook-batch': { type: 'string' },
      'no-build': { type: 'boolean' },
      'in-process': { type: 'boolean' },
      'webhook-only': { type: 'boolean' },
      'verify-official': { type: 'boolean' },
      drain: { type: 'string' },
      transformation: { type: 'string' },
      'cpu-prof': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${DESTINATIONS_USAGE}\n`);
    process.exit(0);
  }
  const whole = (name: string, raw: string | undefined, fallback: number, min = 1) => {
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min)
      throw new Error(`--${name} must be a whole number ≥ ${min}, got "${raw}"`);
    return value;
  };
  const postgresUrl = parseDatabase(values.database ?? process.env.INLET_BENCH_DATABASE_URL ?? 'sqlite');
  return {
    postgresUrl,
    rounds: whole('rounds', values.rounds, 3),
    durationSeconds: whole('duration', values.duration, 10),
    warmupSeconds: whole('warmup', values.warmup, 2, 0),
    connections: whole('connections', values.connections, 16),
    batchSize: whole('batch-size', values['batch-size'], 100),
    webhookBatch: whole('webhook-batch', values['webhook-batch'], 100),
    build: values['no-build'] !== true,
    cpuProfileDir: values['cpu-prof'],
    inProcess: values['in-process'] === true,
    webhookOnly: values['webhook-only'] === true,
    verifyOfficial: values['verify-official'] === true,
    drain: values.drain === undefined ? undefined : whole('drain', values.drain, 0),
    transformation:
      values.transformation === undefined ? undefined : JSON.parse(readFileSync(values.transformation, 'utf8')),
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- where the CPU goes (Linux /proc): per process and, for the server, per thread ---------------------

/** utime + stime of a /proc stat line, in seconds (USER_HZ 100). */
function statSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** CPU seconds of each thread of `pid`, by thread id. */
function threadSeconds(pid: number | undefined): Map<number, number> {
  const out = new Map<number, number>();
  if (pid === undefined) return out;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        out.set(Number(tid), statSeconds(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')));
      } catch {
        // the thread ended
      }
    }
  } catch {
    // not Linux, or the process ended
  }
  return out;
}

interface CpuSnapshot {
  server: Map<number, number>;
  receiver: number;
  nats: number;
  generator: number;
  machine: { busy: number; steal: number; all: number };
}

/** CPU seconds used between two snapshots, by part. */
interface CpuUse {
  serverMain: number;
  worker: number;
  serverOther: number;
  receiver: number;
  nats: number;
  /** This process: autocannon (the load generator) and the lag sampler. */
  generator: number;
  /** Everything else on the machine (other users' work). */
  outside: number;
  /** Idle core-seconds. */
  idle: number;
}

function cpuUse(before: CpuSnapshot, after: CpuSnapshot, serverPid: number, workerTid: number | undefined): CpuUse {
  const delta = (tid: number) => (after.server.get(tid) ?? 0) - (before.server.get(tid) ?? 0);
  let serverAll = 0;
  for (const tid of after.server.keys()) serverAll += delta(tid);
  const serverMain = delta(serverPid);
  const worker = workerTid === undefined ? 0 : delta(workerTid);
  const receiver = after.receiver - before.receiver;
  const nats = after.nats - before.nats;
  const generator = after.generator - before.generator;
  const busy = after.machine.busy - before.machine.busy;
  return {
    serverMain,
    worker,
    serverOther: serverAll - serverMain - worker,
    receiver,
    nats,
    generator,
    outside: Math.max(0, busy - serverAll - receiver - nats - generator),
    idle: after.machine.all - before.machine.all - busy,
  };
}

interface DestinationView {
  id: string;
  lag: number;
  delivered: number;
  status: string;
  last_error: string | null;
  secret?: string;
}

/** The receiver's GET /ages: per request, ms from its oldest message's received_at to its arrival there. */
interface AgeSummary {
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

interface RoundResult {
  variant: 'without' | 'with';
  load: LoadResult;
  eventsPerSecond: number;
  cpuMicrosPerEvent: number | undefined;
  /** with: lag samples (webhook, nats) taken every second of the measured load. */
  lagSamples: Array<[number, number]>;
  /** with: messages the receiver / the stream got during the measured load, per second. */
  webhookPerSecond: number;
  natsPerSecond: number;
  /** with: seconds from the end of the load until both lags were 0 (undefined: did not drain in 120 s). */
  drainSeconds: number | undefined;
  /** CPU seconds by part during the measured load. */
  parts: CpuUse;
  /** The 1-minute load average at the end of the measured load. */
  loadAverage: number;
}

export async function destinationsMain(argv: string[]): Promise<number> {
  let args: Args;
  try {
    args = parse(argv);
  } catch (error) {
    process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}\n${DESTINATIONS_USAGE}\n`);
    return 2;
  }
  const perRound = 2 * (args.warmupSeconds + args.durationSeconds + 5) + 120;
  installExitHandlers(perRound * args.rounds + 240);
  onCleanup(stopLoad);
  const commandLine = `npm run bench --${argv.map((a) => ` ${a}`).join('')}`;
  process.stdout.write(`${commandLine}\n`);
  if (args.build) {
    buildServer();
  }
  const loadBefore = loadavg()[0]!;
  const dir = tempDirectory();

  // NATS with JetStream, its own server and store (never the machine's).
  const natsPort = await freePort();
  const natsStore = join(dir, 'nats');
  mkdirSync(natsStore);
  const natsLog = join(dir, 'nats.log');
  const nats = startChild(
    'nats-server',
    'nats-server',
    ['-js', '-sd', natsStore, '-a', '127.0.0.1', '-p', String(natsPort)],
    { PATH: process.env.PATH },
    natsLog,
  );
  let nc: Awaited<ReturnType<typeof connect>> | undefined;
  for (let i = 0; i < 100 && nc === undefined; i++) {
    try {
      nc = await connect({ servers: `127.0.0.1:${natsPort}`, reconnect: false });
    } catch {
      if (nats.process.exitCode !== null) throw new Error(`nats-server exited; see ${natsLog}`);
      await sleep(100);
    }
  }
  if (nc === undefined) throw new Error(`nats-server did not accept connections; see ${natsLog}`);
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'INLET', subjects: ['inlet.>'], duplicate_window: 120_000_000_000 });
  const natsConnection = nc;
  onCleanup(() => natsConnection.close());
  const streamMessages = async () => (await jsm.streams.info('INLET')).state.messages;

  // The webhook receiver.
  const receiverPort = await freePort();
  const receiverLog = join(dir, 'receiver.log');
  const receiver = startChild(
    'webhook receiver',
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'bench/webhook-receiver.ts')],
    { PATH: process.env.PATH, PORT: String(receiverPort), VERIFY: args.verifyOfficial ? 'official' : 'native' },
    receiverLog,
  );
  const receiverBase = `http://127.0.0.1:${receiverPort}`;
  await waitUntilReady(receiver, `${receiverBase}/counts`, receiverLog);
  const receiverCounts = async () =>
    (await (await fetch(`${receiverBase}/counts`)).json()) as {
      mode: string;
      requests: number;
      messages: number;
      distinct: number;
      invalid: number;
      officialChecked: number;
      officialFailed: number;
      mismatched: number;
    };

  // Inlet.
  const database = args.postgresUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(args.postgresUrl);
  process.stdout.write(`database: ${database.description}\n`);
  const port = await freePort();
  const adminToken = randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const server = startChild(
    'inlet server',
    process.execPath,
    [
      ...(args.cpuProfileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${args.cpuProfileDir}`]),
      SERVER_NODE_FLAG,
      join(ROOT, 'dist/main.js'),
    ],
    serverEnv(
      { port, databaseUrl: database.url, adminToken, logLevel: 'info', outbound: true },
      { INLET_DESTINATIONS_WORKER: args.inProcess ? 'false' : 'true' },
    ),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  const admin = adminClient(base, adminToken);
  // The delivery worker's OS thread id, which it logs when it starts (src/delivery-worker.ts): with the first
  // destination (the first round's), so looked up when the CPU is counted. A thread that did not exist at a
  // snapshot counts from 0 there, which is its whole CPU time.
  let workerTidFound: number | undefined;
  const workerTid = (): number | undefined => {
    if (workerTidFound === undefined && !args.inProcess) {
      const line = readFileSync(logFile, 'utf8')
        .split('\n')
        .find((l) => l.includes('delivery worker started'));
      if (line !== undefined) workerTidFound = (JSON.parse(line) as { tid?: number }).tid;
    }
    return workerTidFound;
  };
  const snapshot = (): CpuSnapshot => {
    const cpu = process.cpuUsage();
    return {
      server: threadSeconds(server.process.pid),
      receiver: cpuSeconds(receiver.process.pid) ?? 0,
      nats: cpuSeconds(nats.process.pid) ?? 0,
      generator: (cpu.user + cpu.system) / 1e6,
      machine: machineSeconds(),
    };
  };

  const product = (await admin('POST', '/products', { name: 'bench' }))!;
  const key = (await admin('POST', `/products/${product.id}/keys`, { kind: 'events', name: 'bench' }))!;
  const productPath = `/products/${product.id as string}`;
  const headers = { authorization: `Bearer ${key.key as string}` };
  const runId = randomBytes(4).toString('hex');

  let requestN = 0;
  const lines0: string[] = [];
  const fmt0 = (n: number) => Math.round(n).toLocaleString('en-US');
  const createWebhook = async (name: string, start: string, transformation?: unknown) => {
    const webhook = (await admin('POST', `${productPath}/destinations`, {
      type: 'webhook',
      name,
      url: `${receiverBase}/hook`,
      batch: { max_messages: args.webhookBatch },
      start,
      ...(transformation === undefined ? {} : { transformation }),
    })) as unknown as DestinationView;
    await fetch(`${receiverBase}/secret`, { method: 'PUT', body: webhook.secret! });
    return webhook;
  };
  const createNats = async (name: string, start: string) =>
    (await admin('POST', `${productPath}/destinations`, {
      type: 'nats',
      name,
      servers: [`nats://127.0.0.1:${natsPort}`],
      subject: 'inlet.{product_id}.{canonical_name}',
      start,
    })) as unknown as DestinationView;

  if (args.drain !== undefined) {
    // Drain mode: n events stored first, then each configuration delivers them all from the beginning, alone.
    const ids = new ExternalIds(`${runId}-drain`);
    let sent = 0;
    const post = async () => {
      while (sent < args.drain!) {
        const n = Math.min(args.batchSize, args.drain! - sent);
        sent += n;
        const response = await fetch(`${base}/api/v2/events/batch`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: batchJson(ids, n, requestN++),
        });
        if (response.status !== 200) throw new Error(`ingest answered ${response.status}: ${await response.text()}`);
      }
    };
    await Promise.all(Array.from({ length: 4 }, post));
    // The delivery worker starts with the first destination: started here, so that its start-up (loading its
    // modules, opening storage) is not counted as the first configuration's delivery.
    const warmUp = await createWebhook('drain-warm-up', 'now');
    for (let waited = 0; !args.inProcess && workerTid() === undefined; waited += 50) {
      if (waited > 30_000) throw new Error('the delivery worker did not start in 30 s');
      await sleep(50);
    }
    await admin('DELETE', `${productPath}/destinations/${warmUp.id}`);
    lines0.push(
      `drain of ${fmt0(args.drain)} stored events, from the beginning, nothing else running; CPU µs per delivered message by part`,
    );
    lines0.push(
      'config      load  seconds  msg/s (webhook / nats)   worker  main  other  receiver  nats-server  generator  outside  idle',
    );
    const configs =
      args.transformation === undefined
        ? (['webhook', 'nats', 'both'] as const)
        : (['webhook', 'steps', 'webhook', 'steps'] as const);
    for (const config of configs) {
      const made: DestinationView[] = [];
      if (config === 'steps') made.push(await createWebhook(`drain-steps`, 'beginning', args.transformation));
      else if (config !== 'nats') made.push(await createWebhook(`drain-webhook`, 'beginning'));
      if (config !== 'webhook') made.push(await createNats(`drain-nats`, 'beginning'));
      const before = snapshot();
      const started = performance.now();
      for (;;) {
        const views = await Promise.all(
          made.map(
            async (d) => (await admin('GET', `${productPath}/destinations/${d.id}`)) as unknown as DestinationView,
          ),
        );
        if (views.every((v) => v.lag === 0)) break;
        if (performance.now() - started > 600_000) throw new Error(`drain of ${config} did not finish in 600 s`);
        await sleep(50);
      }
      const seconds = (performance.now() - started) / 1000;
      const p = cpuUse(before, snapshot(), server.process.pid!, workerTid());
      for (const d of made) await admin('DELETE', `${productPath}/destinations/${d.id}`);
      const messages = args.drain * made.length;
      const per = (x: number) => ((x * 1e6) / messages).toFixed(1);
      const natsIn = config === 'nats' || config === 'both';
      const rates = [
        config !== 'nats' ? fmt0(args.drain / seconds) : '-',
        natsIn ? fmt0(args.drain / seconds) : '-',
      ].join(' / ');
      lines0.push(
        `${config.padEnd(10)} ${loadavg()[0]!.toFixed(1).padStart(5)} ${seconds.toFixed(2).padStart(8)}  ${rates.padEnd(22)} ${per(p.worker).padStart(7)} ${per(p.serverMain).padStart(5)} ${per(p.serverOther).padStart(6)} ${(config === 'nats' ? '-' : ((p.receiver * 1e6) / args.drain).toFixed(1)).padStart(9)} ${(natsIn ? ((p.nats * 1e6) / args.drain).toFixed(1) : '-').padStart(12)} ${per(p.generator).padStart(10)} ${per(p.outside).padStart(8)} ${`${Math.round((100 * p.idle) / (seconds * availableParallelism()))} %`.padStart(5)}`,
      );
    }
    lines0.push(
      '(worker, main, other: per message of all destinations in the configuration; receiver: per webhook message; nats-server: per NATS message)',
    );
  }

  const rounds: RoundResult[] = [];
  let expectedWebhook = 0;
  let expectedNats = 0;
  const loadFor = async (seconds: number, label: string) => {
    const ids = new ExternalIds(`${runId}-${label}`);
    return runLoad(
      {
        url: base,
        path: '/api/v2/events/batch',
        headers,
        body: () => batchJson(ids, args.batchSize, requestN++),
        connections: args.connections,
        durationSeconds: seconds,
      },
      200,
    );
  };
  for (let round = 1; round <= (args.drain === undefined ? args.rounds : 0); round++) {
    for (const variant of ['without', 'with'] as const) {
      process.stdout.write(`round ${round}, ${variant} destinations…`);
      let webhook: DestinationView | undefined;
      let natsDestination: DestinationView | undefined;
      if (variant === 'with') {
        webhook = await createWebhook(`bench-webhook-${round}`, 'now');
        if (!args.webhookOnly) natsDestination = await createNats(`bench-nats-${round}`, 'now');
      }
      if (args.warmupSeconds > 0) await loadFor(args.warmupSeconds, `${round}-${variant}-warm`);
      const show = async (d: DestinationView) =>
        (await admin('GET', `${productPath}/destinations/${d.id}`)) as unknown as DestinationView;
      const lagSamples: Array<[number, number]> = [];
      let sampling = variant === 'with';
      const sampler = (async () => {
        while (sampling) {
          await sleep(1000);
          if (!sampling) break;
          lagSamples.push([
            (await show(webhook!)).lag,
            natsDestination === undefined ? 0 : (await show(natsDestination)).lag,
          ]);
        }
      })();
      const webhookBefore = variant === 'with' ? (await receiverCounts()).distinct : 0;
      const natsBefore = natsDestination !== undefined ? await streamMessages() : 0;
      const cpuBefore = cpuSeconds(server.process.pid);
      const partsBefore = snapshot();
      const load = await loadFor(args.durationSeconds, `${round}-${variant}`);
      const cpuAfter = cpuSeconds(server.process.pid);
      const parts = cpuUse(partsBefore, snapshot(), server.process.pid!, workerTid());
      const loadAverage = loadavg()[0]!;
      sampling = false;
      await sampler;
      const webhookPerSecond =
        variant === 'with' ? ((await receiverCounts()).distinct - webhookBefore) / load.seconds : 0;
      const natsPerSecond = natsDestination !== undefined ? ((await streamMessages()) - natsBefore) / load.seconds : 0;
      let drainSeconds: number | undefined;
      if (variant === 'with') {
        const drainStart = Date.now();
        const showNats = async () => (natsDestination === undefined ? undefined : show(natsDestination));
        for (;;) {
          const [w, n] = [await show(webhook!), await showNats()];
          if (w.lag === 0 && (n?.lag ?? 0) === 0) {
            drainSeconds = (Date.now() - drainStart) / 1000;
            break;
          }
          if (Date.now() - drainStart > 120_000) {
            process.stdout.write(
              ` not drained after 120 s (webhook lag ${w.lag}, last error ${w.last_error}; nats lag ${n?.lag}, last error ${n?.last_error})`,
            );
            break;
          }
          await sleep(200);
        }
        const [w, n] = [await show(webhook!), await showNats()];
        expectedWebhook += w.delivered;
        expectedNats += n?.delivered ?? 0;
        await admin('DELETE', `${productPath}/destinations/${webhook!.id}`);
        if (natsDestination !== undefined) await admin('DELETE', `${productPath}/destinations/${natsDestination.id}`);
      }
      const events = load.ok * args.batchSize;
      rounds.push({
        variant,
        load,
        eventsPerSecond: events / load.seconds,
        cpuMicrosPerEvent:
          cpuBefore === undefined || cpuAfter === undefined || events === 0
            ? undefined
            : ((cpuAfter - cpuBefore) * 1e6) / events,
        lagSamples,
        webhookPerSecond,
        natsPerSecond,
        drainSeconds,
        parts,
        loadAverage,
      });
      process.stdout.write(` ${Math.round(events / load.seconds)} events/s\n`);
    }
  }

  // --webhook-only: ingest paced at half the rounds' peak (the median without), with a fresh webhook.
  let half: { perSecond: number; achieved: number; seconds: number; lags: number[]; ages: AgeSummary } | undefined;
  if (args.webhookOnly && args.drain === undefined) {
    const perSecond = median(rounds.filter((r) => r.variant === 'without').map((r) => r.eventsPerSecond)) / 2;
    process.stdout.write(`half load, ${Math.round(perSecond)} events/s paced, with a webhook…`);
    const webhook = await createWebhook('bench-webhook-half', 'now');
    const ids = new ExternalIds(`${runId}-half`);
    await fetch(`${receiverBase}/ages`); // only this phase's requests count
    const seconds = Math.max(2 * args.durationSeconds, 15);
    const paced = pacedLoad(
      {
        url: base,
        path: '/api/v2/events/batch',
        headers,
        body: () => batchJson(ids, args.batchSize, requestN++),
        connections: args.connections,
        requestsPerSecond: perSecond / args.batchSize,
      },
      200,
    );
    const lags: number[] = [];
    for (let second = 0; second < seconds; second++) {
      await sleep(1000);
      lags.push(((await admin('GET', `${productPath}/destinations/${webhook.id}`)) as unknown as DestinationView).lag);
    }
    const achieved = (await paced.stop()) * args.batchSize;
    const drainStart = Date.now();
    let view = (await admin('GET', `${productPath}/destinations/${webhook.id}`)) as unknown as DestinationView;
    while (view.lag > 0 && Date.now() - drainStart < 120_000) {
      await sleep(200);
      view = (await admin('GET', `${productPath}/destinations/${webhook.id}`)) as unknown as DestinationView;
    }
    expectedWebhook += view.delivered;
    const ages = (await (await fetch(`${receiverBase}/ages`)).json()) as AgeSummary;
    await admin('DELETE', `${productPath}/destinations/${webhook.id}`);
    half = { perSecond, achieved, seconds, lags, ages };
    process.stdout.write(` ${Math.round(achieved)} events/s, slowest delivery ${ages.maxMs} ms\n`);
  }

  const finalCounts = await receiverCounts();
  const finalStream = await streamMessages();
  const exitCode = await server.stop();
  await receiver.stop();
  const stored = await database.countEvents('api');

  const lines: string[] = [];
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  lines.push('', `command:  ${commandLine}`);
  lines.push(
    `machine:  ${availableParallelism()} cores (${cpus()[0]?.model ?? '?'}), node ${process.version}; load average ${loadBefore.toFixed(1)} at start, ${loadavg()[0]!.toFixed(1)} at end`,
  );
  lines.push(`database: ${database.description}`);
  lines.push(
    `load:     autocannon, POST /api/v2/events/batch of ${args.batchSize}, ${args.connections} connections, ${args.durationSeconds} s measured after ${args.warmupSeconds} s warm-up, ${args.rounds} interleaved rounds`,
  );
  lines.push(
    `delivery: ${args.inProcess ? "on the server's main thread (--in-process)" : 'in the delivery worker thread (default)'}`,
  );
  lines.push(
    `receiver: ${args.verifyOfficial ? 'verifies every request with the official standardwebhooks package (pure-JavaScript SHA-256)' : 'verifies every request with node:crypto HMAC-SHA256, every 10th (and the first 10) also with the official standardwebhooks package, the two signatures compared byte for byte'}`,
  );
  lines.push(
    args.webhookOnly
      ? `with:     a webhook (batch.max_messages ${args.webhookBatch}) to that receiver, created at the round's start ("start": "now") and deleted after draining`
      : `with:     a webhook (batch.max_messages ${args.webhookBatch}) to that receiver, and a NATS JetStream destination (own nats-server), both created at the round's start ("start": "now") and deleted after draining`,
  );
  lines.push('');
  if (args.drain !== undefined) {
    lines.push(...lines0, '');
    const agree =
      finalCounts.mode !== 'native' ||
      (finalCounts.officialChecked > 0 && finalCounts.officialFailed === 0 && finalCounts.mismatched === 0);
    lines.push(
      `${finalCounts.invalid === 0 && agree ? 'PASS' : 'FAIL'}  webhook: ${fmt(finalCounts.distinct)} distinct ids, ${finalCounts.invalid} failed verification, ${finalCounts.officialChecked} also verified with the official package (${finalCounts.officialFailed} refused, ${finalCounts.mismatched} not byte-equal)`,
      '',
    );
    process.stdout.write(lines.join('\n'));
    return exitCode === 0 && finalCounts.invalid === 0 && agree ? 0 : 1;
  }
  lines.push(
    'round  variant   events/s   p99 ms  server CPU µs/event  webhook msg/s  nats msg/s  lag (webhook / nats) first→last third, max   drain s',
  );
  for (const [i, r] of rounds.entries()) {
    const third = Math.max(1, Math.floor(r.lagSamples.length / 3));
    const avg = (xs: number[]) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);
    const lagText =
      r.variant === 'with'
        ? (args.webhookOnly ? [0] : [0, 1])
            .map(
              (k) =>
                `${fmt(avg(r.lagSamples.slice(0, third).map((s) => s[k]!)))}→${fmt(avg(r.lagSamples.slice(-third).map((s) => s[k]!)))}, ${fmt(Math.max(0, ...r.lagSamples.map((s) => s[k]!)))}`,
            )
            .join(' / ')
        : '';
    lines.push(
      `${String(Math.floor(i / 2) + 1).padStart(5)}  ${r.variant.padEnd(8)} ${fmt(r.eventsPerSecond).padStart(9)} ${r.load.p99Ms.toFixed(0).padStart(8)} ${(r.cpuMicrosPerEvent?.toFixed(1) ?? '?').padStart(20)} ${(r.variant === 'with' ? fmt(r.webhookPerSecond) : '').padStart(14)} ${(r.variant === 'with' ? fmt(r.natsPerSecond) : '').padStart(11)}  ${lagText.padEnd(44)} ${r.drainSeconds === undefined ? (r.variant === 'with' ? 'NO' : '') : r.drainSeconds.toFixed(1)}`,
    );
  }
  // Where the CPU went during each measured load: µs per ingested event by part, and for the delivery parts µs
  // per delivered message (the worker per message of both destinations, the receiver per webhook message,
  // nats-server per NATS message).
  lines.push('');
  lines.push(
    `CPU during the measured load, µs per ingested event (server main thread / delivery worker / other server threads / receiver / nats-server / generator / outside the bench; idle = share of ${availableParallelism()} cores)`,
  );
  lines.push(
    'round  variant   load  main  worker  other  receiver  nats  generator  outside  idle    per delivered message: worker  receiver  nats',
  );
  for (const [i, r] of rounds.entries()) {
    const events = r.load.ok * args.batchSize;
    const per = (seconds: number, n: number) => (n === 0 ? '-' : ((seconds * 1e6) / n).toFixed(1));
    const p = r.parts;
    const webhookMessages = r.webhookPerSecond * r.load.seconds;
    const natsMessages = r.natsPerSecond * r.load.seconds;
    const cells = [p.serverMain, p.worker, p.serverOther, p.receiver, p.nats, p.generator, p.outside].map((x) =>
      per(x, events),
    );
    const idle = `${Math.round((100 * p.idle) / (r.load.seconds * availableParallelism()))} %`;
    const delivery =
      r.variant === 'with'
        ? `${per(p.worker, webhookMessages + natsMessages).padStart(30)} ${per(p.receiver, webhookMessages).padStart(9)} ${per(p.nats, natsMessages).padStart(5)}`
        : '';
    lines.push(
      `${String(Math.floor(i / 2) + 1).padStart(5)}  ${r.variant.padEnd(8)} ${r.loadAverage.toFixed(1).padStart(5)} ${cells[0]!.padStart(5)} ${cells[1]!.padStart(7)} ${cells[2]!.padStart(6)} ${cells[3]!.padStart(9)} ${cells[4]!.padStart(5)} ${cells[5]!.padStart(10)} ${cells[6]!.padStart(8)} ${idle.padStart(5)} ${delivery}`,
    );
  }
  const without = median(rounds.filter((r) => r.variant === 'without').map((r) => r.eventsPerSecond));
  const withRate = median(rounds.filter((r) => r.variant === 'with').map((r) => r.eventsPerSecond));
  const ratio = withRate / without;
  const drained = rounds.filter((r) => r.variant === 'with').every((r) => r.drainSeconds !== undefined);
  // "Lag does not grow": in every round, the last third's mean lag is no more than the first third's + one
  // second of ingest (a deliverer that falls behind adds its deficit every second).
  const growing = rounds
    .filter((r) => r.variant === 'with')
    .map((r) => {
      const third = Math.max(1, Math.floor(r.lagSamples.length / 3));
      return (args.webhookOnly ? [0] : [0, 1]).map((k) => {
        const first = r.lagSamples.slice(0, third).reduce((a, s) => a + s[k]!, 0) / third;
        const last = r.lagSamples.slice(-third).reduce((a, s) => a + s[k]!, 0) / third;
        return last - first > r.eventsPerSecond;
      });
    })
    .flat()
    .some(Boolean);
  lines.push('');
  lines.push(args.webhookOnly ? 'targets (issue 35, a live webhook destination):' : 'targets (issue 13):');
  lines.push(
    `  ${ratio >= 0.9 ? 'PASS' : 'FAIL'}  ingest with ${args.webhookOnly ? 'the webhook' : 'destinations'} ≥ 0.9× without (medians): ${fmt(withRate)} vs ${fmt(without)} events/s = ${ratio.toFixed(3)}×`,
  );
  if (half !== undefined) {
    lines.push(
      `  ${half.ages.count > 0 && half.ages.maxMs <= 2000 ? 'PASS' : 'FAIL'}  delivered within 2 s at half load (${fmt(half.achieved)} events/s paced of ${fmt(half.perSecond)}, ${half.seconds} s): from received to the receiver, per request's oldest message, median ${half.ages.p50Ms} ms, p99 ${half.ages.p99Ms} ms, max ${half.ages.maxMs} ms over ${fmt(half.ages.count)} requests; lag each second ${half.lags.map(fmt).join(' ')}`,
    );
  }
  lines.push(
    `  ${growing ? 'FAIL' : 'PASS'}  lag does not grow during the load (last third's mean ≤ first third's + 1 s of ingest, ${args.webhookOnly ? 'the webhook' : 'both destinations'}, every round)`,
  );
  lines.push(`  ${drained ? 'PASS' : 'FAIL'}  the backlog drains after the load (within 120 s)`);
  const everyWebhook = finalCounts.distinct >= expectedWebhook && finalCounts.invalid === 0;
  lines.push(
    `  ${everyWebhook ? 'PASS' : 'FAIL'}  webhook: ${fmt(finalCounts.distinct)} distinct message ids received (${fmt(finalCounts.messages)} messages in ${fmt(finalCounts.requests)} requests, ${finalCounts.invalid} failed verification), destinations reported ${fmt(expectedWebhook)} delivered`,
  );
  if (finalCounts.mode === 'native') {
    const agree = finalCounts.officialChecked > 0 && finalCounts.officialFailed === 0 && finalCounts.mismatched === 0;
    lines.push(
      `  ${agree ? 'PASS' : 'FAIL'}  webhook: ${fmt(finalCounts.officialChecked)} requests also verified with the official standardwebhooks package: ${finalCounts.officialFailed} refused by it, ${finalCounts.mismatched} with a signature not byte-equal to node:crypto's`,
    );
  }
  const everyNats = finalStream >= expectedNats;
  if (!args.webhookOnly)
    lines.push(
      `  ${everyNats ? 'PASS' : 'FAIL'}  nats: ${fmt(finalStream)} messages in the stream (deduplicated by Nats-Msg-Id), destinations reported ${fmt(expectedNats)} delivered`,
    );
  lines.push(
    `  ${exitCode === 0 ? 'PASS' : 'FAIL'}  server shut down cleanly (exit ${exitCode}); ${fmt(stored)} events stored`,
  );
  lines.push('');
  process.stdout.write(lines.join('\n'));
  const officialAgrees =
    finalCounts.mode !== 'native' ||
    (finalCounts.officialChecked > 0 && finalCounts.officialFailed === 0 && finalCounts.mismatched === 0);
  return exitCode === 0 && drained && everyWebhook && everyNats && officialAgrees ? 0 : 1;
}
