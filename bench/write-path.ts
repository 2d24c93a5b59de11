// The storage write path alone: rows through the real event writer (storage.events.insertMany), in
// groups, as the group-commit writer hands them over. No HTTP, no load generator: on a shared,
// loaded machine this is the steadier way to compare two versions of the table (e.g. with and without
// the commit position). Prints one JSON line: events/s (wall) and CPU µs per event of this process
// (PostgreSQL's own CPU is not in it).
//
//   npx tsx bench/write-path.ts [--database sqlite|postgres://…] [--events 200000] [--group 400] [--prefill 0]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { uuidv7 } from '../src/domain/ids.js';
import { openStorage } from '../src/storage/connect.js';
import type { EventInsert } from '../src/storage/types.js';

const { values } = parseArgs({
  options: {
    database: { type: 'string', default: 'sqlite' },
    events: { type: 'string', default: '200000' },
    group: { type: 'string', default: '400' },
    prefill: { type: 'string', default: '0' },
    concurrency: { type: 'string', default: '4' },
  },
});
const total = Number(values.events);
const group = Number(values.group);
const prefill = Number(values.prefill);

let url: string;
let cleanup: () => Promise<void>;
let postgresSchema: string | undefined;
if (values.database === 'sqlite') {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-write-path-'));
  url = `sqlite:${join(dir, 'inlet.db')}`;
  cleanup = async () => rmSync(dir, { recursive: true, force: true });
} else {
  url = values.database!;
  postgresSchema = `write_path_${process.pid}_${Date.now()}`;
  cleanup = async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${postgresSchema} CASCADE`);
    await client.end();
  };
}

const storage = await openStorage(url, postgresSchema === undefined ? {} : { postgresSchema });
const productId = 'prod_bench';
await storage.products.create({ id: productId, name: 'bench', createdAt: new Date().toISOString() });

const properties = { plan: 'pro', seats: 12, path: '/settings/billing', referrer: 'https://example.com/', flags: ['a', 'b'] };
const propertiesJson = JSON.stringify(properties);
let n = 0;
function row(): EventInsert {
  n++;
  return {
    id: uuidv7(),
    productId,
    source: 'api',
    externalId: crypto.randomUUID(),
    eventType: 'project',
    action: n % 3 === 0 ? 'created' : 'viewed',
    canonicalName: n % 3 === 0 ? 'project.created' : 'project.viewed',
    nameFormat: 'preferred',
    subjectType: 'user',
    subjectId: `user_${n % 100_000}`,
    occurredAt: new Date().toISOString(),
    receivedAt: new Date().toISOString(),
    properties,
    propertiesJson,
    apiKeyId: 'key_bench',
  };
}

async function write(count: number): Promise<void> {
  // SQLite has one writer; PostgreSQL gets `concurrency` groups in flight, as the service allows.
  const lanes = storage.dialect === 'sqlite' ? 1 : Number(values.concurrency);
  let left = count;
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (left > 0) {
        const size = Math.min(group, left);
        left -= size;
        await storage.events.insertMany(Array.from({ length: size }, row));
      }
    }),
  );
}

if (prefill > 0) await write(prefill);
const cpu = process.cpuUsage();
const started = process.hrtime.bigint();
await write(total);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const used = process.cpuUsage(cpu);
await storage.close();
await cleanup();
process.stdout.write(
  `${JSON.stringify({
    database: storage.dialect,
    events: total,
    group,
    prefill,
    eventsPerSecond: Math.round(total / seconds),
    cpuMicrosPerEvent: Math.round(((used.user + used.system) / total) * 100) / 100,
  })}\n`,
);
