// One load into a PostgreSQL warehouse (warehouses.md §1): a batch of messages in one transaction, exactly
// once. Under an advisory lock on the schema (one loader at a time, even while a lease changes hands), the
// batch is written with COPY; `_inlet_loads` records the load in the same transaction. Every table but `users`
// has its message id as primary key, so a batch loaded again (after a crash, a takeover, a replay) cannot add
// a row twice: its COPY fails on the key, the transaction is rolled back and the batch is loaded again in
// "replace" mode, which first deletes each table's rows with the batch's ids. A load goes in "insert" mode
// (no deletes: they were ~40 % of the warehouse's CPU per event) unless the caller knows rows are likely there
// (the previous load replaced some). `users` is always upserted (delete, then copy). Messages are applied in
// position order: an erasure deletes the rows loaded before it, in this batch too.
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { PoolClient, QueryResult } from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { EventRecord, StoredMessage, UserRecord } from '../../../storage/types.js';
import {
  columnsFor,
  EVENT_COLUMNS,
  layoutOf,
  layoutReads,
  tableFor,
  type Column,
  type Layout,
  type LayoutChanges,
  type Limits,
  leafTypes,
} from './layout.js';
import { quoted } from './names.js';
import { CopyRows } from './copy.js';
import { copyValue, flatten, typeOf, type ColumnType, type Leaf } from './values.js';

/** "insert": COPY only (a key conflict means the batch was loaded before); "replace": delete the ids first. */
export type LoadMode = 'insert' | 'replace';

export interface LoadResult extends LayoutChanges {
  rows: number;
  /** The mode the committed load ran in (an insert that met a loaded row ran again as a replace). */
  mode: LoadMode;
  /** Rows of earlier loads the replace deleted (0 in insert mode). */
  replaced: number;
}

/**
 * One row for COPY: its key, its fixed fields (already encoded, bytes `start` to `end` of `from`: an event's,
 * into `events`' COPY, are copied from there into its table's) and the flattened properties.
 */
interface Row {
  id: string;
  from: CopyRows;
  start: number;
  end: number;
  /** How many fixed fields. */
  fields: number;
  leaves: Leaf[];
}

/** What one attempt shares: the connection, the layout, and what it changed and deleted. */
interface Load {
  client: PoolClient;
  layout: Layout;
  limits: Limits;
  changes: LayoutChanges;
  mode: LoadMode;
  replaced: number;
}

const json = (value: unknown): string | null => (value == null ? null : JSON.stringify(value));
const idOf = (value: unknown): string | null =>
  typeof value === 'string' || typeof value === 'number' ? String(value) : null;

function parsed(text: string | null | undefined): Record<string, unknown> | null {
  return text == null ? null : (JSON.parse(text) as Record<string, unknown>);
}

/**
 * An event's properties (parsed: they are flattened), `original` (parsed only when there is one: it gives the
 * user and anonymous ids) and its `properties` and `context` as JSON text (the stored text as it is, when it
 * was read as text, as deliveries read it).
 */
function jsonOf(event: EventRecord): {
  properties: Record<string, unknown>;
  original: Record<string, unknown> | null;
  propertiesJson: string;
  contextJson: string | null;
} {
  const text = event.jsonText;
  if (text === undefined)
    return {
      properties: event.properties,
      original: event.original ?? null,
      propertiesJson: JSON.stringify(event.properties),
      contextJson: json(event.context),
    };
  return {
    properties: parsed(text.properties) ?? {},
    original: parsed(text.original),
    propertiesJson: text.properties,
    contextJson: text.context,
  };
}

/** The fixed fields of an event, in EVENT_COLUMNS order without `properties`, `context` and `loaded_at`. */
function eventFixed(out: CopyRows, event: EventRecord, original: Record<string, unknown> | null): void {
  out.uuid(event.id);
  out.time(event.receivedAt);
  out.timeOrNull(event.occurredAt);
  out.text(event.canonicalName);
  out.textOrNull(event.eventType);
  out.textOrNull(event.action);
  out.textOrNull(event.subjectType);
  out.textOrNull(event.subjectId);
  out.textOrNull(event.source);
  out.textOrNull(event.externalId);
  out.textOrNull(idOf(original?.userId) ?? event.externalId);
  out.textOrNull(idOf(original?.anonymousId));
}

const EVENT_FIXED = EVENT_COLUMNS.map(([n]) => n).filter((n) => !['properties', 'context', 'loaded_at'].includes(n));

async function copyRows(client: PoolClient, target: string, columns: string[], rows: CopyRows): Promise<void> {
  if (rows.empty) return;
  const statement = `COPY ${target} (${columns.map(quoted).join(', ')}) FROM STDIN (FORMAT binary)`;
  await pipeline(Readable.from([rows.finish()]), client.query(copyFrom(statement)));
}

/** In replace mode, deletes the rows of `ids` (a re-load replaces them), counting them. */
async function replaceRows(load: Load, target: string, key: { column: string; cast: string }, ids: string[]) {
  if (load.mode !== 'replace' || ids.length === 0) return;
  const deleted = await load.client.query(
    `DELETE FROM ${target} WHERE ${quoted(key.column)} = ANY($1::${key.cast}[])`,
    [ids],
  );
  load.replaced += deleted.rowCount ?? 0;
}

/** Copies `rows` with their property columns (deleting their ids first in replace mode). */
async function writeRows(
  load: Load,
  table: string,
  key: { column: string; cast: string },
  fixedColumns: string[],
  rows: Row[],
  columns: Map<string, Column> | undefined,
): Promise<void> {
  const target = `${quoted(load.layout.schema)}.${quoted(table)}`;
  await replaceRows(
    load,
    target,
    key,
    rows.map((r) => r.id),
  );
  // The property columns these rows use, in a fixed order: each path's place among them.
  const place = new Map<string, number>();
  const used: Column[] = [];
  if (columns !== undefined)
    for (const row of rows)
      for (const leaf of row.leaves) {
        if (place.has(leaf.path)) continue;
        const column = columns.get(leaf.path);
        if (column === undefined) continue;
        place.set(leaf.path, used.length);
        used.push(column);
      }
  const out = new CopyRows(rows.length);
  const values: unknown[] = new Array<unknown>(used.length);
  for (const row of rows) {
    out.row(row.fields + used.length);
    out.copy(row.from, row.start, row.end);
    if (used.length === 0) continue;
    values.fill(undefined);
    for (const leaf of row.leaves) {
      const i = place.get(leaf.path);
      if (i !== undefined) values[i] = leaf.value;
    }
    for (let i = 0; i < used.length; i++) copyValue(out, values[i], used[i]!.type);
  }
  await copyRows(load.client, target, [...fixedColumns, ...used.map((c) => c.name)], out);
  out.done();
}

/** The property columns of a table for these rows (added or widened first). */
async function prepareColumns(load: Load, table: string, rows: Row[]): Promise<Map<string, Column>> {
  const needed = leafTypes(
    rows.map((r) => r.leaves),
    typeOf,
  );
  return columnsFor(load.client, load.layout, table, needed, load.limits, load.changes);
}

const UUID_KEY = { column: 'id', cast: 'uuid' };
// `context` before `properties` in `events`' COPY: an event table's row is the bytes up to it.
const EVENT_TABLE_COLUMNS = [...EVENT_FIXED, 'context'];
const EVENTS_COLUMNS = [...EVENT_TABLE_COLUMNS, 'properties'];

/** A run of events: into `events`, and each into its event name's table. */
async function loadEvents(load: Load, events: EventRecord[]): Promise<void> {
  const ids: string[] = [];
  const out = new CopyRows(events.length);
  const byName = new Map<string, Row[]>();
  for (const event of events) {
    const json = jsonOf(event);
    ids.push(event.id);
    // The fixed fields and `context` once, encoded into `events`' COPY; each event table's row copies them.
    out.row(EVENTS_COLUMNS.length);
    const start = out.size;
    eventFixed(out, event, json.original);
    out.jsonbOrNull(json.contextJson);
    const end = out.size;
    out.jsonb(json.propertiesJson);
    let rows = byName.get(event.canonicalName);
    if (rows === undefined) byName.set(event.canonicalName, (rows = []));
    rows.push({
      id: event.id,
      from: out,
      start,
      end,
      fields: EVENT_TABLE_COLUMNS.length,
      leaves: flatten(json.properties),
    });
  }
  const target = `${quoted(load.layout.schema)}.events`;
  await replaceRows(load, target, UUID_KEY, ids);
  await copyRows(load.client, target, EVENTS_COLUMNS, out);
  for (const [name, rows] of byName) {
    const table = await tableFor(load.client, load.layout, name, load.limits, load.changes);
    if (table === undefined) continue;
    const columns = await prepareColumns(load, table, rows);
    await writeRows(load, table, UUID_KEY, EVENT_TABLE_COLUMNS, rows, columns);
  }
  out.done(); // the tables' rows copied from it
}

const USER_FIXED = ['external_id', 'user_id', 'identifiers', 'aliases', 'created_at', 'updated_at'];

/** A row whose `fields` fixed fields `write` encodes into `from` (rows encoded once, then copied into a COPY). */
function encodedRow(from: CopyRows, id: string, fields: number, leaves: Leaf[], write: (out: CopyRows) => void): Row {
  const start = from.size;
  write(from);
  return { id, from, start, end: from.size, fields, leaves };
}

function userRow(from: CopyRows, user: UserRecord): Row {
  return encodedRow(
    from,
    user.externalId,
    USER_FIXED.length,
    flatten(user.traits as Record<string, unknown>),
    (out) => {
      out.text(user.externalId);
      out.textOrNull(user.id);
      out.jsonbOrNull(json(user.identifiers));
      out.jsonbOrNull(json(user.aliases));
      out.timeOrNull(user.createdAt);
      out.timeOrNull(user.updatedAt);
    },
  );
}

/** Users upserted to their latest state: the last row of each external id in the run replaces the stored one. */
async function loadUsers(load: Load, from: CopyRows, users: UserRecord[]): Promise<void> {
  const latest = new Map<string, UserRecord>();
  for (const user of users) latest.set(user.externalId, user);
  const rows = [...latest.values()].map((user) => userRow(from, user));
  const columns = await prepareColumns(load, 'users', rows);
  // Always replaced, whatever the mode (a user's row is updated by later messages), and not counted as a re-load.
  const upsert: Load = { ...load, mode: 'replace', replaced: 0 };
  await writeRows(upsert, 'users', { column: 'external_id', cast: 'text' }, USER_FIXED, rows, columns);
}

type IdentityMessage = Extract<StoredMessage, { kind: 'identity' }>;

/** A run of identity messages (identified, merged): `identifies`, `aliases`, `users`. */
async function loadIdentity(load: Load, messages: IdentityMessage[]): Promise<void> {
  const identifies: Row[] = [];
  const aliases: Row[] = [];
  const users: UserRecord[] = [];
  const mergedAway: string[] = [];
  // The rows' fixed fields, encoded once: copied from here into the COPYs (never sent itself).
  const from = new CopyRows(messages.length);
  for (const message of messages) {
    if (message.type === 'user.identified') {
      const user = (message.data as { user: UserRecord }).user;
      identifies.push(
        encodedRow(from, message.id, 5, flatten(user.traits as Record<string, unknown>), (out) => {
          out.text(message.id);
          out.text(user.externalId);
          out.textOrNull(user.id);
          out.jsonbOrNull(json(user.identifiers));
          out.time(message.createdAt);
        }),
      );
      users.push(user);
    } else {
      const data = message.data as { fromExternalId: string; user: UserRecord };
      aliases.push(
        encodedRow(from, message.id, 4, [], (out) => {
          out.text(message.id);
          out.text(data.fromExternalId);
          out.text(data.user.externalId);
          out.time(message.createdAt);
        }),
      );
      mergedAway.push(data.fromExternalId);
      users.push(data.user);
    }
  }
  const text = { column: 'id', cast: 'text' };
  if (identifies.length > 0) {
    const columns = await prepareColumns(load, 'identifies', identifies);
    const fixed = ['id', 'external_id', 'user_id', 'identifiers', 'received_at'];
    await writeRows(load, 'identifies', text, fixed, identifies, columns);
  }
  const aliasColumns = ['id', 'from_external_id', 'to_external_id', 'merged_at'];
  if (aliases.length > 0) await writeRows(load, 'aliases', text, aliasColumns, aliases, undefined);
  if (users.length > 0) await loadUsers(load, from, users);
  from.done();
  const kept = new Set(users.map((u) => u.externalId));
  const gone = mergedAway.filter((id) => !kept.has(id));
  if (gone.length > 0)
    await load.client.query(`DELETE FROM ${quoted(load.layout.schema)}.users WHERE external_id = ANY($1::text[])`, [
      gone,
    ]);
}

/** `user.erased`: every row of these external ids, from every table of the schema. */
async function erase(client: PoolClient, layout: Layout, externalIds: string[]): Promise<void> {
  const s = quoted(layout.schema);
  const byPerson = `external_id = ANY($1::text[]) OR subject_id = ANY($1::text[]) OR user_id = ANY($1::text[]) OR anonymous_id = ANY($1::text[])`;
  for (const table of ['events', ...layout.tables.values()])
    await client.query(`DELETE FROM ${s}.${quoted(table)} WHERE ${byPerson}`, [externalIds]);
  await client.query(`DELETE FROM ${s}.identifies WHERE external_id = ANY($1::text[])`, [externalIds]);
  await client.query(`DELETE FROM ${s}.users WHERE external_id = ANY($1::text[])`, [externalIds]);
  await client.query(
    `DELETE FROM ${s}.aliases WHERE from_external_id = ANY($1::text[]) OR to_external_id = ANY($1::text[])`,
    [externalIds],
  );
}

/** A load by an instance that no longer holds the destination's lease: dropped, never applied. */
export class StaleLoad extends Error {}

/**
 * The load's start, one round trip: the transaction, the schema's advisory lock (one loader per schema at a time,
 * keyed by a hash of its name), then the layout. The schema's name is checked (`^[a-z_][a-z0-9_]*$`) and
 * quoted as a literal all the same.
 */
const start = (client: PoolClient, schema: string) =>
  `BEGIN; SELECT pg_advisory_xact_lock(hashtext('inlet_warehouse'), hashtext(${client.escapeLiteral(schema)})); ${layoutReads(schema)}`;

/** PostgreSQL's unique_violation: a row of the batch is there already. */
const UNIQUE_VIOLATION = '23505';

/** One batch for loadBatch: where it goes, what it is, and how to tell this instance still holds it. */
export interface LoadRequest {
  client: PoolClient;
  schema: string;
  destinationId: string;
  /** In position order. */
  messages: StoredMessage[];
  messageId: (message: StoredMessage) => string;
  limits: Limits;
  holds: () => Promise<boolean>;
  /** Default "insert". */
  mode?: LoadMode;
}

/**
 * Loads `messages` (in position order) in one transaction on `client`, and records the load under
 * `destinationId`; either all of it is in the warehouse or none (the caller rolls back on an error). In
 * "insert" mode a batch that meets a row loaded before is rolled back and loaded again in "replace" mode.
 *
 * Under the schema's lock it first asks `holds` whether this instance still holds the destination's lease. One
 * that lost it while it held this batch (frozen, cut off) would put back rows that the new holder loaded since
 * and a later `user.erased` deleted; it drops the load instead (StaleLoad). Once the answer is yes, a new holder
 * can only load after this transaction ends, since it needs the same lock.
 */
export async function loadBatch(request: LoadRequest): Promise<LoadResult> {
  const mode = request.mode ?? 'insert';
  try {
    return await loadOnce(request, mode);
  } catch (error) {
    if (mode !== 'insert' || (error as { code?: unknown }).code !== UNIQUE_VIOLATION) throw error;
    return loadOnce(request, 'replace');
  }
}

async function loadOnce(
  { client, schema, destinationId, messages, messageId, limits, holds }: LoadRequest,
  mode: LoadMode,
): Promise<LoadResult> {
  let load: Load;
  try {
    // Several statements in one text: node-postgres answers with one result per statement.
    const [, , tables, columns] = (await client.query(start(client, schema))) as unknown as QueryResult[];
    if (!(await holds())) throw new StaleLoad('this instance no longer holds the destination; the load is dropped');
    const layout = layoutOf(schema, tables!.rows, columns!.rows);
    load = { client, layout, limits, changes: { columnsAdded: 0, widenings: 0, warnings: [] }, mode, replaced: 0 };
    let events: EventRecord[] = [];
    let identity: IdentityMessage[] = [];
    const flush = async () => {
      if (events.length > 0) await loadEvents(load, events);
      if (identity.length > 0) await loadIdentity(load, identity);
      events = [];
      identity = [];
    };
    for (const message of messages) {
      if (message.kind === 'event') {
        if (identity.length > 0) await flush();
        events.push(message.event);
      } else if (message.type === 'user.erased') {
        await flush();
        await erase(client, layout, (message.data as { externalIds: string[] }).externalIds);
      } else {
        if (events.length > 0) await flush();
        identity.push(message);
      }
    }
    await flush();
    // The load's record and the commit, one round trip (a failed insert leaves the COMMIT unrun: rolled back below).
    const last = messageId(messages[messages.length - 1]!);
    await client.query(
      `INSERT INTO ${quoted(schema)}._inlet_loads (destination_id, loaded_at, messages, last_message_id)
       VALUES (${client.escapeLiteral(destinationId)}, now(), ${messages.length}, ${client.escapeLiteral(last)})
       ON CONFLICT (destination_id) DO UPDATE SET loaded_at = now(),
         messages = _inlet_loads.messages + EXCLUDED.messages, last_message_id = EXCLUDED.last_message_id; COMMIT`,
    );
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
  return { rows: messages.length, ...load.changes, mode, replaced: load.replaced };
}

export type { ColumnType };
