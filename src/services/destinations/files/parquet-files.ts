// Parquet files of a file destination (warehouses.md §2): `events/date=YYYY-MM-DD/hour=HH/<first>-<last>.parquet`
// (by received_at, UTC; `hour=` left out with daily partitions), identity messages under `identities/` the same
// way. Each file is written to a temporary name, fsynced, renamed into place and its folder fsynced; then files
// of the same partition whose position range meets the new one (an earlier delivery of some of these messages: a
// crash before the cursor moved, a replay, another instance's load of them) are removed, or rewritten without
// those messages; only then does the deliverer move the cursor. So no event is ever in two files once a load
// ends, and a re-delivery of the same messages rewrites the same file name. The new file goes into place before
// the others lose its messages: a writer whose rename fails (another instance removed its temporary file) has
// taken nothing away. Temporary files are removed by other writes only once they are old enough to be a crash's
// leftovers, not the file an instance (frozen, slow) is about to rename.
// Files carry a fencing token in their footer: the end of the lease their writer held (each takeover's lease ends
// after the one it took over). A writer takes rows only out of files whose token is not newer than its own; an
// overlapping file of a newer holder keeps its rows, and the writer's own file gives up the ones they share
// instead. So a row leaves a file only while it is in one at least as new, and an instance that lost the
// destination while frozen cannot empty the new holder's file of rows whose only other copy that holder removed.
// Rewrites (overlaps, erasure) keep a file's token.
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import {
  asyncBufferFromFile,
  parquetMetadataAsync,
  parquetReadObjects,
  type AsyncBuffer,
  type FileMetaData,
  type SchemaElement,
} from 'hyparquet';
import { hashParquetValue, readBloomFilter, sbbfContains } from 'hyparquet/src/bloom.js';
import type { EventRecord, StoredMessage, UserRecord } from '../../../storage/types.js';
import { parquetWithBlooms } from './parquet-bloom.js';

type ColumnKind = 'STRING' | 'TIMESTAMP';
type Row = Record<string, string | Date | null>;

/** The `events` columns of warehouses.md §1, properties and context as JSON text. */
const EVENT_COLUMNS: Array<[string, ColumnKind]> = [
  ['id', 'STRING'],
  ['received_at', 'TIMESTAMP'],
  ['occurred_at', 'TIMESTAMP'],
  ['canonical_name', 'STRING'],
  ['event_type', 'STRING'],
  ['action', 'STRING'],
  ['subject_type', 'STRING'],
  ['subject_id', 'STRING'],
  ['source', 'STRING'],
  ['external_id', 'STRING'],
  ['user_id', 'STRING'],
  ['anonymous_id', 'STRING'],
  ['properties', 'STRING'],
  ['context', 'STRING'],
  ['loaded_at', 'TIMESTAMP'],
];
/** The columns that name a person in event files (what `user.erased` looks for). */
const EVENT_KEYS = ['external_id', 'subject_id', 'user_id', 'anonymous_id'];
/** Identity messages: user.identified, user.merged (`data` as JSON text, in the messages' public shape). */
const IDENTITY_COLUMNS: Array<[string, ColumnKind]> = [
  ['id', 'STRING'],
  ['type', 'STRING'],
  ['received_at', 'TIMESTAMP'],
  ['external_id', 'STRING'],
  ['from_external_id', 'STRING'],
  ['user_id', 'STRING'],
  ['traits', 'STRING'],
  ['identifiers', 'STRING'],
  ['loaded_at', 'TIMESTAMP'],
];
const IDENTITY_KEYS = ['external_id', 'from_external_id'];

const keysOf = (columns: Array<[string, ColumnKind]>) => (columns === EVENT_COLUMNS ? EVENT_KEYS : IDENTITY_KEYS);

const date = (iso: string | null | undefined): Date | null => {
  if (iso == null) return null;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? null : new Date(ms);
};
const idOf = (value: unknown): string | null =>
  typeof value === 'string' || typeof value === 'number' ? String(value) : null;

function eventRow(event: EventRecord, loadedAt: Date): Row {
  const text = event.jsonText;
  const original =
    text === undefined ? (event.original ?? null) : text.original === null ? null : JSON.parse(text.original);
  const o = original as Record<string, unknown> | null;
  return {
    id: event.id,
    received_at: date(event.receivedAt),
    occurred_at: date(event.occurredAt),
    canonical_name: event.canonicalName,
    event_type: event.eventType,
    action: event.action,
    subject_type: event.subjectType,
    subject_id: event.subjectId,
    source: event.source,
    external_id: event.externalId,
    user_id: idOf(o?.userId) ?? event.externalId,
    anonymous_id: idOf(o?.anonymousId),
    properties: text === undefined ? JSON.stringify(event.properties) : text.properties,
    context: text === undefined ? (event.context == null ? null : JSON.stringify(event.context)) : text.context,
    loaded_at: loadedAt,
  };
}

function identityRow(message: Extract<StoredMessage, { kind: 'identity' }>, loadedAt: Date): Row {
  const data = message.data as { user: UserRecord; fromExternalId?: string };
  return {
    id: message.id,
    type: message.type,
    received_at: date(message.createdAt),
    external_id: data.user.externalId,
    from_external_id: data.fromExternalId ?? null,
    user_id: data.user.id,
    traits: JSON.stringify(data.user.traits),
    identifiers: JSON.stringify(data.user.identifiers),
    loaded_at: loadedAt,
  };
}

/** The partition folder of a time: `date=YYYY-MM-DD/hour=HH`, or `date=…` alone when partitioned by day. */
function partitionOf(at: Date | null, partition: 'hour' | 'day'): string {
  const iso = (at ?? new Date(0)).toISOString();
  const day = `date=${iso.slice(0, 10)}`;
  return partition === 'day' ? day : join(day, `hour=${iso.slice(11, 13)}`);
}

/** The tail read first: a file's footer (the bloom filters, just before it, are read on their own). */
const FOOTER_BYTES = 16 * 1024;

/** The footer key (Parquet key-value metadata) of a file's fencing token (see the header). */
const TOKEN_KEY = 'inlet.lease_until';

/** A file's fencing token; 0 for a file written before tokens (older than any). */
function tokenOf(metadata: FileMetaData): number {
  const token = Number(metadata.key_value_metadata?.find((kv) => kv.key === TOKEN_KEY)?.value);
  return Number.isFinite(token) ? token : 0;
}

/**
 * A file's bytes. The columns that name a person carry a Parquet bloom filter (split-block, 1 % false positives),
 * so that an erasure passes over a file that cannot hold the person after reading its footer and filters.
 */
async function parquetBytes(columns: Array<[string, ColumnKind]>, rows: Row[], token: number): Promise<Uint8Array> {
  return parquetWithBlooms({
    columns: columns.map(([name, type]) => ({ name, type, data: rows.map((r) => r[name] ?? null) })),
    bloomed: new Set(keysOf(columns)),
    kvMetadata: [{ key: TOKEN_KEY, value: String(token) }],
  });
}

async function syncFolder(folder: string): Promise<void> {
  const handle = await open(folder, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Writes `bytes` to a temporary file in `folder`, fsynced; returns its path. */
async function writeTemporary(folder: string, name: string, bytes: Uint8Array): Promise<string> {
  await mkdir(folder, { recursive: true });
  const temporary = join(folder, `.${name}.${randomBytes(4).toString('hex')}.tmp`);
  const handle = await open(temporary, 'w');
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return temporary;
}

/** Renames the temporary file into place and fsyncs the folder. */
async function commit(temporary: string, folder: string, name: string): Promise<void> {
  await rename(temporary, join(folder, name));
  await syncFolder(folder);
}

/** A file's position range from its name (`<first>-<last>.parquet`). */
function rangeOf(name: string): [string, string] | undefined {
  const match = /^([0-9A-Za-z._]+)-([0-9A-Za-z._]+)\.parquet$/.exec(name);
  return match === null ? undefined : [match[1]!, match[2]!];
}

type Order = (a: string, b: string) => number;

/** How old a temporary file is before another write takes it for a crash's leftover. */
const LEFTOVER_MS = 10 * 60_000;

async function leftover(path: string): Promise<boolean> {
  try {
    return Date.now() - (await stat(path)).mtimeMs > LEFTOVER_MS;
  } catch {
    return false; // gone meanwhile
  }
}

/**
 * Runs `use` on the file at `path` read through one open handle, so that a file renamed over meanwhile is read
 * whole, old or new; undefined when it is gone (another writer removed it).
 */
async function withFile<T>(path: string, use: (file: AsyncBuffer) => Promise<T>): Promise<T | undefined> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  try {
    const { size } = await handle.stat();
    return await use({
      byteLength: size,
      async slice(start, end = size) {
        const bytes = new Uint8Array(end - start);
        await handle.read(bytes, 0, bytes.length, start);
        return bytes.buffer;
      },
    });
  } finally {
    await handle.close();
  }
}

/** Rewrites the file at `path` with `rows` under its own token, or removes it when no rows are left. */
async function replace(path: string, columns: Array<[string, ColumnKind]>, rows: Row[], token: number): Promise<void> {
  const folder = path.slice(0, path.lastIndexOf('/'));
  const name = path.slice(path.lastIndexOf('/') + 1);
  if (rows.length === 0) {
    await rm(path, { force: true });
    await syncFolder(folder);
  } else
    await commit(
      await writeTemporary(folder, name, await parquetBytes(columns, restore(columns, rows), token)),
      folder,
      name,
    );
}

/**
 * The files of `folder` whose range meets [first, last], other than `name`: removed when the new file covers
 * their range, else rewritten without the rows of `ids` (they are in the new file, already in place), unless
 * their token is newer than `token`: then the new file gives up the rows it shares with them. Leftover temporary
 * files (older than LEFTOVER_MS) are removed.
 */
async function clearOverlaps(
  folder: string,
  name: string,
  temporary: string,
  range: [string, string],
  ids: Set<string>,
  columns: Array<[string, ColumnKind]>,
  order: Order,
  token: number,
): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(folder);
  } catch {
    return;
  }
  /** Rows of the new file that a newer holder's files hold. */
  const shared = new Set<string>();
  let removed = false;
  for (const existing of entries) {
    // A temporary file of a write cut short (a crash): never renamed, so never read.
    if (existing.startsWith('.') && existing.endsWith('.tmp')) {
      if (join(folder, existing) !== temporary && (await leftover(join(folder, existing))))
        await rm(join(folder, existing), { force: true });
      continue;
    }
    const other = existing === name ? undefined : rangeOf(existing);
    if (other === undefined) continue;
    if (order(other[0], range[1]) > 0 || order(other[1], range[0]) < 0) continue;
    const path = join(folder, existing);
    // True when the file was removed (its folder is fsynced once, after the loop).
    const gone = await withFile(path, async (file) => {
      const metadata = await parquetMetadataAsync(file, { initialFetchSize: FOOTER_BYTES });
      const theirs = tokenOf(metadata);
      if (theirs > token) {
        // This instance lost the destination (frozen, cut off) and the new holder wrote these messages too.
        for (const row of (await parquetReadObjects({ file, metadata, columns: ['id'] })) as Row[])
          if (ids.has(String(row.id))) shared.add(String(row.id));
        return false;
      }
      if (order(range[0], other[0]) <= 0 && order(other[1], range[1]) <= 0) {
        await rm(path, { force: true });
        return true;
      }
      const rows = (await parquetReadObjects({ file, metadata })) as Row[];
      const kept = rows.filter((row) => !ids.has(String(row.id)));
      if (kept.length < rows.length) await replace(path, columns, kept, theirs);
      return false;
    });
    if (gone === true) removed = true;
  }
  if (removed) await syncFolder(folder);
  if (shared.size > 0) await giveUp(join(folder, name), shared, columns, token);
}

/**
 * Takes `shared` (rows that a newer holder's files hold) out of this writer's file: left alone when it is gone
 * (the new holder removed it) or a newer holder's file of the same name replaced it.
 */
async function giveUp(path: string, shared: Set<string>, columns: Array<[string, ColumnKind]>, token: number) {
  await withFile(path, async (file) => {
    const metadata = await parquetMetadataAsync(file, { initialFetchSize: FOOTER_BYTES });
    const theirs = tokenOf(metadata);
    if (theirs > token) return;
    const rows = (await parquetReadObjects({ file, metadata })) as Row[];
    const kept = rows.filter((row) => !shared.has(String(row.id)));
    if (kept.length < rows.length) await replace(path, columns, kept, theirs);
  });
}

/** Rows read back, in the writer's types again (timestamps as Dates). */
function restore(columns: Array<[string, ColumnKind]>, rows: Row[]): Row[] {
  return rows.map((row) =>
    Object.fromEntries(
      columns.map(([column, kind]) => {
        const value = row[column] ?? null;
        return [
          column,
          kind === 'TIMESTAMP' && value !== null && !(value instanceof Date) ? date(String(value)) : value,
        ];
      }),
    ),
  );
}

/** Position text as it goes into a file name. */
const namePart = (position: string) => position.replace(/[^0-9A-Za-z._]/g, '_');

export interface FileLoad {
  files: number;
  rows: number;
}

/** Who writes: its fencing token, and (tests) a step between a file's rename and the clearing of overlaps. */
export interface FileWriter {
  /** The end of the destination's lease the writer holds (see the header). */
  token: number;
  /** Called once a file is in place, before the files it overlaps lose its rows. */
  placed?: (path: string) => Promise<void>;
}

/** Writes `messages` (no user.erased among them) into their partitions' files under `root`. */
export async function writeMessages(
  root: string,
  partition: 'hour' | 'day',
  messages: StoredMessage[],
  now: Date,
  order: Order,
  writer: FileWriter,
): Promise<FileLoad> {
  const groups = new Map<string, { columns: Array<[string, ColumnKind]>; rows: Row[]; first: string; last: string }>();
  // A delivery's messages fall in a few hours: each folder is made once, by the hour (or day) since the epoch.
  const folders = new Map<string, string>();
  const unit = partition === 'day' ? 86_400_000 : 3_600_000;
  for (const message of messages) {
    const row = message.kind === 'event' ? eventRow(message.event, now) : identityRow(message as never, now);
    const at = row.received_at as Date | null;
    const key = `${message.kind}:${Math.floor((at?.getTime() ?? 0) / unit)}`;
    let folder = folders.get(key);
    if (folder === undefined) {
      folder = join(message.kind === 'event' ? 'events' : 'identities', partitionOf(at, partition));
      folders.set(key, folder);
    }
    let group = groups.get(folder);
    if (group === undefined) {
      group = {
        columns: message.kind === 'event' ? EVENT_COLUMNS : IDENTITY_COLUMNS,
        rows: [],
        first: namePart(message.position),
        last: '',
      };
      groups.set(folder, group);
    }
    group.rows.push(row);
    group.last = namePart(message.position);
  }
  let rows = 0;
  for (const [sub, group] of groups) {
    const folder = join(root, sub);
    const name = `${group.first}-${group.last}.parquet`;
    const temporary = await writeTemporary(folder, name, await parquetBytes(group.columns, group.rows, writer.token));
    await commit(temporary, folder, name);
    await writer.placed?.(join(folder, name));
    const ids = new Set(group.rows.map((r) => String(r.id)));
    await clearOverlaps(folder, name, temporary, [group.first, group.last], ids, group.columns, order, writer.token);
    rows += group.rows.length;
  }
  return { files: groups.size, rows };
}

async function parquetFiles(folder: string): Promise<string[]> {
  const found: string[] = [];
  let entries;
  try {
    entries = await readdir(folder, { withFileTypes: true });
  } catch {
    return found;
  }
  for (const entry of entries) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) found.push(...(await parquetFiles(path)));
    else if (entry.isFile() && entry.name.endsWith('.parquet')) found.push(path);
  }
  return found;
}

/**
 * Whether the file may hold rows of `ids` in one of `keys`, from its footer and bloom filters alone: not when, in
 * every row group, each key column is all null or has a bloom filter that rules every id out (a bloom filter has
 * no false negatives). A file written without bloom filters (before they were added) may hold anyone. The
 * writer puts the bloom filters together before the footer: they are read in one piece.
 */
async function mayHold(file: AsyncBuffer, metadata: FileMetaData, keys: string[], ids: string[]): Promise<boolean> {
  const leaves = metadata.schema.slice(1);
  const blooms: Array<{ start: number; end: number; element: SchemaElement }> = [];
  for (const group of metadata.row_groups) {
    for (const key of keys) {
      const index = leaves.findIndex((element) => element.name === key);
      const chunk = index < 0 ? undefined : group.columns[index]?.meta_data;
      if (chunk === undefined) return true;
      const nulls = chunk.statistics?.null_count;
      if (nulls !== undefined && Number(nulls) === Number(chunk.num_values)) continue;
      if (chunk.bloom_filter_offset === undefined || chunk.bloom_filter_length === undefined) return true;
      const start = Number(chunk.bloom_filter_offset);
      blooms.push({ start, end: start + chunk.bloom_filter_length, element: leaves[index]! });
    }
  }
  if (blooms.length === 0) return false;
  const from = Math.min(...blooms.map((b) => b.start));
  const bytes = new DataView(await file.slice(from, Math.max(...blooms.map((b) => b.end))));
  for (const { start, element } of blooms) {
    const bloom = readBloomFilter({ view: bytes, offset: start - from });
    if (bloom === undefined) return true;
    for (const id of ids) {
      const hash = hashParquetValue(id, element);
      if (hash === undefined || sbbfContains(bloom.blocks, hash)) return true;
    }
  }
  return false;
}

/**
 * `user.erased`: rewrites every file holding rows of these external ids without them (a file left empty is
 * removed). Each file's footer and bloom filters are read (mayHold); only a file that holds the person is read
 * whole and rewritten.
 */
export async function eraseFromFiles(root: string, externalIds: string[]): Promise<number> {
  const ids = new Set(externalIds);
  let removed = 0;
  for (const [sub, columns] of [
    ['events', EVENT_COLUMNS],
    ['identities', IDENTITY_COLUMNS],
  ] as Array<[string, Array<[string, ColumnKind]>]>) {
    const keys = keysOf(columns);
    for (const path of await parquetFiles(join(root, sub))) {
      if ((await stat(path)).size === 0) continue;
      const file = await asyncBufferFromFile(path);
      const metadata = await parquetMetadataAsync(file, { initialFetchSize: FOOTER_BYTES });
      if (!(await mayHold(file, metadata, keys, externalIds))) continue;
      const rows = (await parquetReadObjects({ file, metadata })) as Row[];
      const kept = rows.filter((row) => !keys.some((k) => typeof row[k] === 'string' && ids.has(row[k])));
      if (kept.length === rows.length) continue;
      removed += rows.length - kept.length;
      // Rewritten under its own name and token: the new file replaces it.
      await replace(path, columns, kept, tokenOf(metadata));
    }
  }
  return removed;
}
