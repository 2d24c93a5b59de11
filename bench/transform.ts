// Transformations' cost (transformations.md §7): events/s and the server's CPU per event, through the real
// service on loopback, for one product without a transformation, one with the six declarative steps of §7 (a drop
// with where, mask hash of 2 paths, remove, rename_property, user_agent, bot) and one with a ~20-line function.
// One server (dist/main.js, as `npm start`) holds the three products; the variants take turns in interleaved
// rounds, every other one in reverse order, so a change of machine load or table size hits each alike. Batches
// of 100 native events (random uuid v4 ids) with ~500 bytes of properties and a browser context (userAgent, ip),
// as §8 says. Targets: declarative ≥ 0.85×, function ≥ 0.6× of the run without, by events/s and by server CPU per
// event (the steadier on a shared machine).
// Usage: npm run bench:transform -- [--seconds 5] [--rounds 4] [--connections 16] [--database postgres://…]
//        [--variants none,declarative,function] [--no-build] [--cpu-prof <dir>: the server's CPU profile]
import { randomBytes, randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { adminClient, parseDatabase, SERVER_NODE_FLAG } from './args.js';
import { postgresDatabase, sqliteDatabase, tempDirectory } from './database.js';
import { runLoad, stopLoad } from './load.js';
import {
  cpuSeconds,
  freePort,
  installExitHandlers,
  onCleanup,
  startChild,
  waitUntilReady,
  buildServer,
  serverEnv,
} from './processes.js';
import { inRoundOrder, median } from './report.js';

const ROOT = new URL('..', import.meta.url).pathname;

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '4' },
    connections: { type: 'string', default: '16' },
    database: { type: 'string' },
    variants: { type: 'string', default: 'none,declarative,function' },
    'no-build': { type: 'boolean' },
    'cpu-prof': { type: 'string' },
  },
  strict: true,
});
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
const CONNECTIONS = Number(values.connections);
const BATCH = 100;
const WARMUP_SECONDS = 2;

type Variant = 'none' | 'declarative' | 'function';
const VARIANTS = values.variants.split(',') as Variant[];
for (const v of VARIANTS)
  if (!['none', 'declarative', 'function'].includes(v)) throw new Error(`--variants: unknown variant "${v}"`);

const USER_AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:120.0) Gecko/20100101 Firefox/120.0',
  'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
];

const DECLARATIVE = [
  { kind: 'drop', where: { '==': [{ var: 'properties.test' }, true] } },
  { kind: 'mask', paths: ['properties.email', 'properties.phone'], with: 'hash' },
  { kind: 'remove', paths: ['properties.debug'] },
  { kind: 'rename_property', from: 'properties.amt', to: 'properties.amount' },
  { kind: 'user_agent' },
  { kind: 'bot' },
];

const FUNCTION = `function transform(event, meta) {
  var p = event.properties;
  if (p.test === true) return null;
  if (typeof p.email === 'string') {
    var at = p.email.indexOf('@');
    p.email_domain = at > 0 ? p.email.slice(at + 1).toLowerCase() : null;
    delete p.email;
  }
  delete p.phone;
  delete p.debug;
  if (p.amt !== undefined) {
    p.amount = Math.round(p.amt * 100) / 100;
    delete p.amt;
  }
  var tags = p.tags || [];
  p.tag_count = tags.length;
  p.first_tag = tags.length > 0 ? tags[0] : null;
  p.plan = String(p.plan || 'free').toUpperCase();
  event.context.route = meta.route;
  return event;
}`;

/** ~500 bytes of JSON per event's properties. */
function properties(n: number): Record<string, unknown> {
  return {
    plan: ['free', 'pro', 'team'][n % 3],
    email: `user${n % 5000}@example.com`,
    phone: `+33 6 ${String(n % 100000).padStart(8, '0')}`,
    amt: (n % 1000) + 0.25,
    debug: { build: 'a1b2c3d4', flags: ['x', 'y', 'z'], trace: 'ZmFrZS10cmFjZS1pZC0xMjM0NTY3ODkw' },
    tags: ['checkout', 'mobile', 'promo'],
    page: {
      path: `/products/${n % 300}/details`,
      title: 'A product page with a reasonably long title',
      referrer: 'https://www.example.org/search?q=shoes',
    },
    cart: { items: n % 7, total: (n % 500) * 1.5, currency: 'EUR', coupon: n % 4 === 0 ? 'WINTER' : null },
    test: false,
  };
}

function load(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
}

let sequence = 0;

/** A batch of 100 native events, each with a fresh random uuid v4 external id and a browser context. */
function batchBody(): string {
  const batch = Array.from({ length: BATCH }, () => {
    const i = sequence++;
    return {
      event: 'page.viewed',
      subject_type: 'user',
      subject_id: `u${i % 100_000}`,
      external_id: randomUUID(),
      properties: properties(i),
      context: { userAgent: USER_AGENTS[i % USER_AGENTS.length]!, ip: `198.51.100.${i % 250}` },
    };
  });
  return JSON.stringify({ events: batch });
}

const STEPS: Record<Variant, unknown[] | undefined> = {
  none: undefined,
  declarative: DECLARATIVE,
  function: [{ kind: 'function', code: FUNCTION }],
};

interface Round {
  rate: number;
  cpuUs: number;
  p99Ms: number;
}

async function startServer(dir: string, databaseUrl: string) {
  const port = await freePort();
  const adminToken = randomBytes(24).toString('hex');
  const logFile = join(dir, 'inlet.log');
  const server = startChild(
    'inlet server',
    process.execPath,
    [
      ...(values['cpu-prof'] === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`]),
      SERVER_NODE_FLAG,
      join(ROOT, 'dist/main.js'),
    ],
    serverEnv({ port, databaseUrl, adminToken }),
    logFile,
  );
  const base = `http://127.0.0.1:${port}`;
  await waitUntilReady(server, `${base}/healthz`, logFile);
  return { server, base, admin: adminClient(base, adminToken) };
}

async function main(): Promise<void> {
  installExitHandlers(ROUNDS * VARIANTS.length * (SECONDS + WARMUP_SECONDS + 30) + 120);
  onCleanup(stopLoad);
  if (values['no-build'] !== true) {
    buildServer();
  }
  const dir = tempDirectory();
  const storeUrl = parseDatabase(values.database ?? 'sqlite');
  const database = storeUrl === undefined ? sqliteDatabase(dir) : await postgresDatabase(storeUrl);
  const { server, base, admin } = await startServer(dir, database.url);
  const keys = new Map<Variant, string>();
  for (const variant of VARIANTS) {
    const product = await admin('POST', '/products', { name: `bench-${variant}` });
    const key = await admin('POST', `/products/${product.id as string}/keys`, { kind: 'events', name: variant });
    const steps = STEPS[variant];
    if (steps !== undefined) await admin('PUT', `/products/${product.id as string}/transformation`, { steps });
    keys.set(variant, key.key as string);
  }
  console.log(
    `npm run bench:transform --${process.argv
      .slice(2)
      .map((a) => ` ${a}`)
      .join('')}`,
  );
  console.log(`database: ${database.description}; load average at the start: ${load()}`);
  const results = new Map<Variant, Round[]>(VARIANTS.map((v) => [v, []]));
  const options = (variant: Variant, durationSeconds: number) => ({
    url: base,
    path: '/api/v2/events/batch',
    headers: { authorization: `Bearer ${keys.get(variant)!}` },
    body: batchBody,
    connections: CONNECTIONS,
    durationSeconds,
  });
  for (let round = 0; round < ROUNDS; round++) {
    // The table grows through the run, and its cost per event with it (an even number of rounds, the default 4).
    for (const variant of inRoundOrder(VARIANTS, round)) {
      await runLoad(options(variant, WARMUP_SECONDS), 200);
      const cpuBefore = cpuSeconds(server.process.pid)!;
      const run = await runLoad(options(variant, SECONDS), 200);
      const cpu = cpuSeconds(server.process.pid)! - cpuBefore;
      const events = run.ok * BATCH;
      const result = { rate: events / run.seconds, cpuUs: (cpu * 1e6) / events, p99Ms: run.p99Ms };
      results.get(variant)!.push(result);
      const refused = Object.entries(run.statusCounts).filter(([status]) => status !== '200');
      console.log(
        `  round ${round + 1} ${variant.padEnd(11)} ${Math.round(result.rate)} events/s, ${result.cpuUs.toFixed(1)} µs server CPU/event, p99 ${result.p99Ms} ms (load ${load()})` +
          (refused.length === 0 && run.errors === 0
            ? ''
            : ` not 200: ${JSON.stringify(refused)}, errors ${run.errors}`),
      );
    }
  }
  report(results, database.dialect);
}

function report(results: Map<Variant, Round[]>, dialect: string): void {
  const none = results.get('none');
  console.log(
    `through the service (${dialect}; batches of ${BATCH}, ${CONNECTIONS} connections, ${SECONDS} s × ${ROUNDS} rounds after ${WARMUP_SECONDS} s of warm-up each, medians; server CPU includes the sandbox's thread):`,
  );
  const targets: Record<Variant, number> = { none: 1, declarative: 0.85, function: 0.6 };
  for (const [variant, rounds] of results) {
    const rate = median(rounds.map((r) => r.rate));
    const cpu = median(rounds.map((r) => r.cpuUs));
    let verdict = '';
    if (variant !== 'none' && none !== undefined) {
      const rateRatio = rate / median(none.map((r) => r.rate));
      const cpuRatio = median(none.map((r) => r.cpuUs)) / cpu;
      const pass = Math.max(rateRatio, cpuRatio) >= targets[variant];
      // Each round against the run without in the same round (next to it in time): how far the machine moved.
      const byRound = rounds.map((r, i) => (r.rate / none[i]!.rate).toFixed(3)).join(', ');
      verdict = `[${pass ? 'PASS' : 'FAIL'}] rate ${rateRatio.toFixed(3)}×, CPU ${cpuRatio.toFixed(3)}× (target ≥ ${targets[variant]}×); rate round by round ${byRound}`;
    }
    console.log(
      `  ${variant.padEnd(11)} ${String(Math.round(rate)).padStart(6)} events/s  ${cpu.toFixed(1)} µs CPU/event  ${verdict}`,
    );
  }
  console.log(`load average at the end: ${load()}`);
}

try {
  await main();
} finally {
  const { cleanUp } = await import('./processes.js');
  await cleanUp();
}
