// One load into a PostgreSQL warehouse (warehouses.md §1): a batch of messages in one transaction, exactly
// once. Under an advisory lock on the schema (one loader at a time, even while a lease changes hands), each
// table's rows with the batch's ids are deleted and the batch is written with COPY, so a batch loaded again
// after a crash or a takeover replaces its own rows instead of adding them twice; `_inlet_loads` records the
// load in the same transaction. Messages are applied in position order: an erasure deletes the rows loaded
// before it, in this batch too.
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { PoolClient } from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { EventRecord, StoredMessage, UserRecord } from '../../../storage/types.js';
import {
  columnsFor,
  EVENT_COLUMNS,
  readLayout,
  tableFor,
  type Column,
  type Layout,
  type LayoutChanges,
  type Limits,
  leafTypes,
} from './layout.js';
import { quoted } from './names.js';
import { copyField, copyText, flatten, NULL_FIELD, typeOf, type ColumnType, type Leaf } from './values.js';

export interface LoadResult extends LayoutChanges {
  rows: number;
}

/** One row for COPY: the fixed fields (already in COPY's text form) and the flattened properties. */
interface Row {
  id: string;
  fixed: string[];
  leaves: Leaf[];
}

const field = (value: string | null | undefined): string => (value == null ? NULL_FIELD : copyText(value));
const jsonField = (value: unknown): string => (value == null ? NULL_FIELD : copyText(JSON.stringify(value)));
const idOf = (value: unknown): string | null =>
  typeof value === 'string' || typeof value === 'number' ? String(value) : null;

function parsed(text: string | null | undefined): Record<string, unknown> | null {
  return text == null ? null : (JSON.parse(text) as Record<string, unknown>);
}

/** An event's JSON values, whether it was read with them as text (deliveries) or parsed. */
function jsonOf(event: EventRecord): {
  properties: Record<string, unknown>;
  context: Record<string, unknown> | null;
  original: Record<string, unknown> | null;
} {
  if (event.jsonText === undefined)
    return { properties: event.properties, context: event.context ?? null, original: event.original ?? null };
  return {
    properties: parsed(event.jsonText.properties) ?? {},
    context: parsed(event.jsonText.context),
    original: parsed(event.jsonText.original),
  };
}

/** The fixed fields of an event, in EVENT_COLUMNS order without `properties`, `context` and `loaded_at`. */
function eventFixed(event: EventRecord, original: Record<string, unknown> | null): string[] {
  return [
    event.id,
    event.receivedAt,
    field(event.occurredAt),
    copyText(event.canonicalName),
    field(event.eventType),
    field(event.action),
    field(event.subjectType),
    field(event.subjectId),
    field(event.source),
    field(event.externalId),
    field(idOf(original?.userId) ?? event.externalId),
    field(idOf(original?.anonymousId)),
  ];
}

const EVENT_FIXED = EVENT_COLUMNS.map(([n]) => n).filter((n) => !['properties', 'context', 'loaded_at'].includes(n));

async function copyRows(client: PoolClient, target: string, columns: string[], lines: string[]): Promise<void> {
  if (lines.length === 0) return;
  const stream = client.query(copyFrom(`COPY ${target} (${columns.map(quoted).join(', ')}) FROM STDIN`));
  await pipeline(Readable.from([lines.join('')]), stream);
}

/** Deletes the rows of `ids` (a re-load replaces them) and copies `rows` with their property columns. */
async function writeRows(
  client: PoolClient,
  layout: Layout,
  table: string,
  key: { column: string; cast: string },
  fixedColumns: string[],
  rows: Row[],
  columns: Map<string, Column> | undefined,
): Promise<void> {
  const target = `${quoted(layout.schema)}.${quoted(table)}`;
  await client.query(`DELETE FROM ${target} WHERE ${quoted(key.column)} = ANY($1::${key.cast}[])`, [
    rows.map((r) => r.id),
  ]);
  // The property columns these rows use, in a fixed order.
  const used = new Map<string, Column>();
  if (columns !== undefined)
    for (const row of rows)
      for (const leaf of row.leaves) {
        const column = columns.get(leaf.path);
        if (column !== undefined) used.set(leaf.path, column);
      }
  const paths = [...used.keys()];
  const lines = rows.map((row) => {
    const values = new Map(row.leaves.map((leaf) => [leaf.path, leaf.value]));
    const extra = paths.map((path) => copyField(values.get(path), used.get(path)!.type));
    return `${[...row.fixed, ...extra].join('\t')}\n`;
  });
  await copyRows(client, target, [...fixedColumns, ...paths.map((p) => used.get(p)!.name)], lines);
}

/** The property columns of a table for these rows (added or widened first). */
async function prepareColumns(
  client: PoolClient,
  layout: Layout,
  table: string,
  rows: Row[],
  limits: Limits,
  changes: LayoutChanges,
): Promise<Map<string, Column>> {
  const needed = leafTypes(
    rows.map((r) => r.leaves),
    typeOf,
  );
  return columnsFor(client, layout, table, needed, limits, changes);
}

/** A run of events: into `events`, and each into its event name's table. */
async function loadEvents(
  client: PoolClient,
  layout: Layout,
  events: EventRecord[],
  limits: Limits,
  changes: LayoutChanges,
): Promise<void> {
  const all: Row[] = [];
  const byName = new Map<string, Row[]>();
  for (const event of events) {
    const json = jsonOf(event);
    const fixed = eventFixed(event, json.original);
    const properties = event.jsonText === undefined ? jsonField(json.properties) : copyText(event.jsonText.properties);
    const context = event.jsonText === undefined ? jsonField(json.context) : field(event.jsonText.context);
    all.push({ id: event.id, fixed: [...fixed, properties, context], leaves: [] });
    let rows = byName.get(event.canonicalName);
    if (rows === undefined) byName.set(event.canonicalName, (rows = []));
    rows.push({ id: event.id, fixed: [...fixed, context], leaves: flatten(json.properties) });
  }
  const uuid = { column: 'id', cast: 'uuid' };
  await writeRows(client, layout, 'events', uuid, [...EVENT_FIXED, 'properties', 'context'], all, undefined);
  for (const [name, rows] of byName) {
    const table = await tableFor(client, layout, name, limits, changes);
    if (table === undefined) continue;
    const columns = await prepareColumns(client, layout, table, rows, limits, changes);
    await writeRows(client, layout, table, uuid, [...EVENT_FIXED, 'context'], rows, columns);
  }
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
    ],
    leaves: flatten(user.traits as Record<string, unknown>),
  };
}

/** Users upserted to their latest state: the last row of each external id in the run replaces the stored one. */
async function loadUsers(
  client: PoolClient,
  layout: Layout,
  users: UserRecord[],
  limits: Limits,
  changes: LayoutChanges,
): Promise<void> {
  const latest = new Map<string, Row>();
  for (const user of users) latest.set(user.externalId, userRow(user));
  const rows = [...latest.values()];
  const columns = await prepareColumns(client, layout, 'users', rows, limits, changes);
  await writeRows(client, layout, 'users', { column: 'external_id', cast: 'text' }, USER_FIXED, rows, columns);
}

type IdentityMessage = Extract<StoredMessage, { kind: 'identity' }>;

/** A run of identity messages (identified, merged): `identifies`, `aliases`, `users`. */
async function loadIdentity(
  client: PoolClient,
  layout: Layout,
  messages: IdentityMessage[],
  limits: Limits,
  changes: LayoutChanges,
): Promise<void> {
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
        ],
        leaves: flatten(user.traits as Record<string, unknown>),
      });
      users.push(user);
    } else {
      const data = message.data as { fromExternalId: string; user: UserRecord };
      aliases.push({
        id: message.id,
        fixed: [copyText(message.id), copyText(data.fromExternalId), copyText(data.user.externalId), message.createdAt],
        leaves: [],
      });
      mergedAway.push(data.fromExternalId);
      users.push(data.user);
    }
  }
  const text = { column: 'id', cast: 'text' };
  if (identifies.length > 0) {
    const columns = await prepareColumns(client, layout, 'identifies', identifies, limits, changes);
    const fixed = ['id', 'external_id', 'user_id', 'identifiers', 'received_at'];
    await writeRows(client, layout, 'identifies', text, fixed, identifies, columns);
  }
  const aliasColumns = ['id', 'from_external_id', 'to_external_id', 'merged_at'];
  if (aliases.length > 0) await writeRows(client, layout, 'aliases', text, aliasColumns, aliases, undefined);
  if (users.length > 0) await loadUsers(client, layout, users, limits, changes);
  const kept = new Set(users.map((u) => u.externalId));
  const gone = mergedAway.filter((id) => !kept.has(id));
  if (gone.length > 0)
    await client.query(`DELETE FROM ${quoted(layout.schema)}.users WHERE external_id = ANY($1::text[])`, [gone]);
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

/** A hash of the schema's name for its advisory lock (one loader per schema at a time). */
const LOCK = `SELECT pg_advisory_xact_lock(hashtext('inlet_warehouse'), hashtext($1))`;

/**
 * Loads `messages` (in position order) in one transaction on `client`, and records the load under
 * `destinationId`; either all of it is in the warehouse or none (the caller rolls back on an error).
 *
 * Under the schema's lock it first asks `holds` whether this instance still holds the destination's lease. One
 * that lost it while it held this batch (frozen, cut off) would put back rows that the new holder loaded since
 * and a later `user.erased` deleted; it drops the load instead (StaleLoad). Once the answer is yes, a new holder
 * can only load after this transaction ends, since it needs the same lock.
 */
export async function loadBatch(
  client: PoolClient,
  schema: string,
  destinationId: string,
  messages: StoredMessage[],
  messageId: (message: StoredMessage) => string,
  limits: Limits,
  holds: () => Promise<boolean>,
): Promise<LoadResult> {
  const changes: LayoutChanges = { columnsAdded: 0, widenings: 0, warnings: [] };
  await client.query('BEGIN');
  try {
    await client.query(LOCK, [schema]);
    if (!(await holds())) throw new StaleLoad('this instance no longer holds the destination; the load is dropped');
    const layout = await readLayout(client, schema);
    let events: EventRecord[] = [];
    let identity: IdentityMessage[] = [];
    const flush = async () => {
      if (events.length > 0) await loadEvents(client, layout, events, limits, changes);
      if (identity.length > 0) await loadIdentity(client, layout, identity, limits, changes);
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
    await client.query(
      `INSERT INTO ${quoted(schema)}._inlet_loads (destination_id, loaded_at, messages, last_message_id)
       VALUES ($1, now(), $2, $3)
       ON CONFLICT (destination_id) DO UPDATE SET loaded_at = now(),
         messages = _inlet_loads.messages + EXCLUDED.messages, last_message_id = EXCLUDED.last_message_id`,
      [destinationId, messages.length, messageId(messages[messages.length - 1]!)],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
  return { rows: messages.length, ...changes };
}

export type { ColumnType };
