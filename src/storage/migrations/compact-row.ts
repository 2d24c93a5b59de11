// Issue 35, the compact row: versions 850–899 (docs/design.md, "The compact row").
//
// 851, PostgreSQL: `event_dedup` keeps a 16-byte digest of (source, external_id) instead of their text. The key
// is what the primary key compares and nothing reads it back: the duplicate's original is found through
// `event_id`, and the writer compares the original's own (product, source, external id) with the row's, so a
// digest collision fails the commit (503) instead of answering a false duplicate. `product_id` stays first
// (the primary key of every distributable table starts with it). The digest is the first 16 bytes of SHA-256
// over the source's length, the source and the external id (lengths make the pair unambiguous), written once
// as an SQL function that the writer, the deletes and this migration share. The table is rebuilt (its rows
// shrink only when rewritten); a database distributed with Citus distributes the new table again. SQLite keeps
// its keys as hashes in `event_keys` already.
//
// 852, SQLite: the index of one event by uuid is on the uuid alone, without the product id in front (24 bytes
// of every entry). Event ids are UUIDv7s the service draws; a read by id checks the product on the row it finds
// (event-position.ts, `byId`). Not declared unique: every unique key starts with product_id (distributable by
// product; test/distribution-keys.test.ts), and nothing relies on it. Still appended at the index's right edge
// (UUIDv7s are time-ordered).
// PostgreSQL keeps its primary key (product_id, id, received_at): a partitioned table's keys need the partition
// key, and Citus wants product_id first.
//
// 853, SQLite: `occurred_at` and `received_at` as INTEGER milliseconds since 1970 instead of 24 characters of ISO
// text, in the row and in `events_by_time`, and `id` as its 16 bytes instead of 36 characters, in the row and in
// `events_by_id`. A column declared TEXT turns an integer into text, so the table is rebuilt (positions, the
// AUTOINCREMENT counter, the hashes, the indexes and the delete triggers as they were); every stored time and id
// is converted (a value SQLite cannot read stays as it was, and reads as before). The writer stores milliseconds
// and bytes; the row mappers give the ISO text and the uuid text back (event-columns.ts); a query compares a time
// or an id of `events` with a parameter through `PositionSql.time` / `.byId` (event-position.ts). PostgreSQL keeps
// timestamptz (8 bytes) and uuid (16).
//
// 854, SQLite: `product_id` of `events` as a small integer, the product's number, instead of its 24 characters, in
// the row and in the three indexes that start with it (events_by_product, events_by_name, events_by_time).
// `product_numbers` gives each product its number once (AUTOINCREMENT: never one used before, also after the
// newest one's row went), a trigger numbering every new product. `api_key_id` (in the row only) likewise:
// `key_numbers`, numbered by a trigger on `api_keys` (an event's key no longer there is numbered too). The table is
// rebuilt as in 853 and every row converted. The writer stores the numbers (looked up once per commit and id:
// `StoredNumbers` in event-writer.ts), every query on `events` compares `product_id` with the number of the product asked for
// (`PositionSql.product`, `StoreDialect.eventProduct`: a subquery SQLite evaluates once, before it searches an
// index by it) and `api_key_id` with the key's (`PositionSql.key`), and SQLite's select lists give the text ids
// back (`SQLITE_PRODUCT_TEXT`, `SQLITE_KEY_TEXT`; event-columns.ts). The key and subject hashes stay over the
// product's text id. No foreign keys: the writer's value is the number it looked up, and `product_id` NOT NULL
// refuses an unknown product (each would cost a lookup per event). `events_by_product` stays: it is (product_id,
// position), the order of every paged read. PostgreSQL keeps the text (Citus distributes by product_id).
//
// 855, SQLite: `external_id` as its 16 bytes when it is a lowercase canonical uuid (what SDKs send as message ids:
// 36 characters → 16), any other text as it is. Only that form: its bytes give back exactly the text that came in
// (`externalIdText`), where an uppercase or unhyphenated id would come back in another form. The column is declared
// BLOB (no affinity: text stays text, bytes stay bytes); the table is rebuilt as in 853 and every such id
// converted. The writer stores the bytes (`externalIdInto`), the mappers and the duplicate check give the text
// back, and the idempotency keys stay hashes of the text (the rows' `key_hash` unchanged; a key built from a row
// reads it through `SQLITE_EXTERNAL_ID_TEXT`). Nothing filters events by external id in SQL. PostgreSQL keeps the
// text: `event_dedup` holds the digest (851), and the row's text is TOASTed with the rest.
// In the same rebuild `name_format` as a small number (`nameFormatCode`: 'preferred' 0 and 'segment' 1, which take
// no byte in the row, the other three 2–4; an unknown text stays text), declared INTEGER. Nothing queries it; the
// mappers give the text back (`nameFormatText`).
// And the event's name as a number: `event_names` numbers each canonical name once (AUTOINCREMENT), with the type
// and the action of the first event that had it; `canonical_name` holds the number, `event_type` and `action` are
// NULL where they are the name's (most events) and the event's own text where it split its name otherwise. The
// writer numbers a new name in its commit (event-writer.ts); the select lists give the text back (event-columns.ts,
// `SQLITE_NUMBERED`), a name filter compares the number (`PositionSql.named`, `StoreDialect.eventNamed`: the index
// `events_by_name (product_id, canonical_name)` is searched as before), a type or action filter the text.
//
// 856, SQLite: `source` ('api', 'segment': what the server writes) and `subject_type` ('user', 'account',
// 'subscription': what the contract allows) as small numbers, each its index in SOURCE_CODES and SUBJECT_TYPE_CODES
// (database.ts); 0 and 1 take no byte in the row. Any other text stays that text: the columns are declared BLOB (no
// affinity, so a text comes back exactly as stored; the writer binds the codes as BigInts, which stay integers).
// The table is rebuilt as in 853 and every row converted. The select lists give the text back (`SQLITE_CODED` in
// event-columns.ts), a filter on either compares the code (`PositionSql.code`); neither has an index of its own, so
// no plan changes. PostgreSQL keeps the text.
//
// 857, PostgreSQL: `name_format` as a smallint, the format's number as in 855 (2 bytes instead of the text's 8–10,
// e.g. 'preferred'; docs/design.md has where PostgreSQL's bytes go and why this is the one change taken). The five
// formats are all the service writes (`NameFormat`), so any other text fails the migration rather than being lost.
// The writer converts the text in its statement (`nameFormatCodeSql`), and the row mappers already read a number
// back as its text (`nameFormatText`). Nothing queries the column. ALTER … TYPE rewrites every partition.
import type { Migration } from './index.js';

const COLUMNS =
  'position, id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original, key_hash, subject_hash';

/** ISO text → milliseconds since 1970 (julianday reads every form SQLite knows; the round undoes its double). */
const millis = (column: string) =>
  `coalesce(CAST(round((julianday(${column}) - 2440587.5) * 86400000.0) AS INTEGER), ${column})`;

/** A uuid's text → its 16 bytes (unhex is NULL for what is not hex; a text of another length stays text). */
const bytes = (column: string) =>
  `CASE WHEN length(${column}) = 36 THEN coalesce(unhex(replace(${column}, '-', '')), ${column}) ELSE ${column} END`;

/** A lowercase canonical uuid, as GLOB (case-sensitive) matches it. */
const LOWER_UUID = [8, 4, 4, 4, 12].map((n) => '[0-9a-f]'.repeat(n)).join('-');

/** A name format's text → its number (`nameFormatCode` in database.ts). */
const NAME_FORMAT_CASES = `CASE name_format ${['preferred', 'segment', 'unified', 'legacy', 'v1']
  .map((format, code) => `WHEN '${format}' THEN ${code}`)
  .join(' ')}`;
/** SQLite keeps an unknown one as it is. */
const NAME_FORMAT_CODE = `${NAME_FORMAT_CASES} ELSE name_format END`;

/** A text column's known values → their codes (their index in `values`), any other text as it is. */
const coded = (column: string, values: readonly string[]) =>
  `CASE ${column} ${values.map((value, code) => `WHEN '${value}' THEN ${code}`).join(' ')} ELSE ${column} END`;

/** An event's name in `event_names`: its type and action (NULL where they are the name's) and its number. */
const nameOf = (column: string) =>
  `(SELECT ${column} FROM event_names WHERE event_names.canonical_name = events.canonical_name)`;
const NAMED = `nullif(events.event_type, ${nameOf('event_type')}), nullif(events.action, ${nameOf('action')}), ${nameOf('number')},`;

/** The end of a rebuild of `events` into `events_compact`: the counter, the rename, the indexes, the triggers. */
const rebuilt = [
  // A position is never used twice, also after the newest rows were deleted: the counter goes along.
  `INSERT INTO sqlite_sequence (name, seq)
     SELECT 'events_compact', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events_compact')`,
  `UPDATE sqlite_sequence SET seq = (SELECT max(seq) FROM sqlite_sequence WHERE name IN ('events', 'events_compact'))
    WHERE name = 'events_compact'`,
  `DROP TABLE events`,
  `ALTER TABLE events_compact RENAME TO events`,
  `CREATE INDEX events_by_id ON events (id)`,
  `CREATE INDEX events_by_product ON events (product_id)`,
  `CREATE INDEX events_by_name ON events (product_id, canonical_name)`,
  `CREATE INDEX events_by_time ON events (product_id, received_at)`,
  `CREATE TRIGGER events_key_gone AFTER DELETE ON events WHEN OLD.external_id IS NOT NULL BEGIN
     INSERT OR IGNORE INTO event_keys_gone (position, h)
       VALUES (OLD.position, coalesce(OLD.key_hash, (SELECT h FROM event_keys_by_position WHERE position = OLD.position)));
   END`,
  `CREATE TRIGGER events_subject_gone AFTER DELETE ON events BEGIN
     INSERT OR IGNORE INTO event_subjects_gone (position, h)
       VALUES (OLD.position, coalesce(OLD.subject_hash, (SELECT h FROM event_subjects_by_position WHERE position = OLD.position)));
   END`,
];

export const compactRowMigrations: Migration[] = [
  {
    version: 851,
    name: 'PostgreSQL: idempotency keys as a digest of source and external id',
    rewrites: { postgres: 'every idempotency key' },
    statements: {
      sqlite: [],
      postgres: [
        // STABLE, not IMMUTABLE: convert_to is. A plain SQL body (no SET clause) so that the planner inlines it.
        `CREATE FUNCTION inlet_event_dedup_key(source text, external_id text)
         RETURNS uuid
         LANGUAGE sql STABLE STRICT PARALLEL SAFE
         AS $fn$
           SELECT encode(substring(sha256(convert_to(length(source)::text || ':' || source || external_id, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid
         $fn$`,
        `CREATE TABLE event_dedup_digest (
           product_id TEXT NOT NULL,
           key_hash UUID NOT NULL,
           event_id UUID NOT NULL,
           received_at TIMESTAMPTZ NOT NULL
         )`,
        `INSERT INTO event_dedup_digest (product_id, key_hash, event_id, received_at)
           SELECT product_id, inlet_event_dedup_key(source, external_id), event_id, received_at
             FROM event_dedup ORDER BY received_at`,
        `DROP TABLE event_dedup`,
        `ALTER TABLE event_dedup_digest RENAME TO event_dedup`,
        `ALTER TABLE event_dedup ADD CONSTRAINT event_dedup_pkey PRIMARY KEY (product_id, key_hash)`,
        // Rows arrive in time order: retention finds a month's keys through a BRIN index, as before.
        `CREATE INDEX event_dedup_by_time ON event_dedup USING brin (received_at)`,
      ],
    },
  },
  {
    version: 852,
    name: 'SQLite: events by uuid without the product id in the index',
    statements: {
      sqlite: [`DROP INDEX events_by_id`, `CREATE INDEX events_by_id ON events (id)`],
      postgres: [],
    },
  },
  {
    version: 853,
    name: 'SQLite: event times as integer milliseconds, event ids as 16 bytes',
    rewrites: { sqlite: 'every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE events_compact (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           id BLOB NOT NULL,
           product_id TEXT NOT NULL REFERENCES products(id),
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at INTEGER NOT NULL,
           received_at INTEGER NOT NULL,
           properties TEXT NOT NULL,
           api_key_id TEXT,
           context TEXT,
           original TEXT,
           key_hash INTEGER,
           subject_hash INTEGER
         )`,
        `INSERT INTO events_compact (${COLUMNS})
           SELECT ${COLUMNS.replace('occurred_at, received_at', `${millis('occurred_at')}, ${millis('received_at')}`).replace(' id,', ` ${bytes('id')},`)}
             FROM events ORDER BY position`,
        ...rebuilt,
      ],
      postgres: [],
    },
  },
  {
    version: 854,
    name: 'SQLite: the product and the key of an event as their numbers',
    rewrites: { sqlite: 'every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE product_numbers (
           number INTEGER PRIMARY KEY AUTOINCREMENT,
           product_id TEXT NOT NULL UNIQUE
         )`,
        `INSERT INTO product_numbers (product_id) SELECT id FROM products ORDER BY rowid`,
        `CREATE TRIGGER products_numbered AFTER INSERT ON products BEGIN
           INSERT OR IGNORE INTO product_numbers (product_id) VALUES (NEW.id);
         END`,
        `CREATE TABLE key_numbers (
           number INTEGER PRIMARY KEY AUTOINCREMENT,
           key_id TEXT NOT NULL UNIQUE
         )`,
        `INSERT INTO key_numbers (key_id) SELECT id FROM api_keys ORDER BY rowid`,
        // An event's key that is no longer in api_keys keeps its id too.
        `INSERT INTO key_numbers (key_id)
           SELECT DISTINCT api_key_id FROM events
            WHERE api_key_id IS NOT NULL AND api_key_id NOT IN (SELECT key_id FROM key_numbers) ORDER BY api_key_id`,
        `CREATE TRIGGER api_keys_numbered AFTER INSERT ON api_keys BEGIN
           INSERT OR IGNORE INTO key_numbers (key_id) VALUES (NEW.id);
         END`,
        `CREATE TABLE events_compact (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           id BLOB NOT NULL,
           product_id INTEGER NOT NULL,
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at INTEGER NOT NULL,
           received_at INTEGER NOT NULL,
           properties TEXT NOT NULL,
           api_key_id INTEGER,
           context TEXT,
           original TEXT,
           key_hash INTEGER,
           subject_hash INTEGER
         )`,
        `INSERT INTO events_compact (${COLUMNS})
           SELECT ${COLUMNS.replace(' product_id,', ' (SELECT number FROM product_numbers WHERE product_numbers.product_id = events.product_id),').replace(' api_key_id,', ' (SELECT number FROM key_numbers WHERE key_id = events.api_key_id),')}
             FROM events ORDER BY position`,
        ...rebuilt,
      ],
      postgres: [],
    },
  },
  {
    version: 855,
    name: 'SQLite: external ids that are lowercase uuids as their 16 bytes, name formats and names as numbers',
    rewrites: { sqlite: 'every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE event_names (
           number INTEGER PRIMARY KEY AUTOINCREMENT,
           canonical_name TEXT NOT NULL UNIQUE,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL
         )`,
        // Each name with the type and the action of its first event (min's row gives the bare columns).
        `INSERT INTO event_names (canonical_name, event_type, action)
           SELECT canonical_name, event_type, action FROM
             (SELECT canonical_name, event_type, action, min(position) AS first FROM events GROUP BY canonical_name)
            ORDER BY first`,
        `CREATE TABLE events_compact (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           id BLOB NOT NULL,
           product_id INTEGER NOT NULL,
           source TEXT NOT NULL,
           external_id BLOB,
           event_type TEXT,
           action TEXT,
           canonical_name INTEGER NOT NULL,
           name_format INTEGER NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at INTEGER NOT NULL,
           received_at INTEGER NOT NULL,
           properties TEXT NOT NULL,
           api_key_id INTEGER,
           context TEXT,
           original TEXT,
           key_hash INTEGER,
           subject_hash INTEGER
         )`,
        `INSERT INTO events_compact (${COLUMNS})
           SELECT ${COLUMNS.replace(' external_id,', ` CASE WHEN external_id GLOB '${LOWER_UUID}' THEN unhex(replace(external_id, '-', '')) ELSE external_id END,`).replace(' name_format,', ` ${NAME_FORMAT_CODE},`).replace(' event_type, action, canonical_name,', ` ${NAMED}`)}
             FROM events ORDER BY position`,
        ...rebuilt,
      ],
      postgres: [],
    },
  },
  {
    version: 856,
    name: 'SQLite: event sources and subject types as numbers',
    rewrites: { sqlite: 'every stored event' },
    statements: {
      sqlite: [
        `CREATE TABLE events_compact (
           position INTEGER PRIMARY KEY AUTOINCREMENT,
           id BLOB NOT NULL,
           product_id INTEGER NOT NULL,
           source BLOB NOT NULL,
           external_id BLOB,
           event_type TEXT,
           action TEXT,
           canonical_name INTEGER NOT NULL,
           name_format INTEGER NOT NULL,
           subject_type BLOB NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at INTEGER NOT NULL,
           received_at INTEGER NOT NULL,
           properties TEXT NOT NULL,
           api_key_id INTEGER,
           context TEXT,
           original TEXT,
           key_hash INTEGER,
           subject_hash INTEGER
         )`,
        `INSERT INTO events_compact (${COLUMNS})
           SELECT ${COLUMNS.replace(' source,', ` ${coded('source', ['api', 'segment'])},`).replace(' subject_type,', ` ${coded('subject_type', ['user', 'account', 'subscription'])},`)}
             FROM events ORDER BY position`,
        ...rebuilt,
      ],
      postgres: [],
    },
  },
  {
    version: 857,
    name: 'PostgreSQL: event name formats as numbers',
    rewrites: { postgres: 'every stored event' },
    statements: {
      sqlite: [],
      postgres: [`ALTER TABLE events ALTER COLUMN name_format TYPE smallint USING (${NAME_FORMAT_CASES} END)`],
    },
  },
];
