// Transformations' cost (transformations.md §7): events/s and CPU per event through the real accept pipeline
// (validation, the transformation stage, group commit, a SQLite file with synchronous=FULL or a PostgreSQL
// schema) for: no transformation, the six declarative steps of §7 (a drop with where, mask hash of 2 paths,
// remove, rename_property, user_agent, bot), and one ~20-line function. Batches of 100 native events with ~500
// bytes of properties and a browser context; the variants run in interleaved rounds in one process, so a change
// of machine load hits each alike. Targets: declarative ≥ 0.85×, function ≥ 0.6× of the run without.
// Usage: npm run bench:transform -- [--seconds 4] [--rounds 3] [--database postgres://…]
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { loadConfig } from '../src/config.js';
import { draftV2, type V2EventInput } from '../src/domain/events.js';
import { createServices } from '../src/services.js';
import type { Candidate } from '../src/services/ingest/service.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
    database: { type: 'string' },
    variants: { type: 'string', default: 'none,declarative,function' },
  },
});
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
const BATCH = 100;
const IN_FLIGHT = 8;

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

type Variant = 'none' | 'declarative' | 'function';

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

function cpuNs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1000;
}

async function pipeline(
  variant: Variant,
  databaseUrl: string,
  schema: string | undefined,
): Promise<{ rate: number; cpuUs: number }> {
  const config = { ...loadConfig({}), databaseUrl, logLevel: 'silent' as const };
  const services = await createServices(config, {
    defaultMetrics: false,
    ...(schema === undefined ? {} : { postgresSchema: schema }),
  });
  try {
    const product = await services.keys.createProduct(`bench-${variant}`);
    const key = await services.keys.createKey(product.id, { kind: 'events' });
    const auth = { productId: product.id, keyId: key.record.id, kind: 'events' as const };
    if (variant === 'declarative') await services.transformations.put(product.id, { steps: DECLARATIVE });
    if (variant === 'function')
      await services.transformations.put(product.id, { steps: [{ kind: 'function', code: FUNCTION }] });
    let n = 0;
    const receivedAt = new Date().toISOString();
    const batch = (): Candidate[] =>
      Array.from({ length: BATCH }, () => {
        const i = n++;
        const input: V2EventInput = {
          event: 'page.viewed',
          subject_type: 'user',
          subject_id: `u${i % 1000}`,
          external_id: `${variant}-${i}`,
          properties: properties(i),
          context: { userAgent: USER_AGENTS[i % USER_AGENTS.length]!, ip: `198.51.100.${i % 250}` },
        };
        const draft = draftV2(input, receivedAt);
        if (!draft.ok) throw new Error(JSON.stringify(draft.errors));
        return draft;
      });
    let stored = 0;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const { outcomes } = await services.ingest.accept(auth, batch(), { endpoint: 'bench', receivedAt });
        for (const o of outcomes) if (o.status === 'created') stored++;
      }
    };
    const warm = setTimeout(() => (stop = true), 1000);
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    clearTimeout(warm);
    if (stored === 0) throw new Error(`${variant}: nothing stored in the warm-up`);
    stop = false;
    stored = 0;
    const started = Date.now();
    const cpuStarted = cpuNs();
    setTimeout(() => (stop = true), SECONDS * 1000);
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    return { rate: stored / ((Date.now() - started) / 1000), cpuUs: (cpuNs() - cpuStarted) / 1000 / stored };
  } finally {
    await services.close();
    if (schema !== undefined) {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  }
}

async function main(): Promise<void> {
  const variants = values.variants.split(',') as Variant[];
  const results = new Map<Variant, Array<{ rate: number; cpuUs: number }>>(variants.map((v) => [v, []]));
  const pgUrl = values.database;
  const dir = mkdtempSync(join(tmpdir(), 'inlet-transform-bench-'));
  console.log(`load average at the start: ${load()}`);
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of variants) {
        const url = pgUrl ?? `sqlite:${join(dir, `r${round}-${variant}.db`)}`;
        const schema = pgUrl === undefined ? undefined : `bench_tf_${process.pid}_${round}_${variant}`;
        const result = await pipeline(variant, url, schema);
        results.get(variant)!.push(result);
        console.log(
          `  round ${round + 1} ${variant.padEnd(11)} ${Math.round(result.rate)} events/s, ${result.cpuUs.toFixed(1)} µs CPU/event (load ${load()})`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const base = median(results.get('none')!.map((r) => r.rate));
  const baseCpu = median(results.get('none')!.map((r) => r.cpuUs));
  console.log(
    `pipeline (${pgUrl === undefined ? 'SQLite, synchronous=FULL' : 'PostgreSQL'}; batches of ${BATCH}, ${IN_FLIGHT} in flight, ${SECONDS} s × ${ROUNDS} rounds, medians; CPU is this process's, the sandbox thread included):`,
  );
  const targets: Record<Variant, number> = { none: 1, declarative: 0.85, function: 0.6 };
  for (const v of variants) {
    const rate = median(results.get(v)!.map((r) => r.rate));
    const cpu = median(results.get(v)!.map((r) => r.cpuUs));
    const ratio = rate / base;
    const cpuRatio = baseCpu / cpu;
    const verdict =
      v === 'none' ? '' : `rate ${ratio.toFixed(2)}×, CPU ${cpuRatio.toFixed(2)}× (target ≥ ${targets[v]}×)`;
    console.log(
      `  ${v.padEnd(11)} ${String(Math.round(rate)).padStart(6)} events/s  ${cpu.toFixed(1)} µs CPU/event  ${verdict}`,
    );
  }
  console.log(`load average at the end: ${load()}`);
}

await main();
