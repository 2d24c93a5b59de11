// The one pass over a Segment body's text before it is parsed (domain/segment.ts, scanSegmentBody): it
// must agree with the character scan on depth, never call a body "plain" that holds a value the
// storability walk would refuse, and find each batch item's text, whose length bounds the item's JSON.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { FieldError } from '../../src/domain/errors.js';
import { jsonNestsDeeperThan, rejectUnstorable } from '../../src/domain/json-values.js';
import { itemBytesBound, scanSegmentBody, sentFieldsJson } from '../../src/domain/segment.js';

/** Strings of any UTF-16 units (lone surrogates and U+0000 included), doubles of any size. */
const hostileJson = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string({ unit: 'binary', maxLength: 6 }),
    fc.string({ maxLength: 6 }),
    fc.double(),
    fc.integer(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.string({ unit: 'binary', maxLength: 4 }), tie('value'), { maxKeys: 4 }),
  ),
})).value;

const texts = (value: unknown): string[] => [JSON.stringify(value), JSON.stringify(value, null, 2)];

test('tooDeep agrees with jsonNestsDeeperThan, on JSON and on any text', () => {
  fc.assert(
    fc.property(hostileJson, fc.integer({ min: 0, max: 8 }), (value, max) => {
      for (const text of texts(value)) assert.equal(scanSegmentBody(text, max).tooDeep, jsonNestsDeeperThan(text, max));
    }),
    { numRuns: 1000, seed: 10 },
  );
  fc.assert(
    fc.property(
      fc.string({ unit: fc.constantFrom('{', '[', '}', ']', '"', '\\', 'a', ':', ',', '1', 'e') }),
      fc.integer({ min: 0, max: 6 }),
      (text, max) => {
        assert.equal(scanSegmentBody(text, max).tooDeep, jsonNestsDeeperThan(text, max));
      },
    ),
    { numRuns: 2000, seed: 10 },
  );
  assert.equal(scanSegmentBody('['.repeat(100_000), 128).tooDeep, true);
});

test('a plain body holds nothing the storability walk refuses', () => {
  let plainSeen = 0;
  let notPlainSeen = 0;
  fc.assert(
    fc.property(hostileJson, (value) => {
      for (const text of texts({ batch: [{ properties: value }], context: value })) {
        const errors: FieldError[] = [];
        rejectUnstorable(JSON.parse(text), '', errors);
        if (scanSegmentBody(text, 128).plain) {
          plainSeen++;
          assert.deepEqual(errors, [], text);
        } else notPlainSeen++;
      }
    }),
    { numRuns: 3000, seed: 10 },
  );
  assert.ok(plainSeen > 100 && notPlainSeen > 100, `${plainSeen} plain, ${notPlainSeen} not`);
  // Each way to an unstorable value makes a body not plain.
  for (const text of [
    '{"a":"\\u0000"}',
    '{"a":"\\ud800"}',
    '{"\\u0000":1}',
    '{"a":1e400}',
    '{"a":-1E309}',
    `{"a":${'9'.repeat(400)}}`,
    `${'{"a":'.repeat(65)}1${'}'.repeat(65)}`,
  ]) {
    assert.equal(scanSegmentBody(text, 128).plain, false, text);
  }
  assert.equal(
    scanSegmentBody('{"batch":[{"a":"x\\\\u0000","n":-12.5e","t":"1e400"}]}', 128).plain,
    false,
    'a \\u anywhere, even escaped, is looked at closely',
  );
  assert.equal(scanSegmentBody('{"batch":[{"a":"1e400 \\" [[[","n":-12.5,"t":true}]}', 128).plain, true);
});

test('the items of the batch array are found, and their text bounds their JSON bytes', () => {
  fc.assert(
    fc.property(
      fc.array(fc.dictionary(fc.string({ maxLength: 5 }), hostileJson, { maxKeys: 4 }), { maxLength: 5 }),
      hostileJson,
      (items, other) => {
        for (const text of texts({ before: other, batch: items, after: { batch: other } })) {
          const scan = scanSegmentBody(text, 128);
          assert.equal(scan.items?.length, items.length, text);
          scan.items!.forEach((span, index) => {
            assert.deepEqual(JSON.parse(text.slice(span[0], span[1])), JSON.parse(JSON.stringify(items[index])));
            if (scan.plain)
              assert.ok(itemBytesBound(text, span, 1 << 30) >= Buffer.byteLength(JSON.stringify(items[index])));
          });
        }
      },
    ),
    { numRuns: 1000, seed: 10 },
  );
  // The last `batch` key counts, as JSON.parse keeps the last; a batch of non-objects yields fewer spans.
  assert.deepEqual(scanSegmentBody('{"batch":[{"a":1}],"batch":[{"b":2},{"c":3}]}', 128).items, [
    [28, 35],
    [36, 43],
  ]);
  assert.deepEqual(scanSegmentBody('{"batch":[1,{"b":2},[{"c":3}]]}', 128).items, [[12, 19]]);
  assert.equal(scanSegmentBody('{"event":"x","userId":"u"}', 128).items, undefined);
  assert.equal(itemBytesBound('{"a":"é"}', [0, 9], 100), 27);
  assert.equal(itemBytesBound('{"a":"é"}', [0, 9], 10), 10);
});

test("each item's properties and context are found as sent, only from plain compact bodies", () => {
  const objectOrNot = fc.oneof(fc.dictionary(fc.string({ maxLength: 5 }), hostileJson, { maxKeys: 3 }), hostileJson);
  const item = fc.record(
    { type: fc.constant('track'), properties: objectOrNot, context: objectOrNot, other: hostileJson },
    { requiredKeys: ['type'] },
  );
  let used = 0;
  fc.assert(
    fc.property(fc.array(item, { maxLength: 4 }), (items) => {
      for (const text of texts({ batch: items, context: { x: 1 } })) {
        const scan = scanSegmentBody(text, 128);
        assert.equal(scan.compact, !text.includes('\n'));
        items.forEach((sent, index) => {
          const json = sentFieldsJson(text, scan, index);
          if (!scan.plain || !scan.compact) return assert.equal(json, undefined);
          for (const field of ['properties', 'context'] as const) {
            const value = sent[field];
            const isObject = typeof value === 'object' && value !== null && !Array.isArray(value);
            assert.equal(json?.[field] !== undefined, isObject, `${field} of ${text}`);
            if (isObject) {
              used++;
              assert.deepEqual(JSON.parse(json![field]!), JSON.parse(JSON.stringify(value)));
            }
          }
        });
      }
    }),
    { numRuns: 1000, seed: 11 },
  );
  assert.ok(used > 200, `${used} fields compared`);
  // A repeated key: the last value counts, also when it is not an object.
  const twice = '{"batch":[{"properties":{"a":1},"context":{"b":2},"properties":null,"context":{"c":3}}]}';
  assert.deepEqual(sentFieldsJson(twice, scanSegmentBody(twice, 128), 0), { context: '{"c":3}' });
  // Only an item's own fields, not those of a nested object or a batch-level context.
  const nested = '{"context":{"z":0},"batch":[{"properties":{"context":{"d":4}},"traits":{"context":{"e":5}}}]}';
  assert.deepEqual(sentFieldsJson(nested, scanSegmentBody(nested, 128), 0), { properties: '{"context":{"d":4}}' });
});
