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
import { copyField, copyText, flatten, NULL_FIELD, typeOf, type ColumnType, type Leaf } from './values.js';

/** "insert": COPY only (a key conflict means the batch was loaded before); "replace": delete the ids first. */
export type LoadMode = 'insert' | 'replace';

export interface LoadResult extends LayoutChanges {
  rows: number;
  /** The mode the committed load ran in (an insert that met a loaded row ran again as a replace). */
  mode: LoadMode;
  /** Rows of earlier loads the replace deleted (0 in insert mode). */
  replaced: number;
}

/** One row for COPY: its key, the fixed fields (in COPY's text form, tab-separated) and the flattened properties. */
interface Row {
  id: string;
  /** The first fixed fields, already written into another COPY's text (an event's, into `events`'): copied. */
  encoded?: { text: CopyText; start: number; end: number };
  /** The fixed fields (those after `encoded`'s, from their tab on, when it is set). */
  fixed: string;
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

const field = (value: string | null | undefined): string => (value == null ? NULL_FIELD : copyText(value));
const jsonField = (value: unknown): string => (value == null ? NULL_FIELD : copyText(JSON.stringify(value)));
const idOf = (value: unknown): string | null =>
  typeof value === 'string' || typeof value === 'number' ? String(value) : null;

function parsed(text: string | null | undefined): Record<string, unknown> | null {
  return text == null ? null : (JSON.parse(text) as Record<string, unknown>);
}

/**
 * An event's properties (parsed: they are flattened), `original` (parsed only when there is one: it gives the
 * user and anonymous ids) and its `properties` and `context` as COPY fields (the stored JSON text as it is,
 * when it was read as text, as deliveries read it).
 */
function jsonOf(event: EventRecord): {
  properties: Record<string, unknown>;
  original: Record<string, unknown> | null;
  propertiesField: string;
  contextField: string;
} {
  const text = event.jsonText;
  if (text === undefined)
    return {
      properties: event.properties,
      original: event.original ?? null,
      propertiesField: jsonField(event.properties),
      contextField: jsonField(event.context),
    };
  return {
    properties: parsed(text.properties) ?? {},
    original: parsed(text.original),
    propertiesField: copyText(text.properties),
    contextField: field(text.context),
  };
}

/** The fixed fields of an event, in EVENT_COLUMNS order without `properties`, `context` and `loaded_at`. */
function eventFixed(event: EventRecord, original: Record<string, unknown> | null): string {
  return (
    `${event.id}\t${event.receivedAt}\t${field(event.occurredAt)}\t${copyText(event.canonicalName)}\t` +
    `${field(event.eventType)}\t${field(event.action)}\t${field(event.subjectType)}\t${field(event.subjectId)}\t` +
    `${field(event.source)}\t${field(event.externalId)}\t${field(idOf(original?.userId) ?? event.externalId)}\t` +
    field(idOf(original?.anonymousId))
  );
}

const EVENT_FIXED = EVENT_COLUMNS.map(([n]) => n).filter((n) => !['properties', 'context', 'loaded_at'].includes(n));

const EMPTY = Buffer.alloc(0);

/**
 * Buffers of COPYs that finished, for the next ones (loads of several destinations may run at once: each takes
 * its own). A COPY of a big load is megabytes; made afresh each time, that memory counts against V8's external
 * memory and brings on full collections, and its pages are faulted in again.
 */
const spares: Buffer[] = [];
const SPARES_KEPT = 2;
const SPARE_BYTES = 16 * 1024 * 1024;

/**
 * A COPY's text, written line by line into one buffer as UTF-8: a string of a whole COPY made by joining its
 * lines costs several times more (the join, then the flattening and encoding of the result).
 */
class CopyText {
  private bytes = spares.pop() ?? EMPTY;
  private length = 0;

  /** `rows`: how many lines are coming (the first write sizes the buffer for as many). */
  constructor(private readonly rows: number) {}

  /** Room for `bytes` more. */
  private room(bytes: number): void {
    if (this.length + bytes <= this.bytes.length) return;
    const size = this.length === 0 ? Math.ceil((bytes + 1) * this.rows * 1.25) : this.bytes.length * 2;
    const grown = Buffer.allocUnsafe(Math.max(size, this.length + bytes));
    this.bytes.copy(grown, 0, 0, this.length);
    this.bytes = grown;
  }

  /** Writes `text` (no newline). */
  put(text: string): void {
    this.room(text.length * 3); // at most 3 bytes per UTF-16 unit
    this.length += this.bytes.write(text, this.length, 'utf8');
  }

  /** Writes the bytes `start` to `end` of another text (already encoded: not encoded again). */
  copy(from: CopyText, start: number, end: number): void {
    this.room(end - start);
    this.length += from.bytes.copy(this.bytes, this.length, start, end);
  }

  /** Ends the line. */
  end(): void {
    this.room(1);
    this.bytes[this.length++] = 0x0a;
  }

  line(text: string): void {
    this.put(text);
    this.end();
  }

  /** Bytes written so far (where the next write starts). */
  get size(): number {
    return this.length;
  }

  get empty(): boolean {
    return this.length === 0;
  }

  get buffer(): Buffer {
    return this.bytes.subarray(0, this.length);
  }

  /**
   * Gives the buffer back for another COPY: only once this one completed, when the server has read every byte
   * (a COPY that failed may still be writing it to the socket, so its buffer is dropped), and no other text
   * copies from it any more.
   */
  done(): void {
    if (this.bytes.length <= SPARE_BYTES && spares.length < SPARES_KEPT) spares.push(this.bytes);
    this.bytes = EMPTY;
    this.length = 0;
  }
}

async function copyRows(client: PoolClient, target: string, columns: string[], text: CopyText): Promise<void> {
  if (text.empty) return;
  const stream = client.query(copyFrom(`COPY ${target} (${columns.map(quoted).join(', ')}) FROM STDIN`));
  await pipeline(Readable.from([text.buffer]), stream);
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
  const text = new CopyText(rows.length);
  const extra: string[] = new Array<string>(used.length);
  for (const row of rows) {
    if (row.encoded !== undefined) text.copy(row.encoded.text, row.encoded.start, row.encoded.end);
    if (used.length === 0) {
      text.line(row.fixed);
      continue;
    }
    extra.fill(NULL_FIELD);
    for (const leaf of row.leaves) {
      const i = place.get(leaf.path);
      if (i !== undefined) extra[i] = copyField(leaf.value, used[i]!.type);
    }
    text.line(`${row.fixed}\t${extra.join('\t')}`);
  }
  await copyRows(load.client, target, [...fixedColumns, ...used.map((c) => c.name)], text);
  text.done();
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
const EVENTS_COLUMNS = [...EVENT_FIXED, 'properties', 'context'];
const EVENT_TABLE_COLUMNS = [...EVENT_FIXED, 'context'];

/** A run of events: into `events`, and each into its event name's table. */
async function loadEvents(load: Load, events: EventRecord[]): Promise<void> {
  const ids: string[] = [];
  const text = new CopyText(events.length);
  const byName = new Map<string, Row[]>();
  for (const event of events) {
    const json = jsonOf(event);
    ids.push(event.id);
    // The fixed fields once, encoded into `events`' text; each event table's row copies those bytes.
    const start = text.size;
    text.put(eventFixed(event, json.original));
    const end = text.size;
    const context = `\t${json.contextField}`;
    text.line(`\t${json.propertiesField}${context}`);
    let rows = byName.get(event.canonicalName);
    if (rows === undefined) byName.set(event.canonicalName, (rows = []));
    rows.push({ id: event.id, encoded: { text, start, end }, fixed: context, leaves: flatten(json.properties) });
  }
  const target = `${quoted(load.layout.schema)}.events`;
  await replaceRows(load, target, UUID_KEY, ids);
  await copyRows(load.client, target, EVENTS_COLUMNS, text);
  for (const [name, rows] of byName) {
    const table = await tableFor(load.client, load.layout, name, load.limits, load.changes);
    if (table === undefined) continue;
    const columns = await prepareColumns(load, table, rows);
    await writeRows(load, table, UUID_KEY, EVENT_TABLE_COLUMNS, rows, columns);
  }
  text.done(); // the tables' rows copied from it
}

const USER_FIXED = ['external_id', 'user_id', 'identifiers', 'aliases', 'created_at', 'updated_at'];

function userRow(user: UserRecord): Row {
  return {
    id: user.externalId,
    fixed: [
      copyText(user.externalId),
      copyText(user.id),
      jsonField(user.identifiers),
      jsonField(user.aliases),
      field(user.createdAt),
      field(user.updatedAt),
    ].join('\t'),
    leaves: flatten(user.traits as Record<string, unknown>),
  };
}

/** Users upserted to their latest state: the last row of each external id in the run replaces the stored one. */
async function loadUsers(load: Load, users: UserRecord[]): Promise<void> {
  const latest = new Map<string, Row>();
  for (const user of users) latest.set(user.externalId, userRow(user));
  const rows = [...latest.values()];
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
  for (const message of messages) {
    if (message.type === 'user.identified') {
      const user = (message.data as { user: UserRecord }).user;
      identifies.push({
        id: message.id,
        fixed: [
          copyText(message.id),
          copyText(user.externalId),
          copyText(user.id),
          jsonField(user.identifiers),
          message.createdAt,
        ].join('\t'),
        leaves: flatten(user.traits as Record<string, unknown>),
      });
      users.push(user);
    } else {
      const data = message.data as { fromExternalId: string; user: UserRecord };
      aliases.push({
        id: message.id,
        fixed: [
          copyText(message.id),
          copyText(data.fromExternalId),
          copyText(data.user.externalId),
          message.createdAt,
        ].join('\t'),
        leaves: [],
      });
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
  if (users.length > 0) await loadUsers(load, users);
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
