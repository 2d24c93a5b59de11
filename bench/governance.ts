// Issue 17's performance figures (governance.md §1–2): what the catalogue and a 50-event × 10-property
// plan in enforce cost per event. Two parts, both in one process so that the figures compare like with
// like on a shared machine:
//   1. micro: µs per event of the plan check (Ajv-compiled functions) and of the catalogue's in-memory count;
//   2. pipeline: events/s through the real accept pipeline (validation, group commit, SQLite file with
//      synchronous=FULL or a PostgreSQL schema) for: nothing, catalogue on, plan in enforce, both; run in
//      interleaved rounds so a change of machine load hits every variant alike.
// Usage: npx tsx bench/governance.ts [--seconds 4] [--rounds 3 (0: micro only)] [--database postgres://…]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { loadConfig } from '../src/config.js';
import { draftV2, type V2EventInput } from '../src/domain/events.js';
import { checkEvent, compilePlan, type TrackingPlan } from '../src/domain/tracking-plan.js';
import { createServices } from '../src/services.js';
import { createCatalogService } from '../src/services/catalog-service.js';
import type { Candidate } from '../src/services/ingest/service.js';
import type { EventRecord, Storage } from '../src/storage/types.js';
import { median } from './report.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
    database: { type: 'string' },
  },
});
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
const BATCH = 100;
const IN_FLIGHT = 8;

const NAMES = Array.from({ length: 50 }, (_, i) => `area${i}.done`);
const CANONICAL = NAMES.map((n) => n.replace('.', '_'));

function planOf(): TrackingPlan {
  const events: TrackingPlan['events'] = {};
  for (const name of CANONICAL) {
    events[name] = {
      properties: {
        type: 'object',
        properties: {
          plan: { type: 'string', enum: ['free', 'pro', 'team'] },
          amount: { type: 'number', minimum: 0 },
          count: { type: 'integer' },
          paid: { type: 'boolean' },
          currency: { type: 'string', pattern: '^[A-Z]{3}$' },
          source: { type: 'string', maxLength: 64 },
          step: { type: 'integer', minimum: 1 },
          label: { type: 'string' },
          ratio: { type: 'number' },
          meta: { type: 'object', properties: { app: { type: 'string' } } },
        },
        required: ['plan', 'amount', 'count', 'paid', 'currency'],
      },
    };
  }
  return { mode: 'enforce', unplanned: 'reject', events };
}

function properties(n: number): Record<string, unknown> {
  return {
    plan: ['free', 'pro', 'team'][n % 3],
    amount: (n % 100) + 0.5,
    count: n % 7,
    paid: n % 2 === 0,
    currency: 'EUR',
    source: 'ios',
    step: 1 + (n % 5),
    label: `l${n % 10}`,
    ratio: 0.25,
    meta: { app: 'web' },
  };
}

function load(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
}

/** CPU time of this process (user + system) in ns: on a loaded shared machine wall time also counts other processes' turns. */
function cpuNs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1000;
}

// 1. Micro.
function micro(): void {
  const compiled = compilePlan(planOf(), 1);
  if (!compiled.ok) throw new Error(JSON.stringify(compiled.errors));
  const plan = compiled.plan;
  const events = Array.from({ length: 1000 }, (_, i) => ({ name: CANONICAL[i % 50]!, properties: properties(i) }));
  const N = 300_000;
  for (let i = 0; i < 20_000; i++) checkEvent(plan, events[i % 1000]!.name, events[i % 1000]!.properties);
  let started = cpuNs();
  for (let i = 0; i < N; i++)
    if (checkEvent(plan, events[i % 1000]!.name, events[i % 1000]!.properties) !== undefined)
      throw new Error('unexpected violation');
  const checkNs = (cpuNs() - started) / N;
  const bad = { ...properties(1), plan: 7 };
  started = cpuNs();
  for (let i = 0; i < N / 10; i++) checkEvent(plan, CANONICAL[i % 50]!, bad);
  const badNs = (cpuNs() - started) / (N / 10);

  const catalog = createCatalogService({} as Storage, {
    enabled: true,
    maxEvents: 5000,
    maxProperties: 500,
    flushMs: 10_000,
  });
  const records: EventRecord[] = events.map((e, i) => ({
    id: `id${i}`,
    productId: 'p',
    source: 'api',
    externalId: null,
    eventType: e.name.split('_')[0]!,
    action: 'done',
    canonicalName: e.name,
    nameFormat: 'unified',
    subjectType: 'user',
    subjectId: 'u',
    occurredAt: '2026-11-23T00:00:00.000Z',
    receivedAt: '2026-11-23T00:00:00.000Z',
    properties: e.properties,
    apiKeyId: 'k',
  }));
  for (let i = 0; i < 20; i++) catalog.observeEvents('p', records);
  started = cpuNs();
  for (let i = 0; i < N / 1000; i++) catalog.observeEvents('p', records);
  const catalogNs = (cpuNs() - started) / N;
  console.log(`micro, CPU time of this process (load ${load()}):`);
  console.log(`  plan check, 50 events × 10 properties, valid event:   ${(checkNs / 1000).toFixed(2)} µs/event`);
  console.log(`  plan check, invalid event (errors collected):         ${(badNs / 1000).toFixed(2)} µs/event`);
  console.log(`  catalogue in-memory count (11 paths per event):       ${(catalogNs / 1000).toFixed(2)} µs/event`);
}

// 2. Pipeline.
type Variant = 'none' | 'catalog' | 'plan' | 'both';

async function pipeline(
  variant: Variant,
  databaseUrl: string,
  schema: string | undefined,
): Promise<{ rate: number; cpuUs: number }> {
  const config = {
    ...loadConfig({}),
    databaseUrl,
    logLevel: 'silent' as const,
    catalogEnabled: variant === 'catalog' || variant === 'both',
  };
  const services = await createServices(config, {
    defaultMetrics: false,
    ...(schema === undefined ? {} : { postgresSchema: schema }),
  });
  try {
    const product = await services.keys.createProduct(`bench-${variant}`);
    const key = await services.keys.createKey(product.id, { kind: 'events' });
    const auth = { productId: product.id, keyId: key.record.id, kind: 'events' as const };
    if (variant === 'plan' || variant === 'both') await services.governance.plans.put(product.id, planOf());
    let n = 0;
    const receivedAt = new Date().toISOString();
    const batch = (): Candidate[] =>
      Array.from({ length: BATCH }, () => {
        const i = n++;
        const input: V2EventInput = {
          event: NAMES[i % 50]!,
          subject_type: 'user',
          subject_id: `u${i % 1000}`,
          external_id: `${variant}-${i}`,
          properties: properties(i),
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
    // Warm-up, then measure.
    const warm = setTimeout(() => (stop = true), 1000);
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    clearTimeout(warm);
    stop = false;
    stored = 0;
    const started = Date.now();
    const cpuStarted = cpuNs();
    setTimeout(() => (stop = true), SECONDS * 1000);
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    // Flushing the catalogue is part of its cost.
    await services.governance.catalog.flush();
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
  micro();
  if (ROUNDS === 0) return;
  const variants: Variant[] = ['none', 'catalog', 'plan', 'both'];
  const results = new Map<Variant, Array<{ rate: number; cpuUs: number }>>(variants.map((v) => [v, []]));
  const pgUrl = values.database;
  const dir = mkdtempSync(join(tmpdir(), 'inlet-gov-bench-'));
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of variants) {
        const url = pgUrl ?? `sqlite:${join(dir, `r${round}-${variant}.db`)}`;
        const schema = pgUrl === undefined ? undefined : `bench_gov_${process.pid}_${round}_${variant}`;
        const result = await pipeline(variant, url, schema);
        results.get(variant)!.push(result);
        console.log(
          `  round ${round + 1} ${variant.padEnd(7)} ${Math.round(result.rate)} events/s, ${result.cpuUs.toFixed(1)} µs CPU/event (load ${load()})`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const base = median(results.get('none')!.map((r) => r.rate));
  const baseCpu = median(results.get('none')!.map((r) => r.cpuUs));
  console.log(
    `pipeline (${pgUrl === undefined ? 'SQLite, synchronous=FULL' : 'PostgreSQL'}; batches of ${BATCH}, ${IN_FLIGHT} in flight, ${SECONDS} s × ${ROUNDS} rounds, medians; CPU is this process's, the database server's is not in it):`,
  );
  for (const v of variants) {
    const rate = median(results.get(v)!.map((r) => r.rate));
    const cpu = median(results.get(v)!.map((r) => r.cpuUs));
    const vs = (x: number, y: number) => `${x >= y ? '+' : ''}${(((x - y) / y) * 100).toFixed(1)} %`;
    console.log(
      `  ${v.padEnd(7)} ${String(Math.round(rate)).padStart(6)} events/s ${v === 'none' ? '        ' : vs(rate, base).padStart(8)}   ${cpu.toFixed(1)} µs CPU/event ${v === 'none' ? '' : vs(cpu, baseCpu)}`,
    );
  }
  console.log(`load average at the end: ${load()}`);
}

await main();
