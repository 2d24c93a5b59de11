// A Parquet file's bytes with split-block bloom filters on some of its string columns, the same bytes that
// hyparquet-writer writes with `bloomFilter: true` on them. Its own filters hash each value with an xxhash64 in
// BigInt arithmetic (a few dozen BigInts a value); here the values are hashed by xxhash-wasm, and the writer is
// handed the finished filters. Where the writer's insides are not what this expects, it writes the filters itself.
import { ByteWriter, ParquetWriter, parquetWriteBuffer, schemaFromColumnData } from 'hyparquet-writer';
import { BloomBuilder } from 'hyparquet-writer/src/bloom.js';
import type { SchemaElement } from 'hyparquet';
import xxhash from 'xxhash-wasm';

export interface StringColumns {
  /** Every column, in order: its name, its type and one value per row. */
  columns: Array<{ name: string; type: 'STRING' | 'TIMESTAMP'; data: Array<string | Date | null> }>;
  /** The STRING columns that get a bloom filter. */
  bloomed: ReadonlySet<string>;
  kvMetadata: Array<{ key: string; value: string }>;
}

/** What both ways of writing a file share. */
const WRITE = { codec: 'SNAPPY', createdBy: 'inlet' } as const;
/** The writer's row groups (its default): 1,000 rows first, then up to 100,000 each. */
const ROW_GROUP_SIZE = [1000, 100_000];

let hasher: Promise<(text: string) => bigint> | undefined;

/** xxhash64 (seed 0) of a string's UTF-8 bytes: what Parquet's bloom filters hash for a BYTE_ARRAY value. */
function h64(): Promise<(text: string) => bigint> {
  hasher ??= xxhash().then((api) => (text: string) => api.h64(text));
  return hasher;
}

/**
 * The filter of one column chunk's values, or none when all are null: the writer's own BloomBuilder (its sizing,
 * defaults and insertion), given the hashes instead of hashing each value itself.
 */
function bloomFilter(
  element: SchemaElement,
  values: Iterable<string | Date | null>,
  hash: (text: string) => bigint,
): Uint32Array | undefined {
  const builder = new BloomBuilder(element);
  for (const value of values) if (typeof value === 'string') builder.hashes.add(hash(value));
  return builder.finalize();
}

interface Pending {
  chunk: { meta_data?: { path_in_schema?: string[] } };
  bloomFilter?: Uint32Array;
}
interface WriterInsides {
  row_groups?: Array<{ num_rows: bigint; columns: unknown[] }>;
  pendingIndexes?: Pending[];
}

/**
 * The file's schema. The writer gives a TIMESTAMP column only the legacy converted type TIMESTAMP_MILLIS, which
 * readers such as DuckDB take as a time without a zone; the logical type says the values are UTC instants
 * (warehouses.md §2: TIMESTAMP(MILLIS, UTC)). The converted type stays, for readers that know only that.
 */
export function schemaOf(columns: StringColumns['columns']): SchemaElement[] {
  const schema = schemaFromColumnData({ columnData: columns.map(({ name, type, data }) => ({ name, type, data })) });
  for (const element of schema)
    if (element.converted_type === 'TIMESTAMP_MILLIS')
      element.logical_type = { type: 'TIMESTAMP', isAdjustedToUTC: true, unit: 'MILLIS' };
  return schema;
}

/** The file's bytes, SNAPPY-compressed, created by `inlet`. */
export async function parquetWithBlooms(file: StringColumns): Promise<Uint8Array> {
  return (await withOwnFilters(file)) ?? libraryBytes(file);
}

/** The file with filters made here; undefined when the writer's insides are not what this expects. */
export async function withOwnFilters({ columns, bloomed, kvMetadata }: StringColumns): Promise<Uint8Array | undefined> {
  const hash = await h64();
  const columnData = columns.map(({ name, data }) => ({ name, data }));
  const writer = new ByteWriter();
  const schema = schemaOf(columns);
  const parquet = new ParquetWriter({ writer, schema, ...WRITE, kvMetadata });
  await parquet.write({ columnData, rowGroupSize: ROW_GROUP_SIZE });
  const insides = parquet as unknown as WriterInsides;
  const groups = insides.row_groups;
  const pending = insides.pendingIndexes;
  if (
    !Array.isArray(groups) ||
    !Array.isArray(pending) ||
    !handFilters(groups, pending, columns, schema, bloomed, hash)
  )
    return undefined;
  await parquet.finish();
  return new Uint8Array(writer.getBuffer());
}

/** Gives each chunk of a bloomed column its filter; false when the chunks are not laid out as expected. */
function handFilters(
  groups: NonNullable<WriterInsides['row_groups']>,
  pending: Pending[],
  columns: StringColumns['columns'],
  schema: SchemaElement[],
  bloomed: ReadonlySet<string>,
  hash: (text: string) => bigint,
): boolean {
  const byChunk = new Map<unknown, Pending>(pending.map((p) => [p.chunk, p]));
  let start = 0;
  for (const group of groups) {
    const rows = Number(group.num_rows);
    if (group.columns.length !== columns.length) return false;
    for (let j = 0; j < columns.length; j++) {
      const entry = byChunk.get(group.columns[j]);
      const column = columns[j]!;
      if (entry === undefined || entry.chunk.meta_data?.path_in_schema?.[0] !== column.name) return false;
      if (schema[j + 1]?.name !== column.name) return false;
      // The schema's root element first, then one per column.
      if (bloomed.has(column.name))
        entry.bloomFilter = bloomFilter(schema[j + 1]!, column.data.slice(start, start + rows), hash);
    }
    start += rows;
  }
  return start === (columns[0]?.data.length ?? 0);
}

/** The same file through the writer's own filters. */
export function libraryBytes({ columns, bloomed, kvMetadata }: StringColumns): Uint8Array {
  const buffer = parquetWriteBuffer({
    columnData: columns.map(({ name, data }) => ({ name, data, bloomFilter: bloomed.has(name) })),
    schema: schemaOf(columns),
    ...WRITE,
    kvMetadata,
  });
  return new Uint8Array(buffer);
}
