// The layout of one PostgreSQL warehouse schema (warehouses.md §1): the fixed tables (`events`, `identifies`,
// `users`, `aliases`), one table per event name, and Inlet's own bookkeeping in the same schema:
// `_inlet_tables` (event name → table), `_inlet_columns` (table and property path → column and type: the same
// path always lands in the same column) and `_inlet_loads` (each destination's last load, written in the load's
// transaction). The layout is read at the start of every load, under the schema's advisory lock, so an instance
// that takes a destination over continues exactly where the other left it.
import type { PoolClient } from 'pg';
import { freeName, quoted, safeName } from './names.js';
import { widened, type ColumnType, type Leaf } from './values.js';

/** The fixed columns of `events` (and, without `properties`, of each event table). */
export const EVENT_COLUMNS: ReadonlyArray<[string, string]> = [
  ['id', 'uuid PRIMARY KEY'],
  ['received_at', 'timestamptz NOT NULL'],
  ['occurred_at', 'timestamptz'],
  ['canonical_name', 'text NOT NULL'],
  ['event_type', 'text'],
  ['action', 'text'],
  ['subject_type', 'text'],
  ['subject_id', 'text'],
  ['source', 'text'],
  ['external_id', 'text'],
  ['user_id', 'text'],
  ['anonymous_id', 'text'],
  ['properties', 'jsonb'],
  ['context', 'jsonb'],
  ['loaded_at', 'timestamptz NOT NULL DEFAULT now()'],
];
const IDENTIFIES_COLUMNS: ReadonlyArray<[string, string]> = [
  ['id', 'text PRIMARY KEY'],
  ['external_id', 'text NOT NULL'],
  ['user_id', 'text'],
  ['identifiers', 'jsonb'],
  ['received_at', 'timestamptz NOT NULL'],
  ['loaded_at', 'timestamptz NOT NULL DEFAULT now()'],
];
const USERS_COLUMNS: ReadonlyArray<[string, string]> = [
  ['external_id', 'text PRIMARY KEY'],
  ['user_id', 'text'],
  ['identifiers', 'jsonb'],
  ['aliases', 'jsonb'],
  ['created_at', 'timestamptz'],
  ['updated_at', 'timestamptz'],
  ['loaded_at', 'timestamptz NOT NULL DEFAULT now()'],
];
const ALIASES_COLUMNS: ReadonlyArray<[string, string]> = [
  ['id', 'text PRIMARY KEY'],
  ['from_external_id', 'text NOT NULL'],
  ['to_external_id', 'text NOT NULL'],
  ['merged_at', 'timestamptz NOT NULL'],
  ['loaded_at', 'timestamptz NOT NULL DEFAULT now()'],
];

/** The tables whose columns grow with the data: each event table, `identifies` and `users` (traits). */
export const FIXED_TABLES = new Set(['events', 'identifies', 'users', 'aliases']);

/**
 * The largest row PostgreSQL stores (MaxHeapTupleSize, with the default page size): an insert of a longer one
 * fails with "row is too big" on every retry.
 */
const MAX_ROW_BYTES = 8160;
/** A row's header before its null bitmap (SizeofHeapTupleHeader). */
const ROW_HEADER_BYTES = 23;
/**
 * The most a text or jsonb value can keep in a row that TOAST could not bring under its target: TOAST neither
 * compresses nor moves out a value of at most MAXALIGN(TOAST_POINTER_SIZE) bytes, header included, and moves out
 * every longer one before giving up. It is also a multiple of the widest alignment (a double's), so the padding
 * before a column never makes a row longer than the sum of these widths (docs/design.md, "Warehouses").
 */
const VARLENA_WORST_BYTES = 24;

/** The most bytes a column of this type can take in a row, rounded up to the widest alignment. */
function worstBytes(type: string): number {
  const base = type.split(' ')[0];
  if (base === 'uuid') return 16;
  if (base === 'timestamptz' || base === 'bigint' || base === 'boolean' || base === 'double') return 8;
  return VARLENA_WORST_BYTES;
}

/**
 * Property columns a table with these fixed columns can have before some row could be too big, whatever the
 * values and whatever types the columns widen to: every property column counted as a text one, and the row's
 * header with a null bitmap (one bit per column, the header then aligned).
 */
export function widthLimit(fixed: ReadonlyArray<[string, string]>): number {
  const fixedBytes = fixed.reduce((sum, [, type]) => sum + worstBytes(type), 0);
  const rowBytes = (properties: number) => {
    const header = Math.ceil((ROW_HEADER_BYTES + Math.ceil((fixed.length + properties) / 8)) / 8) * 8;
    return header + fixedBytes + properties * VARLENA_WORST_BYTES;
  };
  let properties = 0;
  while (rowBytes(properties + 1) <= MAX_ROW_BYTES) properties++;
  return properties;
}

/** Property columns a table can have, whatever the types: the bound of the table kind with the widest fixed part. */
export const WIDTH_LIMIT = Math.min(
  widthLimit(EVENT_COLUMNS.filter(([n]) => n !== 'properties')),
  widthLimit(IDENTIFIES_COLUMNS),
  widthLimit(USERS_COLUMNS),
);

export interface Limits {
  /** INLET_WAREHOUSE_MAX_TABLES: event tables per schema. */
  maxTables: number;
  /** INLET_WAREHOUSE_MAX_COLUMNS: property columns per table. */
  maxColumns: number;
}

export interface Column {
  name: string;
  type: ColumnType;
}

export interface Layout {
  schema: string;
  /** Event name → its table. */
  tables: Map<string, string>;
  /** Table → property path → column. */
  columns: Map<string, Map<string, Column>>;
  /** Table → every column name it has (fixed and property columns). */
  names: Map<string, Set<string>>;
}

/** What a load changed in the layout, for the metrics and the destination's warnings. */
export interface LayoutChanges {
  columnsAdded: number;
  widenings: number;
  warnings: string[];
}

function tableDdl(schema: string, table: string, columns: ReadonlyArray<[string, string]>): string {
  return `CREATE TABLE IF NOT EXISTS ${quoted(schema)}.${quoted(table)} (${columns
    .map(([name, type]) => `${quoted(name)} ${type}`)
    .join(', ')})`;
}

/** Creates the schema and its fixed tables when missing (at creation, to check the rights; and before loads). */
export async function ensureSchema(client: PoolClient, schema: string): Promise<void> {
  const s = quoted(schema);
  for (const statement of [
    `CREATE SCHEMA IF NOT EXISTS ${s}`,
    tableDdl(schema, 'events', EVENT_COLUMNS),
    tableDdl(schema, 'identifies', IDENTIFIES_COLUMNS),
    tableDdl(schema, 'users', USERS_COLUMNS),
    tableDdl(schema, 'aliases', ALIASES_COLUMNS),
    `CREATE TABLE IF NOT EXISTS ${s}._inlet_tables (canonical_name text PRIMARY KEY, table_name text NOT NULL UNIQUE)`,
    `CREATE TABLE IF NOT EXISTS ${s}._inlet_columns (table_name text NOT NULL, path text NOT NULL,
       column_name text NOT NULL, type text NOT NULL, PRIMARY KEY (table_name, path), UNIQUE (table_name, column_name))`,
    `CREATE TABLE IF NOT EXISTS ${s}._inlet_loads (destination_id text PRIMARY KEY, loaded_at timestamptz NOT NULL,
       messages bigint NOT NULL, last_message_id text NOT NULL)`,
  ])
    await client.query(statement);
}

function fixedNames(table: string): string[] {
  if (table === 'identifies') return IDENTIFIES_COLUMNS.map(([n]) => n);
  if (table === 'users') return USERS_COLUMNS.map(([n]) => n);
  return EVENT_COLUMNS.filter(([n]) => n !== 'properties').map(([n]) => n);
}

type TableRow = { canonical_name: string; table_name: string };
type ColumnRow = { table_name: string; path: string; column_name: string; type: ColumnType };

/** The two reads of the layout, as one text of statements (a load sends them with its lock: one round trip). */
export function layoutReads(schema: string): string {
  const s = quoted(schema);
  return `SELECT canonical_name, table_name FROM ${s}._inlet_tables; SELECT table_name, path, column_name, type FROM ${s}._inlet_columns`;
}

/** The layout from the rows of layoutReads (read inside the load's transaction, after the schema's lock). */
export function layoutOf(schema: string, tables: TableRow[], columns: ColumnRow[]): Layout {
  const layout: Layout = { schema, tables: new Map(), columns: new Map(), names: new Map() };
  for (const row of tables) layout.tables.set(row.canonical_name, row.table_name);
  for (const table of ['identifies', 'users', ...layout.tables.values()])
    layout.names.set(table, new Set(fixedNames(table)));
  for (const row of columns) {
    let map = layout.columns.get(row.table_name);
    if (map === undefined) layout.columns.set(row.table_name, (map = new Map()));
    map.set(row.path, { name: row.column_name, type: row.type });
    layout.names.get(row.table_name)?.add(row.column_name);
  }
  return layout;
}

/** The table of an event name, created when new; undefined when the schema has its maximum of event tables. */
export async function tableFor(
  client: PoolClient,
  layout: Layout,
  canonicalName: string,
  limits: Limits,
  changes: LayoutChanges,
): Promise<string | undefined> {
  const existing = layout.tables.get(canonicalName);
  if (existing !== undefined) return existing;
  if (layout.tables.size >= limits.maxTables) {
    changes.warnings.push(
      `event table limit (${limits.maxTables}) reached: "${canonicalName}" events are loaded into events only`,
    );
    return undefined;
  }
  const used = new Set(layout.tables.values());
  const table = freeName(
    canonicalName,
    safeName(canonicalName),
    (name) => used.has(name) || FIXED_TABLES.has(name) || name.startsWith('_inlet'),
  );
  await client.query(
    tableDdl(
      layout.schema,
      table,
      EVENT_COLUMNS.filter(([n]) => n !== 'properties'),
    ),
  );
  await client.query(
    `INSERT INTO ${quoted(layout.schema)}._inlet_tables (canonical_name, table_name) VALUES ($1, $2)`,
    [canonicalName, table],
  );
  layout.tables.set(canonicalName, table);
  layout.names.set(table, new Set(fixedNames(table)));
  return table;
}

/**
 * The columns of `table` for these leaves (a path → its column), adding and widening columns as the values
 * need. A path past the table's column limit has no column (its value stays in `events.properties`).
 */
export async function columnsFor(
  client: PoolClient,
  layout: Layout,
  table: string,
  leaves: Map<string, { segments: readonly string[]; type: ColumnType }>,
  limits: Limits,
  changes: LayoutChanges,
): Promise<Map<string, Column>> {
  let map = layout.columns.get(table);
  if (map === undefined) layout.columns.set(table, (map = new Map()));
  const names = layout.names.get(table)!;
  const target = `${quoted(layout.schema)}.${quoted(table)}`;
  const limit = Math.min(limits.maxColumns, WIDTH_LIMIT);
  let refused = 0;
  for (const [path, { segments, type }] of leaves) {
    const column = map.get(path);
    if (column !== undefined) {
      const wider = widened(column.type, type);
      if (wider === column.type) continue;
      await client.query(
        `ALTER TABLE ${target} ALTER COLUMN ${quoted(column.name)} TYPE ${wider} USING ${quoted(column.name)}::${wider === 'text' ? 'text' : wider}`,
      );
      await client.query(
        `UPDATE ${quoted(layout.schema)}._inlet_columns SET type = $3 WHERE table_name = $1 AND path = $2`,
        [table, path, wider],
      );
      column.type = wider;
      changes.widenings++;
      continue;
    }
    if (map.size >= limit) {
      refused++;
      continue;
    }
    const name = freeName(path, safeName(segments.join('_')), (n) => names.has(n));
    await client.query(`ALTER TABLE ${target} ADD COLUMN ${quoted(name)} ${type}`);
    await client.query(
      `INSERT INTO ${quoted(layout.schema)}._inlet_columns (table_name, path, column_name, type) VALUES ($1, $2, $3, $4)`,
      [table, path, name, type],
    );
    map.set(path, { name, type });
    names.add(name);
    changes.columnsAdded++;
  }
  if (refused > 0)
    changes.warnings.push(
      `column limit (${limit}) of table "${table}" reached: ${refused} new propert${refused === 1 ? 'y stays' : 'ies stay'} in events.properties only`,
    );
  return map;
}

/** The types each path of these leaves needs (several values of one path: the type that holds them all). */
export function leafTypes(
  leavesOf: Iterable<Leaf[]>,
  typeOf: (value: unknown) => ColumnType,
): Map<string, { segments: readonly string[]; type: ColumnType }> {
  const needed = new Map<string, { segments: readonly string[]; type: ColumnType }>();
  for (const leaves of leavesOf) {
    for (const leaf of leaves) {
      const type = typeOf(leaf.value);
      const seen = needed.get(leaf.path);
      if (seen === undefined) needed.set(leaf.path, { segments: leaf.segments, type });
      else seen.type = widened(seen.type, type) === seen.type ? seen.type : widenBoth(seen.type, type);
    }
  }
  return needed;
}

/** The narrowest type holding both (order-free, unlike `widened`, which keeps a column's type when it can). */
function widenBoth(a: ColumnType, b: ColumnType): ColumnType {
  const ab = widened(a, b);
  const ba = widened(b, a);
  return ab === ba ? ab : ab === 'text' ? ba : ab;
}

export { IDENTIFIES_COLUMNS, USERS_COLUMNS, ALIASES_COLUMNS };
