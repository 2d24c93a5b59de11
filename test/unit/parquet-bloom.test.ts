// Parquet files' bloom filters made with xxhash-wasm (src/services/destinations/files/parquet-bloom.ts): the file
// is byte for byte the one hyparquet-writer writes with its own filters, over row groups, nulls, repeats,
// characters beyond ASCII and lone surrogates, and a filter holds each of its column's values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parquetMetadata } from 'hyparquet';
import { readBloomFilter, sbbfContains } from 'hyparquet/src/bloom.js';
import xxhash from 'xxhash-wasm';
import {
  libraryBytes,
  withOwnFilters,
  type StringColumns,
} from '../../src/services/destinations/files/parquet-bloom.js';

const id = fc.oneof(
  fc.uuid(),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('a', 'é', '😀', '\uD800', 'a\uDC00b'),
);

function file(keys: Array<string | null>, others: Array<string | null>): StringColumns {
  const at = new Date(Date.UTC(2026, 10, 29, 8));
  return {
    columns: [
      { name: 'id', type: 'STRING', data: keys.map((_, i) => `e${i}`) },
      { name: 'received_at', type: 'TIMESTAMP', data: keys.map(() => at) },
      { name: 'external_id', type: 'STRING', data: keys },
      { name: 'user_id', type: 'STRING', data: others },
    ],
    bloomed: new Set(['external_id', 'user_id']),
    kvMetadata: [{ key: 'inlet.lease_until', value: '42' }],
  };
}

test('the file is the bytes the writer makes with its own bloom filters', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.tuple(fc.option(id), fc.option(id)), { minLength: 1, maxLength: 60 }),
      async (rows) => {
        const f = file(
          rows.map(([k]) => k),
          rows.map(([, o]) => o),
        );
        const own = await withOwnFilters(f);
        assert.ok(own !== undefined, "the writer's insides are as expected");
        assert.deepEqual(Buffer.from(own), Buffer.from(libraryBytes(f)));
      },
    ),
    { numRuns: 60 },
  );
});

test('over more than one row group, each chunk has its own filter, holding each of its values', async () => {
  const keys = Array.from({ length: 2500 }, (_, i) => (i % 7 === 0 ? null : `person-${i % 900}`));
  const f = file(
    keys,
    keys.map((k, i) => (i % 3 === 0 ? k : null)),
  );
  const own = (await withOwnFilters(f))!;
  assert.deepEqual(Buffer.from(own), Buffer.from(libraryBytes(f)));
  const buffer = own.buffer.slice(own.byteOffset, own.byteOffset + own.byteLength) as ArrayBuffer;
  const metadata = parquetMetadata(buffer);
  assert.deepEqual(
    metadata.row_groups.map((g) => Number(g.num_rows)),
    [1000, 1500],
  );
  const { h64 } = await xxhash();
  const view = new DataView(buffer);
  let start = 0;
  for (const group of metadata.row_groups) {
    const chunk = group.columns[2]!.meta_data!;
    const { blocks } = readBloomFilter({ view, offset: Number(chunk.bloom_filter_offset) })!;
    for (const key of keys.slice(start, start + Number(group.num_rows)))
      if (key !== null) assert.ok(sbbfContains(blocks, h64(key)), key);
    start += Number(group.num_rows);
  }
});
