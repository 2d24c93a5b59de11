// What a deliverer reads is the stored event as every other read gives it back (events-out §6): on SQLite the
// deliverers' page maps the row's stored numbers and codes itself (storage/destinations/reads.ts) instead of the
// select lists' lookups, so each stored form is checked against the read by id here.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { uuidv7 } from '../src/domain/ids.js';
import type { Services } from '../src/services.js';
import { messageIdOfEvent } from '../src/domain/destinations.js';
import { destinationMessage } from '../src/resources/destination-messages.js';
import { eventResource } from '../src/resources/events.js';
import type { EventInsert } from '../src/storage/types.js';
import { createTestServices, dialect } from './helpers.js';
import { eventRow } from './event-rows.js';

let services: Services;
let close: () => Promise<void>;

before(async () => {
  ({ services, close } = await createTestServices());
});
after(() => close());

describe('destination reads', () => {
  it('give each event as a read by id does, whatever form its columns are stored in', async () => {
    const product = await services.keys.createProduct('reads');
    const { record: key } = await services.keys.createKey(product.id, { kind: 'events' });
    const now = new Date().toISOString();
    // Every coded value and one that is not (stored as text), a name split two ways, with and without a key.
    const forms: Array<Partial<EventInsert>> = [
      { source: 'api', subjectType: 'user', apiKeyId: key.id },
      { source: 'segment', subjectType: 'account', externalId: uuidv7() },
      { source: 'api', subjectType: 'subscription', externalId: 'Not-A-UUID' },
      { source: 'import', subjectType: 'user', eventType: 'order_pl', action: 'aced' },
      { source: 'segment', subjectType: 'user', nameFormat: 'segment', apiKeyId: key.id },
    ];
    const rows = forms.map((form, i) =>
      eventRow(product.id, null, { subjectId: `s${i}`, occurredAt: now, receivedAt: now, properties: { i }, ...form }),
    );
    await services.storage.events.insertMany(rows);

    const messages = await services.storage.destinations.readMessages(product.id, { event: null, identity: null }, 100);
    const events = messages.flatMap((message) => (message.kind === 'event' ? [message.event] : []));
    assert.equal(events.length, rows.length);
    // The JSON columns travel as their stored text to the deliverers (`jsonText`); every other field as read by id.
    const fields = (event: object) =>
      Object.fromEntries(
        Object.entries(event).filter(([name]) => !['properties', 'context', 'original', 'jsonText'].includes(name)),
      );
    for (const event of events) {
      const stored = await services.storage.events.get(product.id, event.id);
      assert.deepEqual(fields(event), fields(stored!));
    }
    assert.deepEqual(
      events.map((event) => [event.source, event.subjectType, event.apiKeyId, event.eventType, event.action]),
      rows.map((row) => [row.source, row.subjectType, row.apiKeyId, row.eventType, row.action]),
    );
  });

  it('make each event message the bytes of JSON.stringify of its object form', async () => {
    const product = await services.keys.createProduct('message-bytes');
    const { record: key } = await services.keys.createKey(product.id, { kind: 'events' });
    const times = ['2026-11-28T23:59:59.999Z', '2026-11-29T00:00:00.000Z'];
    // Values that need escapes and values that do not, repeated and not (the texts of few-valued fields and of the
    // last time are kept between events: resources/event-export.ts), and on SQLite an id that is no uuid.
    const forms: Array<Partial<EventInsert>> = [
      { subjectId: 'plain', externalId: uuidv7(), apiKeyId: key.id },
      { subjectId: 'say "hi"\n\t\u0001\\', externalId: 'e "1"', canonicalName: 'q"uote', eventType: 'q"uote' },
      { subjectId: 'café ☕ 𝄞 \u2028', externalId: null, source: 'sé\u007f', subjectType: 'ac"count' },
      { subjectId: 'plain', occurredAt: times[1], receivedAt: times[1], apiKeyId: key.id },
      { subjectId: 'plain', occurredAt: times[0], receivedAt: times[1] },
      ...(dialect === 'sqlite' ? [{ id: 'not-a-uuid "x"', subjectId: 'text id' }] : []),
    ];
    const rows = forms.map((form, i) =>
      eventRow(product.id, null, {
        subjectId: `s${i}`,
        occurredAt: times[0]!,
        receivedAt: times[0]!,
        properties: { i, s: 'x"y' },
        ...form,
      }),
    );
    await services.storage.events.insertMany(rows);

    const messages = await services.storage.destinations.readMessages(product.id, { event: null, identity: null }, 100);
    assert.equal(messages.length, rows.length);
    for (const message of messages) {
      assert.equal(message.kind, 'event');
      if (message.kind !== 'event') continue;
      const stored = (await services.storage.events.get(product.id, message.event.id))!;
      const id = messageIdOfEvent(stored.id);
      const expected = JSON.stringify({
        id,
        type: 'event.created',
        timestamp: stored.receivedAt,
        data: eventResource(stored),
      });
      const made = destinationMessage(message);
      assert.deepEqual(JSON.parse(made.json), JSON.parse(expected));
      // SQLite keeps the JSON text Inlet wrote (JSON.stringify's): the same bytes there.
      if (dialect === 'sqlite') assert.equal(made.json, expected);
      assert.equal(made.id, id);
    }
  });
});
