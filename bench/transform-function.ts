// `npx tsx bench/transform-function.ts [--batches N] [--rounds N]`: µs per event of a transformation's `function`
// step (the QuickJS sandbox, batches of 100 events of ~500 bytes of properties with a browser context) and of the
// enrichment lookups, each beside its baseline in the same run: the JSON text crossing that any boundary costs
// (stringify + parse of the same batch on the host) and an identity function. Wall time per event, and the
// process's CPU time per event (both threads: the sandbox runs on its own), medians of the rounds.
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { createSandbox, type FunctionMeta } from '../src/services/transformations/sandbox.js';
import { geoIpFromBuffer, isBot, parseUserAgent } from '../src/services/transformations/enrichment.js';
import { buildMmdb, cityRecord } from '../test/support/mmdb-writer.js';
import { median } from './report.js';

const { values } = parseArgs({
  options: { batches: { type: 'string', default: '30' }, rounds: { type: 'string', default: '5' } },
});
const batches = Number(values.batches);
const rounds = Number(values.rounds);
const BATCH = 100;

const agents = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15',
  'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0',
];

/** A native event as the step engine sees it (spec §2), ~500 bytes of properties. */
function documentOf(i: number): Record<string, unknown> {
  return {
    type: 'event',
    event: 'checkout.completed',
    event_type: 'checkout',
    action: 'completed',
    subject_type: 'user',
    subject_id: `user_${i % 977}`,
    occurred_at: '2026-11-28T10:00:00.000Z',
    properties: {
      order_id: `ord_${i}`,
      plan: i % 3 === 0 ? 'pro' : 'team',
      email: `person${i}@example.com`,
      amount_cents: 1299 + (i % 50),
      currency: 'EUR',
      coupon: i % 5 === 0 ? 'WINTER' : null,
      items: [
        { sku: 'sku-1', qty: 1, price_cents: 999 },
        { sku: 'sku-2', qty: 2, price_cents: 150 },
      ],
      page: { path: '/checkout/confirm', title: 'Order confirmed', referrer: 'https://www.example.com/pricing?ref=ad' },
      experiment: { name: 'new-checkout', variant: i % 2 === 0 ? 'a' : 'b' },
      internal_note: 'x'.repeat(40),
    },
    context: { userAgent: agents[i % agents.length], ip: `203.0.113.${i % 250}` },
    source: 'api',
  };
}

/** A function of about twenty lines, of the kind spec §7 prices. */
const TYPICAL = `function transform(event, meta) {
  const p = event.properties;
  if (p.plan === 'internal') return null;
  if (typeof p.email === 'string') {
    p.email_domain = p.email.split('@')[1] || null;
    delete p.email;
  }
  delete p.internal_note;
  if (typeof p.amount_cents === 'number') p.amount = Math.round(p.amount_cents) / 100;
  if (Array.isArray(p.items)) {
    let count = 0;
    for (const item of p.items) count += item.qty || 0;
    p.item_count = count;
  }
  if (p.page && typeof p.page.path === 'string') p.section = p.page.path.split('/')[1] || 'home';
  if (p.experiment) {
    p.experiment_key = p.experiment.name + ':' + p.experiment.variant;
  }
  event.context.route = meta.route;
  return event;
}`;

interface Figure {
  wallUs: number;
  cpuUs: number;
}

async function measure(events: number, run: () => Promise<void> | void): Promise<Figure> {
  const walls: number[] = [];
  const cpus: number[] = [];
  await run(); // warm-up
  for (let round = 0; round < rounds; round++) {
    const cpu = process.cpuUsage();
    const started = performance.now();
    await run();
    const wall = performance.now() - started;
    const used = process.cpuUsage(cpu);
    walls.push((wall * 1000) / events);
    cpus.push((used.user + used.system) / events);
  }
  return { wallUs: median(walls), cpuUs: median(cpus) };
}

const rows: Array<[string, Figure]> = [];
const docs = Array.from({ length: batches * BATCH }, (_, i) => documentOf(i));
const chunks = Array.from({ length: batches }, (_, b) => docs.slice(b * BATCH, (b + 1) * BATCH));
const meta: FunctionMeta = { product_id: 'prod_bench', key_id: 'key_bench', route: 'v2' };
console.log(
  `bytes of JSON per event: ${Math.round(JSON.stringify(docs).length / docs.length)}, load ${loadavg()[0]!.toFixed(2)}`,
);

rows.push([
  'baseline: stringify + parse the batch on the host',
  await measure(docs.length, () => {
    for (const chunk of chunks) JSON.parse(JSON.stringify(chunk));
  }),
]);

const sandbox = createSandbox({ cpuMs: 50, memoryMb: 32 });
for (const [name, source] of [
  ['identity function', 'function transform(event) { return event; }'],
  ['typical function (20 lines)', TYPICAL],
] as const) {
  const compiled = await sandbox.compile(source);
  if (!compiled.ok) throw new Error(compiled.message);
  const fn = compiled.fn;
  rows.push([
    `${name}, batches of ${BATCH}`,
    await measure(docs.length, async () => {
      for (const chunk of chunks) await fn.runMany(chunk, meta);
    }),
  ]);
  rows.push([
    `${name}, batches of ${BATCH}, synchronous calls`,
    await measure(docs.length, () => {
      for (const chunk of chunks) fn.runManySync(chunk, meta);
    }),
  ]);
  rows.push([
    `${name}, one event per call`,
    await measure(BATCH * 4, async () => {
      for (const event of docs.slice(0, BATCH * 4)) await fn.run(event, meta);
    }),
  ]);
  fn.dispose();
}
await sandbox.close();

const fresh = Array.from({ length: 2000 }, (_, i) => `${agents[i % agents.length]} build/${i}`);
rows.push([
  'user_agent, 4 recurring user agents (cached)',
  await measure(docs.length, () => {
    for (const event of docs) parseUserAgent((event.context as { userAgent: string }).userAgent);
  }),
]);
let unique = 0;
rows.push([
  'user_agent, every user agent new',
  await measure(fresh.length, () => {
    unique++;
    for (const agent of fresh) parseUserAgent(`${agent}.${unique}`);
  }),
]);
rows.push([
  'bot, 4 recurring user agents (cached)',
  await measure(docs.length, () => {
    for (const event of docs) isBot((event.context as { userAgent: string }).userAgent);
  }),
]);
rows.push([
  'bot, every user agent new',
  await measure(fresh.length, () => {
    unique++;
    for (const agent of fresh) isBot(`${agent}.${unique}`);
  }),
]);
const geo = geoIpFromBuffer(
  buildMmdb(
    Array.from({ length: 256 }, (_, i) => ({
      network: `203.0.${i}.0/24`,
      record: cityRecord({ country: 'FR', region: 'Île-de-France', city: 'Paris', latitude: 48.85, longitude: 2.35 }),
    })),
  ),
);
rows.push([
  'geoip (256 networks, maxmind reader)',
  await measure(docs.length, () => {
    for (const event of docs) geo.lookup((event.context as { ip: string }).ip);
  }),
]);

console.log(`\n| step (medians of ${rounds} rounds) | wall µs/event | CPU µs/event (all threads) |\n|---|---|---|`);
for (const [name, { wallUs, cpuUs }] of rows) console.log(`| ${name} | ${wallUs.toFixed(2)} | ${cpuUs.toFixed(2)} |`);
console.log(`load after: ${loadavg()[0]!.toFixed(2)}`);
