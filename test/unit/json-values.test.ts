// The two guards that let Inlet refuse or record hostile JSON without crashing (issue 9).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { jsonNestsDeeperThan, storableText, unstorableString } from '../../src/domain/json-values.js';

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
