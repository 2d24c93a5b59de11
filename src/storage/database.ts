// Kysely table types shared by both adapters. Timestamps are written as ISO strings; SQLite hands
// them back as strings, PostgreSQL (timestamptz) as Date: the row mappers accept both.
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date | string, string, string>;
type NullableTimestamp = ColumnType<Date | string | null, string | null, string | null>;
/** JSON documents: TEXT on SQLite, json or jsonb on PostgreSQL (node-postgres parses both back to an object). */
type Json = ColumnType<string | Record<string, unknown>, string, string>;

export interface ProductsTable {
  id: string;
  name: string;
  created_at: Timestamp;
  /** Migration 700: retention of events in days; null keeps them forever. */
  retention_events_days: ColumnType<number | null, number | null | undefined, number | null>;
}

export interface ApiKeysTable {
  id: string;
  product_id: string;
  kind: 'events' | 'reports' | 'browser';
  name: string | null;
  prefix: string;
  key_hash: string;
  created_at: Timestamp;
  expires_at: NullableTimestamp;
  revoked_at: NullableTimestamp;
  last_used_at: NullableTimestamp;
  /** JSON array of origins (browser keys only; migration 301). */
  allowed_origins: string | null;
}

/** Event times: timestamptz on PostgreSQL, INTEGER milliseconds on SQLite (migration 853). */
type EventTime = ColumnType<Date | string | number, string | number, string | number>;

/** Event ids: uuid on PostgreSQL, 16 bytes on SQLite (migration 853). */
type EventId = ColumnType<string | Uint8Array, string | Uint8Array, string | Uint8Array>;

export interface EventsTable {
  id: EventId;
  product_id: string;
  source: string;
  external_id: string | null;
  event_type: string;
  action: string;
  canonical_name: string;
  /** Its number on PostgreSQL and, when known, on SQLite (migrations 855, 857): `nameFormatText`. */
  name_format: string | number;
  subject_type: string;
  subject_id: string;
  occurred_at: EventTime;
  received_at: EventTime;
  properties: Json;
  api_key_id: string | null;
  /** Segment items only (migration 300): the item's context and everything else it carried. */
  context: Json | null;
  original: Json | null;
}

export interface LegacyUsageTable {
  product_id: string;
  api_key_id: string;
  event_name: string;
  count: ColumnType<number | string, number, number>;
  first_seen_at: Timestamp;
  last_seen_at: Timestamp;
}

export interface MigrationsTable {
  version: number;
  name: string;
  applied_at: Timestamp;
}

/** Items a client sent that were not stored (or stored with a failed side effect): migration 302. */
export interface RejectionsTable {
  id: string;
  product_id: string;
  received_at: Timestamp;
  key_id: string | null;
  route: string;
  item_index: number;
  message_id: string | null;
  code: string;
  detail: string;
  severity: 'rejected' | 'warning';
  item: string;
}

/** Per product and hour: rejections counted but not recorded once the hourly cap was reached. */
export interface RejectionHoursTable {
  product_id: string;
  hour: string;
  unrecorded: number;
}

export interface Database {
  rejections: RejectionsTable;
  rejection_hours: RejectionHoursTable;
  products: ProductsTable;
  api_keys: ApiKeysTable;
  events: EventsTable;
  legacy_usage: LegacyUsageTable;
  inlet_migrations: MigrationsTable;
}

export type { Generated };

/** A stored time as ISO text: a Date (PostgreSQL's other tables), milliseconds since 1970 (events' times) or the text. */
export function toIso(value: Date | string | number): string {
  if (typeof value === 'string') return value;
  return typeof value === 'number' ? isoOfMillis(value) : value.toISOString();
}

const DAY_MS = 86_400_000;
const TWO = Array.from({ length: 60 }, (_, i) => String(i).padStart(2, '0'));
const THREE = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, '0'));
/** Days since 1970 of 0000-01-01 and of 10000-01-01: the years whose ISO text has four digits. */
const FIRST_DAY = -719_528;
const END_DAY = 2_932_897;
/**
 * The date parts made last, for two days: an event's `occurred_at` and `received_at` often fall on different
 * days (a backfill, a client's clock), and a mapper formats both for every event it reads.
 */
const cachedDays = [Number.NaN, Number.NaN];
const cachedDates = ['', ''];
let olderSlot = 0;

function datePart(day: number): string {
  if (cachedDays[0] === day) return cachedDates[0]!;
  if (cachedDays[1] === day) return cachedDates[1]!;
  const slot = olderSlot;
  olderSlot = 1 - slot;
  cachedDays[slot] = day;
  return (cachedDates[slot] = new Date(day * DAY_MS).toISOString().slice(0, 11));
}

/**
 * `new Date(ms).toISOString()` at a fraction of its cost (it took ~1 µs, twice for every event an export or a
 * deliverer reads from SQLite): the date part is made once per day, the time of day from integers.
 */
function isoOfMillis(ms: number): string {
  // Events read together mostly share their times (a batch's received_at): the two texts used last are kept.
  if (ms === cachedMillis[0]) {
    olderIsoSlot = 1;
    return cachedIsos[0]!;
  }
  if (ms === cachedMillis[1]) {
    olderIsoSlot = 0;
    return cachedIsos[1]!;
  }
  const slot = olderIsoSlot;
  olderIsoSlot = 1 - slot;
  cachedMillis[slot] = ms;
  return (cachedIsos[slot] = isoOfMillisMade(ms));
}

const cachedMillis = [Number.NaN, Number.NaN];
const cachedIsos = ['', ''];
let olderIsoSlot = 0;

function isoOfMillisMade(ms: number): string {
  const day = Math.floor(ms / DAY_MS);
  if (!Number.isSafeInteger(ms) || day < FIRST_DAY || day >= END_DAY) return new Date(ms).toISOString();
  const date = datePart(day);
  let rest = ms - day * DAY_MS;
  const hours = Math.floor(rest / 3_600_000);
  rest -= hours * 3_600_000;
  const minutes = Math.floor(rest / 60_000);
  rest -= minutes * 60_000;
  const seconds = Math.floor(rest / 1000);
  return `${date}${TWO[hours]}:${TWO[minutes]}:${TWO[seconds]}.${THREE[rest - seconds * 1000]}Z`;
}

const HEX_DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) {
  HEX_DIGIT['0123456789abcdef'.charCodeAt(i)] = i;
  HEX_DIGIT['0123456789ABCDEF'.charCodeAt(i)] = i;
}
/** Lowercase digits only: the uuids whose text uuidText gives back exactly. */
const LOWER_HEX_DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) LOWER_HEX_DIGIT['0123456789abcdef'.charCodeAt(i)] = i;

/** A uuid's 16 bytes written into `into`, digits read through `digits`: `into`, or the text when it is no uuid. */
function hexInto(text: string, into: Buffer, digits: Int8Array): Buffer | string {
  if (text.length !== 36) return text;
  let o = 0;
  for (let i = 0; i < 36; i += 2) {
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (text.charCodeAt(i) !== 45) return text;
      i--;
      continue;
    }
    const high = digits[text.charCodeAt(i)] ?? -1;
    const low = digits[text.charCodeAt(i + 1)] ?? -1;
    if (high < 0 || low < 0) return text;
    into[o++] = (high << 4) | low;
  }
  return into;
}

/**
 * An event id as SQLite stores it (migration 853), written into `into` (16 bytes): `into`, or the text itself when it
 * is no uuid (it then matches no stored id). Byte by byte: a regular expression, a replace and a hex Buffer per id
 * cost ~1.7 µs on the write path; the writer reuses one buffer (better-sqlite3 copies a blob when it binds it).
 */
export function uuidBytesInto(text: string, into: Buffer): Buffer | string {
  return hexInto(text, into, HEX_DIGIT);
}

/**
 * An external id as SQLite stores it (migration 855): a lowercase canonical uuid (what SDKs send as message ids) as
 * its 16 bytes written into `into`, any other text (another case, no hyphens, braces, …) as it is, so that
 * `externalIdText` gives back exactly the text that came in.
 */
export function externalIdInto(text: string | null, into: Buffer): Buffer | string | null {
  return text === null ? null : hexInto(text, into, LOWER_HEX_DIGIT);
}

/** The same into a buffer of its own: a query's parameter. */
export function uuidBytes(text: string): Buffer | string {
  return uuidBytesInto(text, Buffer.alloc(16));
}

/** An event id as text: SQLite's 16 bytes formatted, PostgreSQL's (and older SQLite rows') text as it is. */
export function uuidText(value: string | Uint8Array): string {
  if (typeof value === 'string') return value;
  const hex = (Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength)).toString(
    'hex',
  );
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** A stored external id as its text: SQLite's 16 bytes as the lowercase uuid they came from (migration 855). */
export function externalIdText(value: string | Uint8Array | null): string | null {
  return value === null ? null : uuidText(value);
}

/**
 * An event's name format as SQLite stores it (migration 855): its index here, 'preferred' and 'segment' (most events)
 * as 0 and 1, which take no byte in the row (SQLite keeps both in the record's header); any other text as it is.
 */
const NAME_FORMATS: readonly string[] = ['preferred', 'segment', 'unified', 'legacy', 'v1'];
const NAME_FORMAT_CODES = new Map(NAME_FORMATS.map((format, code) => [format, code]));

export function nameFormatCode(text: string): number | string {
  return NAME_FORMAT_CODES.get(text) ?? text;
}

/**
 * The same in SQL, for PostgreSQL's writer (migration 857): the name format in `column` as its number, NULL for any
 * other text (the column is NOT NULL there: a format of no number is refused, not stored).
 */
export const nameFormatCodeSql = (column: string): string =>
  `CASE ${column} ${NAME_FORMATS.map((format, code) => `WHEN '${format}' THEN ${code}`).join(' ')} END`;

/** And back: a stored name format as its text (PostgreSQL's, and SQLite's unknown ones, are the text). */
export function nameFormatText(value: string | number): string {
  return typeof value === 'number' ? (NAME_FORMATS[value] ?? String(value)) : value;
}

/**
 * A column SQLite stores as a small number where its text is one of a few known values (migration 856), each its
 * index in `values`; any other text stays that text. The columns are declared without affinity (BLOB) so that a
 * text comes back exactly as stored (a column of INTEGER affinity stores the text '1' as the number 1), and a code
 * is bound as a BigInt: better-sqlite3 binds a JS number as a REAL, which would take 8 bytes in such a column.
 */
export interface TextCodes {
  /** The value SQLite stores (or compares) for this text: its code, or the text itself. */
  code(text: string): bigint | string;
  /** SQL giving the stored value of `column` back as its text. */
  text(column: string): string;
  /** The text of a stored value as SQLite returns it (a code as a number): what `text` does in SQL. */
  decode(stored: unknown): unknown;
}

export function textCodes(values: readonly string[]): TextCodes {
  const codes = new Map(values.map((value, code) => [value, BigInt(code)]));
  const cases = values.map((value, code) => `WHEN ${code} THEN '${value}'`).join(' ');
  return {
    code: (text) => codes.get(text) ?? text,
    text: (column) => `CASE ${column} ${cases} ELSE ${column} END`,
    decode: (stored) => (typeof stored === 'number' || typeof stored === 'bigint' ? values[Number(stored)] : stored),
  };
}

/**
 * An event's source (what the server writes: contract §4, segment-compat.md) and subject type (the three the
 * contract allows, checked on every way in, transformations included). The most common first: 0 and 1 take no
 * byte in the row (SQLite keeps them in the record's header).
 */
export const SOURCE_CODES = textCodes(['api', 'segment']);
export const SUBJECT_TYPE_CODES = textCodes(['user', 'account', 'subscription']);

export function toIsoOrNull(value: Date | string | null): string | null {
  return value === null ? null : toIso(value);
}

export function fromJson(value: string | Record<string, unknown>): Record<string, unknown> {
  return typeof value === 'string' ? (JSON.parse(value) as Record<string, unknown>) : value;
}
