// The event store behind ingestion, on the dialect under test (contract §4 idempotency): concurrent
// writers of overlapping idempotency keys, in any order, each get a complete and consistent answer.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { uuidv7 } from '../src/domain/ids.js';
import type { EventInsert } from '../src/storage/types.js';
import { eventRow } from './event-rows.js';
import { createTestServices } from './helpers.js';

let services: Awaited<ReturnType<typeof createTestServices>>;
let productId: string;

before(async () => {
  services = await createTestServices();
  productId = (await services.services.keys.createProduct('store')).id;
});
after(async () => services.close());

function row(externalId: string | null): EventInsert {
  return eventRow(productId, externalId, { properties: { externalId } });
}

describe('EventStore.insertMany', () => {
  it('outcomes are in row order: created, duplicate of a stored row, duplicate of an earlier row of the same call', async () => {
    const store = services.services.storage.events;
    const [first] = await store.insertMany([row('s-1')]);
    assert.equal(first!.status, 'created');
    const rows = [row('s-2'), row('s-1'), row(null), row('s-2'), row(null)];
    const outcomes = await store.insertMany(rows);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'duplicate', 'created', 'duplicate', 'created'],
    );
    assert.equal(outcomes[1]!.event.id, first!.event.id);
    assert.equal(outcomes[3]!.event.id, rows[0]!.id);
    assert.equal(outcomes[2]!.event.id, rows[2]!.id);
  });

  it('concurrent calls with the same keys in opposite orders neither fail nor deadlock, and agree on one row per key', async () => {
    const store = services.services.storage.events;
    for (let round = 0; round < 2; round++) {
      const keys = Array.from({ length: 1500 }, (_, i) => `o${round}-${i}`);
      const calls = [
        keys,
        [...keys].reverse(),
        keys.filter((_, i) => i % 2 === 0).reverse(),
        keys.slice(700).concat(keys.slice(0, 700)),
      ];
      const results = await Promise.all(calls.map((order) => store.insertMany(order.map((k) => row(k)))));
      const idByKey = new Map<string, string>();
      let created = 0;
      results.forEach((outcomes, c) =>
        outcomes.forEach((outcome, i) => {
          const key = calls[c]![i]!;
          assert.equal(outcome.event.externalId, key);
          if (outcome.status === 'created') created++;
          const known = idByKey.get(key);
          if (known === undefined) idByKey.set(key, outcome.event.id);
          else assert.equal(outcome.event.id, known, key);
        }),
      );
      assert.equal(created, keys.length);
    }
  });

  it('stores every text and JSON value as sent, quotes, backslashes, braces, commas, the word NULL and non-ASCII included', async () => {
    const store = services.services.storage.events;
    const tricky = ['a"b', 'back\\slash', '{x,y}', 'NULL', '', ' spaced ', 'ünï "ço\\dé" 🎉', 'x\\"y', 'comma,', '\\'];
    const rows = tricky.map((text, i) => ({
      ...row(`tricky-${i}-${text}`),
      subjectId: text,
      eventType: text,
      canonicalName: `${text}_tested`,
      properties: { text, nested: { [text]: [text, null, 1.5] } },
      propertiesJson: JSON.stringify({ text, nested: { [text]: [text, null, 1.5] } }),
      context: { ip: text },
      contextJson: JSON.stringify({ ip: text }),
      original: { raw: text },
      originalJson: JSON.stringify({ raw: text }),
    }));
    const created = await store.insertMany(rows);
    assert.deepEqual(
      created.map((o) => o.status),
      rows.map(() => 'created'),
    );
    // The same keys again: every answer is the stored row, read back from the database.
    const again = await store.insertMany(rows.map((r) => ({ ...r, id: uuidv7() })));
    again.forEach((outcome, i) => {
      const sent = rows[i]!;
      assert.equal(outcome.status, 'duplicate');
      assert.equal(outcome.event.id, sent.id);
      assert.equal(outcome.event.externalId, sent.externalId);
      assert.equal(outcome.event.subjectId, sent.subjectId);
      assert.equal(outcome.event.eventType, sent.eventType);
      assert.equal(outcome.event.canonicalName, sent.canonicalName);
      assert.deepEqual(outcome.event.properties, sent.properties);
      assert.deepEqual(outcome.event.context, sent.context);
      assert.deepEqual(outcome.event.original, sent.original);
    });
  });
});
