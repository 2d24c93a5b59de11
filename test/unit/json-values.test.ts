// The two guards that let Inlet refuse or record hostile JSON without crashing (issue 9).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { jsonNestsDeeperThan, rejectUnstorable, storableText, unstorableString } from '../../src/domain/json-values.js';

/** Reference depth: parse, then walk (safe for the shallow values fast-check builds). */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce<number>((max, child) => Math.max(max, depthOf(child)), 0);
}

test('jsonNestsDeeperThan agrees with the parsed depth, brackets inside strings and escapes included', () => {
  fc.assert(
    fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 0, max: 10 }), (value, max) => {
      const text = JSON.stringify(value);
      assert.equal(jsonNestsDeeperThan(text, max), depthOf(value) > max);
    }),
    { numRuns: 500, seed: 9 },
  );
  assert.equal(jsonNestsDeeperThan('{"a":"[[[[\\"{{{{"}', 1), false);
  assert.equal(jsonNestsDeeperThan('['.repeat(100_000), 128), true);
  assert.equal(jsonNestsDeeperThan('['.repeat(128) + ']'.repeat(128), 128), false);
});

test('storableText leaves valid text alone and mends NUL and lone surrogates, so no backend refuses it', () => {
  assert.equal(storableText('plain ✓ 😀'), 'plain ✓ 😀');
  assert.equal(storableText('a\u0000b'), 'a\uFFFDb');
  assert.equal(storableText('x\uD800'), 'x\uFFFD');
  assert.equal(storableText('\uDC00y'), '\uFFFDy');
  assert.equal(storableText('😀'.slice(0, 1)), '\uFFFD');
  fc.assert(
    fc.property(fc.string({ unit: 'binary' }), (value) => {
      assert.equal(unstorableString(storableText(value)), undefined);
    }),
    { numRuns: 1000, seed: 9 },
  );
});

/** The bound rejectUnstorable returns, for a value it accepts. */
function boundOf(value: unknown): number {
  const errors: Array<{ pointer: string; message: string }> = [];
  const bound = rejectUnstorable(value, '', errors);
  assert.deepEqual(errors, []);
  return bound;
}

test('rejectUnstorable bounds the UTF-8 bytes of JSON.stringify of what it accepts (property)', () => {
  // Strings of any UTF-16 units (control characters, quotes, backslashes, emoji); doubles of every magnitude.
  const value = fc.jsonValue({ maxDepth: 6 });
  const units = fc.string({ unit: 'binary', maxLength: 30 }).filter((text) => unstorableString(text) === undefined);
  const anything = fc.oneof(
    value,
    fc.dictionary(units, fc.oneof(units, fc.double({ noNaN: true, noDefaultInfinity: true }), value)),
  );
  fc.assert(
    fc.property(anything, (input) => {
      assert.ok(boundOf(input) >= Buffer.byteLength(JSON.stringify(input)), JSON.stringify(input));
    }),
    { numRuns: 2000, seed: 9 },
  );
});

test('the bound holds at the longest texts JSON writes for a number and for a string', () => {
  // 17 significant digits written out down to 10^-6, and one character escaped as \uXXXX, repeated.
  for (const value of [
    -0.0000012345678901234567,
    -1.7976931348623157e308,
    [-0.0000019414387427189233, -1.2345678901234568e21],
    { '\u0001\u001f': '\u0001'.repeat(50) },
    '"\\'.repeat(20),
    '\u{1F600}é€'.repeat(20),
  ])
    assert.ok(boundOf(value) >= Buffer.byteLength(JSON.stringify(value)), JSON.stringify(value));
});
