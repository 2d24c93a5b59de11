// The columns of `events`, each described once: both ingest writers (their placeholders, arguments and
// PostgreSQL's unnest arrays), the event reads and the destinations' reads (their select lists) and the mapping
// of a stored row back to an `EventRecord` are derived from this table when the module loads. A new column is
// one entry here plus a migration. The generated columns (`position` on SQLite, `tx` and `seq` on PostgreSQL,
// SQLite's `key_hash` and `subject_hash`) are not in the table: the storage that has them writes or reads them
// itself.
import { sql, type AliasedRawBuilder, type Selectable } from 'kysely';
import {
  externalIdText,
  fromJson,
  nameFormatText,
  SOURCE_CODES,
  SUBJECT_TYPE_CODES,
  toIso,
  uuidText,
  type EventsTable,
  type TextCodes,
} from './database.js';
import type { EventInsert, EventRecord } from './types.js';

/**
 * The column's type on PostgreSQL (the element type of its unnest array), which also says how it reads back:
 * `timestamptz` as milliseconds since 1970 on both (SQLite stores them so, migration 853; PostgreSQL's select lists
 * ask for them so, `postgresSelection`; the mappers give them back as ISO text), `uuid` as text from node-postgres (SQLite stores its 16 bytes; the mappers format
 * them), `json` parsed by node-postgres unless it is read as text (SQLite keeps the text).
 */
export type EventColumnType = 'uuid' | 'text' | 'timestamptz' | 'json';

export interface EventColumn {
  /** The column of `events`. */
  readonly name: keyof EventsTable;
  /** Its field of `EventRecord`; for a json column also its key in `EventRecord.jsonText`. */
  readonly field: keyof EventRecord;
  readonly type: EventColumnType;
  /** A json column that may be NULL is left out of a record read with `jsonText`, as `context` is. */
  readonly nullable: boolean;
  /** The value a writer stores: text, or null for NULL. */
  readonly value: (event: EventInsert) => string | null;
  /**
   * How SQLite stores a text column other than as its text (migration 855; PostgreSQL keeps the text): `uuid`, a
   * lowercase canonical uuid as its 16 bytes and any other text as it is (`externalIdInto`, back through
   * `externalIdText`); `name-format`, a known name format as its small number (`nameFormatCode`, `nameFormatText`;
   * PostgreSQL stores that number too since 857, converted by its writer's statement).
   */
  readonly sqliteCode?: 'uuid' | 'name-format';
}

// Keyed by column name so that the compiler refuses a column of EventsTable without its entry (and an entry
// without its column); the table's order is the order of every list derived from it.
const COLUMNS: { readonly [Name in keyof EventsTable]: Omit<EventColumn, 'name'> } = {
  id: { field: 'id', type: 'uuid', nullable: false, value: (e) => e.id },
  product_id: { field: 'productId', type: 'text', nullable: false, value: (e) => e.productId },
  source: { field: 'source', type: 'text', nullable: false, value: (e) => e.source },
  external_id: { field: 'externalId', type: 'text', nullable: true, value: (e) => e.externalId, sqliteCode: 'uuid' },
  event_type: { field: 'eventType', type: 'text', nullable: false, value: (e) => e.eventType },
  action: { field: 'action', type: 'text', nullable: false, value: (e) => e.action },
  canonical_name: { field: 'canonicalName', type: 'text', nullable: false, value: (e) => e.canonicalName },
  name_format: {
    field: 'nameFormat',
    type: 'text',
    nullable: false,
    value: (e) => e.nameFormat,
    sqliteCode: 'name-format',
  },
  subject_type: { field: 'subjectType', type: 'text', nullable: false, value: (e) => e.subjectType },
  subject_id: { field: 'subjectId', type: 'text', nullable: false, value: (e) => e.subjectId },
  occurred_at: { field: 'occurredAt', type: 'timestamptz', nullable: false, value: (e) => e.occurredAt },
  received_at: { field: 'receivedAt', type: 'timestamptz', nullable: false, value: (e) => e.receivedAt },
  properties: { field: 'properties', type: 'json', nullable: false, value: (e) => e.propertiesJson },
  api_key_id: { field: 'apiKeyId', type: 'text', nullable: true, value: (e) => e.apiKeyId },
  context: { field: 'context', type: 'json', nullable: true, value: (e) => e.contextJson ?? null },
  original: { field: 'original', type: 'json', nullable: true, value: (e) => e.originalJson ?? null },
};

export const EVENT_COLUMNS: readonly EventColumn[] = Object.entries(COLUMNS).map(([name, column]) => ({
  name: name as keyof EventsTable,
  ...column,
}));

/** The column names, for Kysely's `select`. */
export const EVENT_COLUMN_NAMES: ReadonlyArray<keyof EventsTable> = EVENT_COLUMNS.map((column) => column.name);

/** `id, product_id, …`: the insert and select lists of hand-written SQL. */
export const EVENT_COLUMN_LIST = EVENT_COLUMN_NAMES.join(', ');

/**
 * A column of PostgreSQL's select lists of `events` when it is not read as it is. A time as milliseconds since 1970,
 * as SQLite stores it (`toIso` formats both alike), in every read: node-postgres would parse its text into a Date
 * only for the mapper to format it back (docs/design.md, "Live stream and export"); truncated to the millisecond
 * first, as a Date made from PostgreSQL's microseconds keeps the millisecond they fall in, then `round`, exact
 * whether `extract` gives numeric (PostgreSQL 14 and later) or double precision (13, whose product by 1000 may fall
 * a hair under the whole millisecond). With `json: 'text'`, for a reader that only writes the event out again (an
 * export, a delivery): json cast to text, which node-postgres would parse and the reader would stringify again.
 */
function postgresSelection(column: EventColumn, json: 'text' | 'parsed'): string | undefined {
  if (column.type === 'timestamptz')
    return `round(extract(epoch FROM date_trunc('milliseconds', ${column.name})) * 1000)::int8`;
  if (column.type === 'json' && json === 'text') return `${column.name}::text`;
  return undefined;
}

function postgresSelections(
  json: 'text' | 'parsed',
): ReadonlyArray<keyof EventsTable | AliasedRawBuilder<string, string>> {
  return EVENT_COLUMNS.map((column) => {
    const selection = postgresSelection(column, json);
    return selection === undefined ? column.name : sql<string>`${sql.raw(selection)}`.as(column.name);
  });
}

/** PostgreSQL's select list of an event's columns for Kysely's `select` (`PositionSql.columns`). */
export const POSTGRES_EVENT_SELECTIONS = postgresSelections('parsed');

/** PostgreSQL's select list for a reader that writes the event out again: the JSON columns as their text. */
export const EVENT_TEXT_SELECTIONS = postgresSelections('text');

/** The same as EVENT_TEXT_SELECTIONS, for hand-written SQL. */
export const EVENT_TEXT_COLUMN_LIST = EVENT_COLUMNS.map((column) => {
  const selection = postgresSelection(column, 'text');
  return selection === undefined ? column.name : `${selection} AS ${column.name}`;
}).join(', ');

/**
 * SQLite stores an event's product as the product's number (migration 854): the writer's value for `product_id`,
 * its one parameter the product's text id.
 */
export const SQLITE_PRODUCT_NUMBER = '(SELECT number FROM product_numbers WHERE product_id = ?)';

/** And back: the product's text id of a row of `events` (a select list's `product_id`). */
export const SQLITE_PRODUCT_TEXT = '(SELECT product_id FROM product_numbers WHERE number = events.product_id)';

/** The same for the API key (`api_key_id`): its number in `key_numbers`, one parameter, its text id. */
export const SQLITE_KEY_NUMBER = '(SELECT number FROM key_numbers WHERE key_id = ?)';

/** And back: the key's text id of a row of `events` (NULL stays NULL). */
export const SQLITE_KEY_TEXT = '(SELECT key_id FROM key_numbers WHERE number = events.api_key_id)';

/**
 * SQLite's `external_id` of a row of `events` as its text (migration 855), in SQL: what the idempotency keys hash
 * when they are built from the rows.
 */
export const SQLITE_EXTERNAL_ID_TEXT = `CASE typeof(external_id) WHEN 'blob' THEN lower(${[
  [1, 8],
  [9, 4],
  [13, 4],
  [17, 4],
  [21, 12],
]
  .map(([from, length]) => `substr(hex(external_id), ${from}, ${length})`)
  .join(" || '-' || ")}) ELSE external_id END`;

/**
 * SQLite stores an event's name as a number (migration 855): `event_names` numbers each canonical name once, with
 * the type and the action of the first event that had it; `canonical_name` of `events` holds the number, and
 * `event_type` and `action` are NULL unless the event split its name otherwise. The name's number, one parameter,
 * the canonical name:
 */
export const SQLITE_NAME_NUMBER = '(SELECT number FROM event_names WHERE canonical_name = ?)';

/** The text of one of the name's columns in `event_names` for a row of `events`. */
const sqliteNameText = (column: 'canonical_name' | 'event_type' | 'action') =>
  `(SELECT ${column} FROM event_names WHERE number = events.canonical_name)`;

/** SQLite's canonical name of a row of `events` as its text (a select list's). */
export const SQLITE_NAME_TEXT = sqliteNameText('canonical_name');

/** SQLite's `event_type` and `action` of a row of `events` as their text, for a filter. */
export const SQLITE_EVENT_TYPE_TEXT = `coalesce(event_type, ${sqliteNameText('event_type')})`;
export const SQLITE_ACTION_TEXT = `coalesce(action, ${sqliteNameText('action')})`;

/**
 * The columns SQLite stores as a small number where their text is a known value (migration 856): the writer binds
 * the text's code, a filter compares with it (`PositionSql.code`), a select list gives the text back.
 */
export const SQLITE_CODED: Partial<Record<keyof EventsTable, TextCodes>> = {
  source: SOURCE_CODES,
  subject_type: SUBJECT_TYPE_CODES,
};

/** SQLite's `source` of a row of `events` as its text: what the idempotency keys hash when built from the rows. */
export const SQLITE_SOURCE_TEXT = SOURCE_CODES.text('events.source');

/** SQLite's value of each numbered column (its one parameter the text id), and how a select list reads it back. */
const SQLITE_NUMBERED: Partial<Record<keyof EventsTable, { number: string; text: string }>> = {
  product_id: { number: SQLITE_PRODUCT_NUMBER, text: SQLITE_PRODUCT_TEXT },
  api_key_id: { number: SQLITE_KEY_NUMBER, text: SQLITE_KEY_TEXT },
  // The writer binds the name's number, and the type and the action only where they are not the name's (NULL).
  canonical_name: { number: '?', text: SQLITE_NAME_TEXT },
  event_type: { number: '?', text: SQLITE_EVENT_TYPE_TEXT },
  action: { number: '?', text: SQLITE_ACTION_TEXT },
  // The writer binds the code (SQLITE_CODED).
  source: { number: '?', text: SQLITE_SOURCE_TEXT },
  subject_type: { number: '?', text: SUBJECT_TYPE_CODES.text('events.subject_type') },
};

/** SQLite's placeholder of a column in an insert: `?`, or the lookup of a numbered column's number. */
export const sqlitePlaceholder = (name: string): string => SQLITE_NUMBERED[name as keyof EventsTable]?.number ?? '?';

/** SQLite's select list of hand-written SQL: every column as its text (the numbered and coded ones looked up). */
export const SQLITE_EVENT_COLUMN_LIST = EVENT_COLUMN_NAMES.map((name) => {
  const numbered = SQLITE_NUMBERED[name];
  return numbered === undefined ? name : `${numbered.text} AS ${name}`;
}).join(', ');

/** The same as SQLITE_EVENT_COLUMN_LIST, for Kysely's `select`. */
export const SQLITE_EVENT_SELECTIONS: ReadonlyArray<keyof EventsTable | AliasedRawBuilder<string, string>> =
  EVENT_COLUMN_NAMES.map((name) => {
    const numbered = SQLITE_NUMBERED[name];
    return numbered === undefined ? name : sql<string>`${sql.raw(numbered.text)}`.as(name);
  });

/** SQLite's select list of `eventFromRawRow`, in its order: the event's columns, then its position. */
export const RAW_EVENT_COLUMNS = `${SQLITE_EVENT_COLUMN_LIST}, position`;

/** A stored row as Kysely or node-postgres return it, with its position when it was selected. */
export type EventRow = Selectable<EventsTable> & { position?: string | number };

const NO_PROPERTIES: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

/**
 * A record's fields as object-literal source. `parsed`: every value mapped (times to ISO text, json parsed).
 * `text`: the json columns kept as their stored text under `jsonText` (`properties` then an empty placeholder,
 * the nullable ones not set). `raw`: the row is an SQLite array (`.raw()`, in the table's order), whose NULLs are
 * null; else an object keyed by column name.
 */
function fieldsSource(json: 'parsed' | 'text', raw: boolean): string {
  const fields: string[] = [];
  const texts: string[] = [];
  EVENT_COLUMNS.forEach((column, index) => {
    const at = raw ? `row[${index}]` : `row.${column.name}`;
    if (column.type === 'timestamptz') fields.push(`${column.field}: toIso(${at})`);
    else if (column.type === 'uuid') fields.push(`${column.field}: uuidText(${at})`);
    else if (column.sqliteCode === 'uuid') fields.push(`${column.field}: externalIdText(${at} ?? null)`);
    else if (column.sqliteCode === 'name-format') fields.push(`${column.field}: nameFormatText(${at})`);
    else if (column.type !== 'json') fields.push(`${column.field}: ${at}`);
    else if (json === 'parsed')
      fields.push(`${column.field}: ${column.nullable ? `${at} == null ? null : fromJson(${at})` : `fromJson(${at})`}`);
    else {
      if (!column.nullable) fields.push(`${column.field}: NO_PROPERTIES`);
      texts.push(`${column.field}: ${column.nullable && !raw ? `${at} == null ? null : ${at}` : at}`);
    }
  });
  if (texts.length > 0) fields.push(`jsonText: { ${texts.join(', ')} }`);
  return fields.join(',\n');
}

const NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
for (const column of EVENT_COLUMNS) {
  if (!NAME.test(column.name) || !NAME.test(column.field)) throw new Error(`event column ${column.name}: not a name`);
}

/**
 * Compiles a row mapper once, from the table, into one object literal. The export and the deliverers map every
 * event they read, and a loop setting a record's fields one by one is several times slower than a literal
 * (every store a keyed store into an object still growing). The source is made only of the names checked above.
 */
function compile<Row>(body: string): (row: Row) => EventRecord {
  const make = new Function(
    'toIso',
    'uuidText',
    'externalIdText',
    'nameFormatText',
    'fromJson',
    'NO_PROPERTIES',
    `'use strict';\nreturn (row) => {\n${body}\n};`,
  );
  return make(toIso, uuidText, externalIdText, nameFormatText, fromJson, NO_PROPERTIES) as (row: Row) => EventRecord;
}

const positionOfRow = 'if (row.position !== undefined) record.position = String(row.position);\nreturn record;';
const fromRowParsed = compile<EventRow>(`const record = {\n${fieldsSource('parsed', false)}\n};\n${positionOfRow}`);
const fromRowText = compile<EventRow>(`const record = {\n${fieldsSource('text', false)}\n};\n${positionOfRow}`);

/**
 * A stored row as an event. With `jsonText` (exports, deliveries) the JSON columns stay the stored text
 * (`EventRecord.jsonText`) and are not parsed; `properties` is then an empty placeholder.
 */
export function eventFromRow(row: EventRow, jsonText = false): EventRecord {
  return jsonText ? fromRowText(row) : fromRowParsed(row);
}

/**
 * An SQLite row read with `.raw()` (an array, RAW_EVENT_COLUMNS) as an event with its JSON as the stored
 * text (`jsonText`) and its position.
 */
export const eventFromRawRow: (row: unknown[]) => EventRecord = compile<unknown[]>(
  `return {\n${fieldsSource('text', true)},\nposition: String(row[${EVENT_COLUMNS.length}])\n};`,
);
