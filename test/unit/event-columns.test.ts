// The events' column table (src/storage/event-columns.ts): the lists derived from it and the row mappers it
// compiles. The mappers are generated source, so each is checked field by field, key order included (records
// are written out as JSON as they are).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  EVENT_COLUMN_LIST,
  EVENT_COLUMN_NAMES,
  EVENT_COLUMNS,
  EVENT_TEXT_COLUMN_LIST,
  eventFromRawRow,
  eventFromRow,
  RAW_EVENT_COLUMNS,
  SQLITE_ACTION_TEXT,
  SQLITE_EVENT_COLUMN_LIST,
  SQLITE_EVENT_TYPE_TEXT,
  SQLITE_KEY_TEXT,
  SQLITE_NAME_TEXT,
  SQLITE_PRODUCT_TEXT,
  SQLITE_SOURCE_TEXT,
  type EventRow,
} from '../../src/storage/event-columns.js';
import { externalIdInto, nameFormatCode, SUBJECT_TYPE_CODES } from '../../src/storage/database.js';
import type { EventInsert, EventRecord } from '../../src/storage/types.js';

const NAMES =
  'id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original';

/** Compares values and the order of their keys. */
function sameRecord(actual: EventRecord, expected: EventRecord): void {
  assert.deepStrictEqual(actual, expected);
  assert.equal(JSON.stringify(actual), JSON.stringify(expected));
}

test('the lists name every column once, in the table order, json cast to text where asked', () => {
  assert.equal(EVENT_COLUMN_LIST, NAMES);
  assert.deepEqual(EVENT_COLUMN_NAMES, NAMES.split(', '));
  assert.equal(new Set(EVENT_COLUMN_NAMES).size, EVENT_COLUMNS.length);
  assert.equal(
    SQLITE_EVENT_COLUMN_LIST,
    NAMES.replace('product_id', `${SQLITE_PRODUCT_TEXT} AS product_id`)
      .replace('api_key_id', `${SQLITE_KEY_TEXT} AS api_key_id`)
      .replace('event_type', `${SQLITE_EVENT_TYPE_TEXT} AS event_type`)
      .replace(' action', ` ${SQLITE_ACTION_TEXT} AS action`)
      .replace(' canonical_name', ` ${SQLITE_NAME_TEXT} AS canonical_name`)
      .replace(' source', ` ${SQLITE_SOURCE_TEXT} AS source`)
      .replace(' subject_type', ` ${SUBJECT_TYPE_CODES.text('events.subject_type')} AS subject_type`),
  );
  assert.equal(RAW_EVENT_COLUMNS, `${SQLITE_EVENT_COLUMN_LIST}, position`);
  assert.equal(
    EVENT_TEXT_COLUMN_LIST,
    NAMES.replace(
      'occurred_at',
      "round(extract(epoch FROM date_trunc('milliseconds', occurred_at)) * 1000)::int8 AS occurred_at",
    )
      .replace(
        'received_at',
        "round(extract(epoch FROM date_trunc('milliseconds', received_at)) * 1000)::int8 AS received_at",
      )
      .replace('properties', 'properties::text AS properties')
      .replace('context', 'context::text AS context')
      .replace('original', 'original::text AS original'),
  );
});

test("a writer's values are the insert's, JSON as its text, absent JSON as NULL", () => {
  const insert: EventInsert = {
    id: '0190a0d0-0000-7000-8000-000000000001',
    productId: 'prod_1',
    source: 'segment',
    externalId: null,
    eventType: 'order',
    action: 'placed',
    canonicalName: 'order_placed',
    nameFormat: 'legacy',
    subjectType: 'user',
    subjectId: 'u1',
    occurredAt: '2026-01-02T03:04:05.000Z',
    receivedAt: '2026-01-02T03:04:06.000Z',
    properties: { a: 1 },
    propertiesJson: '{"a":1}',
    apiKeyId: 'key_1',
    originalJson: '{"type":"track"}',
  };
  assert.deepEqual(
    EVENT_COLUMNS.map((column) => column.value(insert)),
    [
      insert.id,
      'prod_1',
      'segment',
      null,
      'order',
      'placed',
      'order_placed',
      'legacy',
      'user',
      'u1',
      '2026-01-02T03:04:05.000Z',
      '2026-01-02T03:04:06.000Z',
      '{"a":1}',
      'key_1',
      null,
      '{"type":"track"}',
    ],
  );
});

const STORED = {
  id: 'e1',
  product_id: 'prod_1',
  source: 'api',
  external_id: 'x1',
  event_type: 'order',
  action: 'placed',
  canonical_name: 'order_placed',
  name_format: 'preferred',
  subject_type: 'user',
  subject_id: 'u1',
  api_key_id: null,
};
const FIELDS = {
  id: 'e1',
  productId: 'prod_1',
  source: 'api',
  externalId: 'x1',
  eventType: 'order',
  action: 'placed',
  canonicalName: 'order_placed',
  nameFormat: 'preferred',
  subjectType: 'user',
  subjectId: 'u1',
  occurredAt: '2026-01-02T03:04:05.000Z',
  receivedAt: '2026-01-02T03:04:06.000Z',
} as const;

test('a stored row becomes its record: times as ISO text, JSON parsed or kept as text, the position when read', () => {
  // PostgreSQL's row: Dates, json parsed by node-postgres.
  const postgres: EventRow = {
    ...STORED,
    occurred_at: new Date('2026-01-02T03:04:05.000Z'),
    received_at: new Date('2026-01-02T03:04:06.000Z'),
    properties: { a: 1 },
    context: { ip: '::1' },
    original: null,
    position: '812.3',
  };
  sameRecord(eventFromRow(postgres), {
    ...FIELDS,
    properties: { a: 1 },
    apiKeyId: null,
    context: { ip: '::1' },
    original: null,
    position: '812.3',
  });
  // SQLite's row: ISO text, JSON text; without a position (the writer's duplicate lookup).
  const sqlite: EventRow = {
    ...STORED,
    occurred_at: FIELDS.occurredAt,
    received_at: FIELDS.receivedAt,
    properties: '{"a":1}',
    context: null,
    original: '{"type":"track"}',
  };
  sameRecord(eventFromRow(sqlite), {
    ...FIELDS,
    properties: { a: 1 },
    apiKeyId: null,
    context: null,
    original: { type: 'track' },
  });
  // jsonText: the stored text, properties an empty placeholder, context and original not set.
  const text = eventFromRow({ ...sqlite, original: undefined as unknown as null, position: 7 }, true);
  sameRecord(text, {
    ...FIELDS,
    properties: {},
    apiKeyId: null,
    jsonText: { properties: '{"a":1}', context: null, original: null },
    position: '7',
  });
  assert.ok(Object.isFrozen(text.properties));
});

test('an SQLite row read as an array becomes its record with the JSON as text and the position last', () => {
  const row = [...NAMES.split(', ').map((name) => (STORED as Record<string, unknown>)[name]), 42];
  row[10] = FIELDS.occurredAt;
  row[11] = FIELDS.receivedAt;
  row[12] = '{"a":1}';
  row[14] = '{"ip":"::1"}';
  row[15] = null;
  sameRecord(eventFromRawRow(row), {
    ...FIELDS,
    properties: {},
    apiKeyId: null,
    jsonText: { properties: '{"a":1}', context: '{"ip":"::1"}', original: null },
    position: '42',
  });
});

test('SQLite keeps a lowercase uuid external id as bytes, any other as text, a name format as a number; each reads back', () => {
  const into = Buffer.alloc(16);
  const lower = '0f8fad5b-d9cb-469f-a165-70867728950e';
  assert.equal(externalIdInto(lower, into), into);
  assert.equal(into.toString('hex'), lower.replaceAll('-', ''));
  for (const other of [
    lower.toUpperCase(),
    '0F8fad5b-d9cb-469f-a165-70867728950e',
    lower.replaceAll('-', ''),
    `{${lower}}`,
    lower.replace('-', '_'),
    `${lower.slice(0, 35)}g`,
    'x1',
    '',
  ])
    assert.equal(externalIdInto(other, into), other);
  assert.equal(externalIdInto(null, into), null);
  // The mappers: the bytes as the text they came from, text and NULL as they are.
  const stored: EventRow = {
    ...STORED,
    occurred_at: FIELDS.occurredAt,
    received_at: FIELDS.receivedAt,
    properties: '{}',
    context: null,
    original: null,
  };
  const row = [...NAMES.split(', ').map((name) => (stored as Record<string, unknown>)[name]), 42];
  row[3] = Buffer.from(lower.replaceAll('-', ''), 'hex');
  assert.equal(eventFromRawRow(row).externalId, lower);
  assert.equal(eventFromRow({ ...stored, external_id: row[3] as unknown as string }).externalId, lower);
  row[3] = null;
  assert.equal(eventFromRawRow(row).externalId, null);
  // A name format: its number as its text, a text as it is.
  for (const [code, format] of [
    [0, 'preferred'],
    [1, 'segment'],
    [4, 'v1'],
    [9, '9'],
    ['legacy', 'legacy'],
  ] as const) {
    row[7] = code;
    assert.equal(eventFromRawRow(row).nameFormat, format);
    assert.equal(eventFromRow({ ...stored, name_format: code as string }).nameFormat, format);
    if (typeof code === 'number' && code < 5) assert.equal(nameFormatCode(format), code);
  }
  assert.equal(nameFormatCode('other'), 'other');
  assert.equal(eventFromRow({ ...stored, external_id: null }).externalId, null);
});
