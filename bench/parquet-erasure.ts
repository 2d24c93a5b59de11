// `npm run bench:parquet-erasure`: how long a person's erasure takes in a Parquet file destination
// (warehouses.md §2), on files written by the destination's own writer: `--files` files of `--rows` events each,
// every event by one of `--people` people spread over all the files, and one person (`--holding` files hold them)
// erased. Prints the time of the erasure, the files it rewrote and the rows it removed. See bench/README.md
// ("Warehouses").
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import { eraseFromFiles, writeMessages } from '../src/services/destinations/files/parquet-files.js';
import type { StoredMessage } from '../src/storage/types.js';

const { values } = parseArgs({
  options: {
    files: { type: 'string' },
    rows: { type: 'string' },
    people: { type: 'string' },
    holding: { type: 'string' },
  },
  strict: true,
});
const files = Number(values.files ?? 300);
const rows = Number(values.rows ?? 2000);
const people = Number(values.people ?? 5000);
const holding = Number(values.holding ?? 3);

function event(position: number, person: string, at: number): StoredMessage {
  const id = randomUUID();
  const receivedAt = new Date(at).toISOString();
  return {
    kind: 'event',
    position: String(position),
    event: {
      id,
      productId: 'prd_bench',
      source: 'api',
      externalId: person,
      eventType: 'order',
      action: 'completed',
      canonicalName: 'order_completed',
      nameFormat: 'legacy',
      subjectType: 'user',
      subjectId: person,
      occurredAt: receivedAt,
      receivedAt,
      properties: { total: position % 997, currency: 'EUR', note: `order ${position}` },
      apiKeyId: null,
      context: null,
      original: null,
    },
  } as StoredMessage;
}

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'inlet-bench-parquet-'));
  try {
    const started = performance.now();
    const hour = Date.parse('2026-11-28T00:00:00Z');
    let position = 1;
    for (let f = 0; f < files; f++) {
      const messages: StoredMessage[] = [];
      for (let r = 0; r < rows; r++) {
        // The erased person in the first `holding` files, a row in each; everyone else spread evenly.
        const person = r === 0 && f < holding ? 'erased-person' : `person-${(f * rows + r) % people}`;
        messages.push(event(position++, person, hour + f * 60_000));
      }
      await writeMessages(root, 'hour', messages, new Date(), (a, b) => Number(a) - Number(b), { token: 1 });
    }
    const written = (performance.now() - started) / 1000;
    const erasing = performance.now();
    const removed = await eraseFromFiles(root, ['erased-person']);
    const seconds = (performance.now() - erasing) / 1000;
    process.stdout.write(
      `npm run bench:parquet-erasure -- --files ${files} --rows ${rows} --people ${people} --holding ${holding}\n` +
        `wrote ${files} files of ${rows} rows in ${written.toFixed(1)} s\n` +
        `erased one person (in ${holding} files): ${removed} rows removed in ${seconds.toFixed(2)} s ` +
        `(${((seconds * 1000) / files).toFixed(1)} ms a file)\n` +
        `load average ${loadavg()
          .map((l) => l.toFixed(1))
          .join(' ')}\n`,
    );
    if (removed !== holding) throw new Error(`expected ${holding} rows removed, got ${removed}`);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
