// Runs fuzz cases against the real app listening on 127.0.0.1 (in this process, on a fresh
// database of the dialect under test) and judges every answer:
//   - no 5xx, except 503 unavailable and 502 upstream_error from an admin traffic sync (§11);
//   - every 4xx/5xx is application/problem+json with a request_id (and the status in the body),
//     with no exception: a request without Host and an Expect other than 100-continue, which Node
//     would answer with a bare status line, are answered by Inlet;
//   - a complete, well-framed request is answered; no connection hangs past the deadline;
//   - nothing throws out of the app (uncaught exceptions and unhandled rejections are failures);
//   - /healthz answers between batches, and memory after GC stays within a bound at the end.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/http/app.js';
import { ADMIN_TOKEN, createTestServices, dialect } from '../helpers.js';
import { startPlausibleFake, type PlausibleFakeRow } from '../fakes/plausible-fake.js';
import {
  describeCase,
  generateCase,
  type FuzzCase,
  type FuzzContext,
  type RouteAuth,
  type RouteInfo,
} from './generator.js';
import { exchange, type Exchange } from './raw-client.js';

export interface FuzzOptions {
  seed: number;
  cases: number;
  /** Run only these case indexes (reproducing a failure). */
  only?: number[];
  concurrency?: number;
  deadlineMs?: number;
  /** Cases between two /healthz checks. */
  batchSize?: number;
  /** Stop after this many failing cases. */
  maxFailures?: number;
  /** Progress lines (one per ~10 % of the run). */
  log?: (line: string) => void;
}

export interface FuzzFailure {
  case: string;
  problems: string[];
  answers: string[];
  serverLog: string[];
}

export interface FuzzReport {
  seed: number;
  dialect: string;
  cases: number;
  elapsedMs: number;
  failures: FuzzFailure[];
  /** Failures not tied to one case (health check, crash, memory). */
  runProblems: string[];
  statuses: Record<string, number>;
  outcomes: Record<string, number>;
  routes: string[];
  memory: { heapBeforeMb: number; heapAfterMb: number; rssBeforeMb: number; rssAfterMb: number };
}

/** Heap growth after GC allowed between the warm-up batch and the end of the run. */
export const HEAP_GROWTH_LIMIT_MB = 64;
/** RSS growth allowed likewise (RSS also holds SQLite's page cache and freed-but-kept allocator pages). */
export const RSS_GROWTH_LIMIT_MB = 384;

function collectGarbage(): void {
  let gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
  gc();
}

function memory(): { heapMb: number; rssMb: number } {
  collectGarbage();
  const usage = process.memoryUsage();
  return { heapMb: usage.heapUsed / 2 ** 20, rssMb: usage.rss / 2 ** 20 };
}

/** The app's routes from Fastify's own route table (HEAD twins left out), with their auth from OpenAPI. */
export function routesOf(app: FastifyInstance): RouteInfo[] {
  const tree = app.printRoutes({ commonPrefix: false });
  const stack: string[] = [];
  const found: Array<{ path: string; methods: string[] }> = [];
  for (const line of tree.split('\n')) {
    const match = /^((?:[│ ] {3})*)[├└]── (\S+)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (match === null) continue;
    const depth = match[1]!.length / 4;
    const segment = match[2]!;
    const parent = depth === 0 ? '' : stack[depth - 1]!;
    // A child is the rest of its parent's path (the radix tree splits "/v1/alias" into "/v1/a" + "lias");
    // a wildcard hangs below "/".
    const path = segment === '*' && !parent.endsWith('/') ? `${parent}/*` : parent + segment;
    stack[depth] = path;
    stack.length = depth + 1;
    if (match[3] !== undefined) found.push({ path, methods: match[3].split(',').map((m) => m.trim()) });
  }
  const doc = app.swagger() as {
    paths?: Record<string, Record<string, { security?: Array<Record<string, unknown>> }>>;
  };
  const authOf = (path: string, method: string): RouteAuth => {
    const openapiPath = path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const scheme = Object.keys(doc.paths?.[openapiPath]?.[method.toLowerCase()]?.security?.[0] ?? {})[0];
    if (scheme === 'eventsKey') return 'events';
    if (scheme === 'reportsKey') return 'reports';
    if (scheme === 'adminToken') return 'admin';
    if (scheme === 'writeKeyBasic') return 'segment';
    return 'none';
  };
  const routes = found.flatMap(({ path, methods }) =>
    methods.filter((m) => m !== 'HEAD').map((method) => ({ method, path, auth: authOf(path, method) })),
  );
  routes.sort((a, b) => (a.path === b.path ? a.method.localeCompare(b.method) : a.path.localeCompare(b.path)));
  return routes;
}

const SECRETS_ON_DISK = ['root:x:0:0', '"allowScripts"', '[core]\n\trepositoryformatversion'];

function headerOf(response: { headers: Record<string, string[]> }, name: string): string | undefined {
  return response.headers[name]?.[0];
}

/**
 * The console's own explanatory page (src/http/console.ts): a browser asking for /console on a server whose
 * console is not built, or whose admin API is off, gets a 404 HTML page saying so. Whether the checkout was
 * built decides which answer the fuzz cases on /console meet, so both are right answers there; anywhere else
 * an HTML error is a failure.
 */
function isConsolePage(
  c: FuzzCase,
  response: { status: number; headers: Record<string, string[]>; body: Buffer },
): boolean {
  if (response.status !== 404 || !c.route.startsWith('GET /console')) return false;
  if (!(headerOf(response, 'content-type') ?? '').startsWith('text/html')) return false;
  return c.headOnly || response.body.includes('<title>Inlet console: ');
}

/** What is wrong with the connection's outcome and answers; empty when all is well. */
export function judge(c: FuzzCase, result: Exchange, deadlineMs: number): string[] {
  const problems: string[] = [];
  if (result.outcome === 'timeout') problems.push(`no answer and no close within ${deadlineMs} ms`);
  if (result.malformed !== undefined) problems.push(`malformed response: ${result.malformed}`);
  if (c.mustAnswer && result.responses.length === 0 && result.outcome !== 'timeout')
    problems.push(`the connection was ${result.outcome} without an answer`);
  result.responses.forEach((response, i) => {
    const which = result.responses.length > 1 ? `answer ${i + 1}: ` : '';
    const { status } = response;
    const noBody = i === 0 && c.headOnly;
    let body: Record<string, unknown> | undefined;
    if (status >= 400 && isConsolePage(c, response)) {
      // A page for people, not an API error: the console's 404 saying why there is none here.
    } else if (status >= 400) {
      const type = headerOf(response, 'content-type') ?? '(none)';
      if (!type.startsWith('application/problem+json'))
        problems.push(`${which}${status} with Content-Type ${type}, not application/problem+json`);
      if (!noBody) {
        try {
          body = JSON.parse(response.body.toString('utf8')) as Record<string, unknown>;
        } catch {
          problems.push(`${which}${status} body is not JSON`);
        }
        if (body !== undefined) {
          const missing = ['type', 'title', 'detail', 'code', 'request_id'].filter(
            (field) => typeof body![field] !== 'string' || body![field] === '',
          );
          if (missing.length > 0) problems.push(`${which}${status} problem body without ${missing.join(', ')}`);
          if (body.status !== status)
            problems.push(`${which}${status} problem body says status ${String(body.status)}`);
          const header = headerOf(response, 'x-request-id');
          if (header !== undefined && typeof body.request_id === 'string' && header !== body.request_id) {
            problems.push(`${which}X-Request-Id ${header} differs from request_id ${body.request_id}`);
          }
        }
      }
    }
    if (status >= 500) {
      const allowed =
        (status === 503 && (body === undefined || body.code === 'unavailable')) ||
        (status === 502 && c.allow502 && (body === undefined || body.code === 'upstream_error'));
      if (!allowed)
        problems.push(`${which}${status}${body?.code === undefined ? '' : ` ${String(body.code)}`}: a server error`);
    }
    for (const secret of SECRETS_ON_DISK) {
      if (response.body.includes(secret))
        problems.push(`${which}the body holds ${JSON.stringify(secret)}: a file outside the API was served`);
    }
  });
  return problems;
}

function summarise(result: Exchange): string[] {
  const answers = result.responses.map(
    (r) =>
      `${r.status} ${headerOf(r, 'content-type') ?? ''} ${JSON.stringify(r.body.subarray(0, 400).toString('utf8'))}`,
  );
  return [...answers, `(${result.outcome} after ${result.elapsedMs} ms)`];
}

export interface FuzzServer {
  app: FastifyInstance;
  port: number;
  context: FuzzContext;
  /** Error-level lines the app logged (most recent last, bounded). */
  logLines: string[];
  close(): Promise<void>;
}

const PLAUSIBLE_ROWS: PlausibleFakeRow[] = Array.from({ length: 20 }, (_, i) => ({
  date: new Date(Date.now() - (i % 5) * 86_400_000).toISOString().slice(0, 10),
  source: ['Google', 'Direct / None', 'Bing', 'spring sale', 'é🎉'][i % 5]!,
  utm_medium: ['organic', '(none)', 'cpc', '', 'email'][i % 5]!,
  utm_campaign: '(not set)',
  entry_page: `/p${i}`,
  visitors: i + 1,
  visits: i + 2,
  pageviews: i * 3,
  bounce_rate: 40,
  visit_duration: 30,
}));

/** The real app on a fresh database of the dialect under test, listening on 127.0.0.1:0, with keys of every kind. */
export async function startFuzzServer(): Promise<FuzzServer> {
  // No outbound connection may leave loopback (clarifications §4): a fuzzed traffic source without
  // a base URL would otherwise send its sync to the provider's public default.
  const realFetch = globalThis.fetch;
  globalThis.fetch = (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname))
      return Promise.reject(new TypeError(`fuzz: outbound request to ${url.host} refused`));
    return realFetch(input, init);
  };
  const plausible = await startPlausibleFake({
    siteId: 'acme.example',
    apiKey: 'fuzz-plausible-key',
    rows: PLAUSIBLE_ROWS,
  });
  const { services, close } = await createTestServices({ trafficRetryMaxMs: 0 });
  const logLines: string[] = [];
  const app = await buildApp(services, {
    logger: {
      level: 'error',
      stream: {
        write(line: string) {
          logLines.push(line.length > 4000 ? `${line.slice(0, 4000)}…` : line);
          if (logLines.length > 200) logLines.splice(0, logLines.length - 200);
        },
      },
    },
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;

  const keys = services.keys;
  const product = await keys.createProduct('Fuzz');
  const other = await keys.createProduct('Other');
  const key = async (productId: string, kind: 'events' | 'reports', expiresAt?: string) =>
    keys.createKey(productId, { kind, ...(expiresAt === undefined ? {} : { expiresAt }) });
  const events = await key(product.id, 'events');
  const reports = await key(product.id, 'reports');
  const revoked = await key(product.id, 'events');
  await keys.revokeKey(revoked.record.id);
  const expired = await key(product.id, 'events', '2020-01-01T00:00:00.000Z');
  const spare = await Promise.all(
    Array.from({ length: 4 }, (_, i) => key(product.id, i % 2 === 0 ? 'events' : 'reports')),
  );
  const otherEvents = await key(other.id, 'events');
  const otherReports = await key(other.id, 'reports');
  await services.traffic.sync.connectSource(product.id, {
    provider: 'plausible',
    site_id: 'acme.example',
    api_key: 'fuzz-plausible-key',
    base_url: plausible.url,
  });

  const context: FuzzContext = {
    routes: routesOf(app),
    keys: {
      events: events.key,
      reports: reports.key,
      revoked: revoked.key,
      expired: expired.key,
      otherEvents: otherEvents.key,
      otherReports: otherReports.key,
    },
    adminToken: ADMIN_TOKEN,
    productId: product.id,
    otherProductId: other.id,
    spareKeyIds: spare.map((s) => s.record.id),
    plausibleUrl: plausible.url,
    closedUrl: 'http://127.0.0.1:1',
    maxBodyBytes: services.config.maxBodyBytes,
    maxEventBytes: services.config.maxEventBytes,
    maxBatchEvents: services.config.maxBatchEvents,
  };
  return {
    app,
    port,
    context,
    logLines,
    async close() {
      await app.close();
      await close();
      await plausible.close();
      globalThis.fetch = realFetch;
    },
  };
}

async function healthy(port: number, deadlineMs: number): Promise<string | undefined> {
  const result = await exchange(port, Buffer.from('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'), {
    after: { kind: 'read' },
    deadlineMs,
  });
  const status = result.responses[0]?.status;
  return status === 200 ? undefined : `GET /healthz: ${status ?? result.outcome} after ${result.elapsedMs} ms`;
}

export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const concurrency = options.concurrency ?? 8;
  const deadlineMs = options.deadlineMs ?? 20_000;
  const batchSize = options.batchSize ?? 250;
  const maxFailures = options.maxFailures ?? 5;
  const log = options.log ?? (() => {});
  const indexes = options.only ?? Array.from({ length: options.cases }, (_, i) => i);
  const started = Date.now();

  const server = await startFuzzServer();
  const failures: FuzzFailure[] = [];
  const runProblems: string[] = [];
  const statuses: Record<string, number> = {};
  const outcomes: Record<string, number> = {};
  const inFlight = new Map<number, FuzzCase>();
  const slow: string[] = [];
  const onProcessError = (kind: string) => (error: unknown) => {
    const cases = [...inFlight.values()].map((c) => describeCase(c, 600)).join('\n');
    runProblems.push(
      `${kind} while these cases were in flight:\n${cases}\n${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
  };
  const onUncaught = onProcessError('uncaught exception');
  const onUnhandled = onProcessError('unhandled rejection');
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUnhandled);

  let before = { heapMb: 0, rssMb: 0 };
  let after = { heapMb: 0, rssMb: 0 };
  try {
    let next = 0;
    let done = 0;
    let reported = 0;
    for (let batchStart = 0; batchStart < indexes.length; batchStart += batchSize) {
      const batch = indexes.slice(batchStart, batchStart + batchSize);
      next = 0;
      const worker = async () => {
        while (next < batch.length && failures.length < maxFailures && runProblems.length === 0) {
          const index = batch[next++]!;
          const cpuBefore = process.cpuUsage();
          const c = generateCase(options.seed, index, server.context);
          inFlight.set(index, c);
          const result = await exchange(server.port, c.bytes, {
            after: c.after,
            headOnly: c.headOnly,
            pipelined: c.pipelined,
            deadlineMs,
          });
          inFlight.delete(index);
          const cpu = process.cpuUsage(cpuBefore);
          const cpuMs = Math.round((cpu.user + cpu.system) / 1000);
          if (cpuMs > 40)
            slow.push(
              `${cpuMs} ms CPU, ${result.elapsedMs} ms: ${c.route} [${c.mode}] ${c.mutations.join('; ')} ${c.after.kind}`,
            );
          for (const response of result.responses) statuses[response.status] = (statuses[response.status] ?? 0) + 1;
          outcomes[result.outcome] = (outcomes[result.outcome] ?? 0) + 1;
          const problems = judge(c, result, deadlineMs);
          if (problems.length > 0) {
            const ids = result.responses
              .map((r) => headerOf(r, 'x-request-id'))
              .filter((id): id is string => id !== undefined);
            failures.push({
              case: describeCase(c),
              problems,
              answers: summarise(result),
              serverLog: server.logLines.filter((line) => ids.some((id) => line.includes(id))).slice(-3),
            });
          }
          done++;
        }
      };
      await Promise.all(Array.from({ length: concurrency }, worker));
      const health = await healthy(server.port, deadlineMs);
      if (health !== undefined)
        runProblems.push(`the server stopped answering after case ${batch[batch.length - 1]}: ${health}`);
      if (batchStart === 0) before = memory();
      if (failures.length >= maxFailures || runProblems.length > 0) break;
      if (done - reported >= indexes.length / 10) {
        reported = done;
        log(`${done}/${indexes.length} cases, ${Math.round((Date.now() - started) / 1000)} s`);
      }
    }
    after = memory();
    if (process.env.INLET_FUZZ_SLOW) for (const line of slow) log(`slow: ${line}`);
    if (indexes.length >= 2 * batchSize) {
      if (after.heapMb - before.heapMb > HEAP_GROWTH_LIMIT_MB)
        runProblems.push(
          `heap grew by ${(after.heapMb - before.heapMb).toFixed(1)} MB after GC (limit ${HEAP_GROWTH_LIMIT_MB} MB)`,
        );
      if (after.rssMb - before.rssMb > RSS_GROWTH_LIMIT_MB)
        runProblems.push(`RSS grew by ${(after.rssMb - before.rssMb).toFixed(1)} MB (limit ${RSS_GROWTH_LIMIT_MB} MB)`);
    }
  } finally {
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUnhandled);
    await server.close();
  }
  const round = (n: number) => Math.round(n * 10) / 10;
  return {
    seed: options.seed,
    dialect,
    cases: indexes.length,
    elapsedMs: Date.now() - started,
    failures,
    runProblems,
    statuses,
    outcomes,
    routes: server.context.routes.map((r) => `${r.method} ${r.path} (${r.auth})`),
    memory: {
      heapBeforeMb: round(before.heapMb),
      heapAfterMb: round(after.heapMb),
      rssBeforeMb: round(before.rssMb),
      rssAfterMb: round(after.rssMb),
    },
  };
}

/** The report as text: the seed and how to rerun first, then each failure. */
export function formatReport(report: FuzzReport): string {
  const rerun = `INLET_FUZZ_SEED=${report.seed} INLET_TEST_DIALECT=${report.dialect} node --import tsx --test test/fuzz/http-fuzz.test.ts`;
  const lines = [
    `HTTP fuzz on ${report.dialect}: seed ${report.seed}, ${report.cases} cases in ${(report.elapsedMs / 1000).toFixed(1)} s`,
    `  statuses ${JSON.stringify(report.statuses)}; connections ${JSON.stringify(report.outcomes)}`,
    `  memory after GC: heap ${report.memory.heapBeforeMb} → ${report.memory.heapAfterMb} MB, RSS ${report.memory.rssBeforeMb} → ${report.memory.rssAfterMb} MB`,
    `  rerun: ${rerun}`,
  ];
  for (const problem of report.runProblems) lines.push(`RUN PROBLEM: ${problem}`);
  for (const failure of report.failures) {
    const index = /^case (\d+)/.exec(failure.case)?.[1];
    lines.push(
      '',
      `FAILED ${failure.case}`,
      ...failure.problems.map((p) => `  ✗ ${p}`),
      ...failure.answers.map((a) => `  ← ${a}`),
    );
    for (const line of failure.serverLog) lines.push(`  server log: ${line.trim().slice(0, 1200)}`);
    if (index !== undefined) lines.push(`  only this case: INLET_FUZZ_ONLY=${index} ${rerun}`);
  }
  return lines.join('\n');
}
