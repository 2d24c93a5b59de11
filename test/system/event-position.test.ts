// The never-skip test of events-out §1: two instances (separate connection pools / connections) write
// concurrently, with random pauses inside their transactions and some rollbacks, while a reader tails by
// position; at the end the reader has seen every committed event exactly once and no rolled-back one.
import { strict as assert } from 'node:assert';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { eventRow } from '../event-rows.js';
import { openStorage, type OpenedStorage } from '../../src/storage/connect.js';
import { nameFormatCode } from '../../src/storage/database.js';
import type { EventInsert } from '../../src/storage/types.js';
import { dialect, postgresUrl, testDatabase, type TestDatabase } from '../helpers.js';

const WRITE_MS = 6000;
const PRODUCT = 'prod_position';

let database: TestDatabase;
let instanceA: OpenedStorage;
let instanceB: OpenedStorage;

before(async () => {
  database = testDatabase();
  const options = database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema };
  instanceA = await openStorage(database.databaseUrl, options);
  instanceB = await openStorage(database.databaseUrl, options);
  await instanceA.products.create({ id: PRODUCT, name: 'position', createdAt: new Date().toISOString() });
});
after(async () => {
  await instanceA.close();
  await instanceB.close();
  await database.drop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function row(): EventInsert {
  return eventRow(PRODUCT, randomUUID(), {
    eventType: 'position',
    action: 'tested',
    canonicalName: 'position_tested',
    subjectId: 'u',
  });
}

const INSERT_COLUMNS =
  'id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties, api_key_id';
function values(r: EventInsert): unknown[] {
  return [
    r.id,
    r.productId,
    r.source,
    r.externalId,
    r.eventType,
    r.action,
    r.canonicalName,
    // As PostgreSQL's writer stores it (migration 857).
    nameFormatCode(r.nameFormat),
    r.subjectType,
    r.subjectId,
    r.occurredAt,
    r.receivedAt,
    r.propertiesJson,
    r.apiKeyId,
  ];
}
const PLACEHOLDERS_PG = Array.from({ length: 14 }, (_, i) => `$${i + 1}`).join(', ');

describe('the commit position never skips an event', () => {
  it('two instances writing with pauses inside transactions; a tailing reader sees each committed event exactly once', async () => {
    const committed = new Set<string>();
    const rolledBack = new Set<string>();
    const deadline = Date.now() + WRITE_MS;
    const writers: Array<Promise<void>> = [];

    // Through the real writer of each instance (group-commit sized groups).
    for (const instance of [instanceA, instanceB]) {
      writers.push(
        (async () => {
          while (Date.now() < deadline) {
            const rows = Array.from({ length: 1 + Math.floor(Math.random() * 20) }, row);
            let outcomes;
            try {
              outcomes = await instance.events.insertMany(rows);
            } catch (error) {
              // SQLite: another connection holds the write lock past busy_timeout (the service answers 503);
              // the group's transaction was rolled back whole.
              if ((error as { code?: string }).code?.startsWith('SQLITE_BUSY')) {
                await sleep(Math.random() * 5);
                continue;
              }
              throw error;
            }
            for (const outcome of outcomes) committed.add(outcome.event.id);
            await sleep(Math.random() * 5);
          }
        })(),
      );
    }

    // Hand-written transactions that pause (the late committers that a naive "position > last" skips).
    let closeRaw: () => Promise<void> = async () => {};
    if (dialect === 'postgres') {
      const pools = [0, 1].map(
        () =>
          new pg.Pool({ connectionString: postgresUrl, max: 4, options: `-c search_path=${database.postgresSchema}` }),
      );
      closeRaw = async () => {
        for (const pool of pools) await pool.end();
      };
      for (let w = 0; w < 6; w++) {
        const pool = pools[w % 2]!;
        writers.push(
          (async () => {
            while (Date.now() < deadline) {
              const client = await pool.connect();
              const ids: string[] = [];
              try {
                await client.query('BEGIN');
                for (let n = 1 + Math.floor(Math.random() * 3); n > 0; n--) {
                  const r = row();
                  await client.query(`INSERT INTO events (${INSERT_COLUMNS}) VALUES (${PLACEHOLDERS_PG})`, values(r));
                  ids.push(r.id);
                  await sleep(Math.random() * 150);
                }
                if (Math.random() < 0.1) {
                  await client.query('ROLLBACK');
                  ids.forEach((id) => rolledBack.add(id));
                } else {
                  await client.query('COMMIT');
                  ids.forEach((id) => committed.add(id));
                }
              } finally {
                client.release();
              }
            }
          })(),
        );
      }
    }
    // SQLite has one writer at a time per file: a transaction that pauses holds every other writer back
    // (better-sqlite3 even waits synchronously), so the two instances' writers above are the test there.

    // The reader tails instance A by cursor while the writers run, then drains.
    const seen: string[] = [];
    let cursor: string | undefined;
    let writing = true;
    const done = Promise.all(writers).finally(() => (writing = false));
    const readPage = async () => {
      const page = await instanceA.events.page({
        productId: PRODUCT,
        filter: {},
        order: 'asc',
        limit: 37,
        ...(cursor === undefined ? {} : { after: cursor }),
      });
      for (const event of page.events) seen.push(event.id);
      if (page.events.length > 0) cursor = page.events[page.events.length - 1]!.position;
      return page;
    };
    while (writing) {
      const page = await readPage();
      if (page.next === null) await sleep(Math.random() * 20);
    }
    await done;
    await closeRaw();
    for (let empty = 0; empty < 2;) {
      const page = await readPage();
      if (page.events.length === 0) empty++;
    }

    assert.ok(committed.size > 200, `enough concurrent writes to mean something (${committed.size})`);
    assert.equal(new Set(seen).size, seen.length, 'no event seen twice');
    const seenSet = new Set(seen);
    const missing = [...committed].filter((id) => !seenSet.has(id));
    assert.deepEqual(missing, [], 'every committed event seen');
    assert.ok(
      seen.every((id) => !rolledBack.has(id)),
      'no rolled-back event seen',
    );
    assert.equal(seen.length, committed.size);
  });
});
