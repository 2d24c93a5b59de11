// Never skipped, one order (events-out §6, clarifications §26): events and identity messages written
// concurrently (on PostgreSQL by two service instances on one schema, so by several connections whose
// transactions commit out of order; on SQLite by concurrent loops of one instance) while a deliverer follows them. At the end the receiver has every
// message exactly once, in the one position order of both logs.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { messageIdOfEvent } from '../src/domain/destinations.js';
import type { Services } from '../src/services.js';
import { createTestServices, dialect, eventProduct, reusableDatabase, type TestDatabase } from './helpers.js';
import { eventRow } from './event-rows.js';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.js';

let database: TestDatabase;
let writerA: Services;
let writerB: Services;
let receiver: WebhookReceiver;
const closers: Array<() => Promise<void>> = [];

before(async () => {
  database = reusableDatabase();
  const a = await createTestServices({}, database);
  writerA = a.services;
  closers.push(() => a.close());
  if (dialect === 'sqlite') {
    // SQLite is one instance; a second connection in this process would wait on the first synchronously.
    writerB = writerA;
  } else {
    // A second instance on the same schema: its transactions interleave with the first one's.
    const b = await createTestServices({}, { ...database, drop: async () => {} });
    writerB = b.services;
    closers.unshift(() => b.services.close());
  }
  receiver = await startWebhookReceiver();
});
after(async () => {
  await receiver.close();
  for (const close of closers) await close();
});

/** SQLite answers synchronously: without this the loops would keep the timers (and the receiver) from running. */
const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The product's messages in the one order: (tx, seq) on PostgreSQL; event position / after_event on SQLite. */
async function expectedOrder(productId: string): Promise<string[]> {
  const db = writerA.storage.db;
  if (dialect === 'postgres') {
    const rows = await sql<{ kind: string; id: string }>`
      SELECT kind, id FROM (
        SELECT 'e' AS kind, id::text AS id, tx, seq FROM events WHERE product_id = ${productId}
        UNION ALL SELECT 'i' AS kind, id, tx, seq FROM identity_messages WHERE product_id = ${productId}
      ) AS m ORDER BY tx, seq`.execute(db);
    return rows.rows.map((r) => (r.kind === 'e' ? messageIdOfEvent(r.id) : r.id));
  }
  const rows = await sql<{ kind: string; id: string }>`
    SELECT kind, id FROM (
      SELECT 'e' AS kind, lower(substr(hex(id), 1, 8) || '-' || substr(hex(id), 9, 4) || '-' || substr(hex(id), 13, 4) || '-' || substr(hex(id), 17, 4) || '-' || substr(hex(id), 21)) AS id, position AS k1, 0 AS k2, 0 AS k3
        FROM events WHERE product_id = ${eventProduct(productId)}
      UNION ALL SELECT 'i' AS kind, id, after_event AS k1, 1 AS k2, position AS k3 FROM identity_messages WHERE product_id = ${productId}
    ) ORDER BY k1, k2, k3`.execute(db);
  return rows.rows.map((r) => (r.kind === 'e' ? messageIdOfEvent(r.id) : r.id));
}

describe('destinations: concurrent writers, one order, nothing skipped', () => {
  it('delivers every event and identity message exactly once, in position order, while they are written', async () => {
    const product = await writerA.keys.createProduct('order');
    const created = await writerA.destinations.create(product.id, {
      type: 'webhook',
      name: 'order',
      url: receiver.url,
      start: 'beginning',
      batch: { max_messages: 50 },
    });
    receiver.secrets = [created.secret!];
    let writing = true;
    let n = 0;
    const eventLoop = async (services: Services, worker: number) => {
      while (writing) {
        const now = new Date().toISOString();
        // The real writer of each backend (the group commit's insertMany), five events per transaction.
        const rows = Array.from({ length: 5 }, () =>
          eventRow(product.id, null, { subjectId: `w${worker}-${n++}`, occurredAt: now, receivedAt: now }),
        );
        await services.storage.events.insertMany(rows);
        await yieldToIo();
      }
    };
    const identityLoop = async (services: Services, worker: number) => {
      let i = 0;
      while (writing) {
        await services.identity.identify(product.id, { external_id: `user-${worker}-${i % 7}`, traits: { n: i } });
        if (i % 5 === 4)
          await services.identity.alias(product.id, {
            from_external_id: `anon-${worker}-${i}`,
            to_external_id: `user-${worker}-${i % 7}`,
          });
        i++;
        await yieldToIo();
      }
    };
    const deliverLoop = async () => {
      while (writing) {
        await writerA.destinations.tick();
        await writerA.destinations.idle();
      }
    };
    const loops = [
      eventLoop(writerA, 0),
      eventLoop(writerB, 1),
      identityLoop(writerA, 2),
      identityLoop(writerB, 3),
      deliverLoop(),
    ];
    await new Promise((resolve) => setTimeout(resolve, 2000));
    writing = false;
    await Promise.all(loops);
    for (let i = 0; i < 3; i++) {
      await writerA.destinations.tick();
      await writerA.destinations.idle();
    }
    const expected = await expectedOrder(product.id);
    assert.ok(
      expected.some((id) => id.startsWith('idm_')) && expected.some((id) => id.startsWith('evt_')),
      'both kinds were written',
    );
    assert.equal(receiver.unverified, 0);
    const duplicates = [...receiver.countById.entries()].filter(([, count]) => count > 1);
    assert.deepEqual(duplicates, [], 'no message twice (no failure happened)');
    assert.deepEqual(
      receiver.accepted.map((m) => m.id),
      expected,
    );
  });
});
