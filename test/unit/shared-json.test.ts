// Values shared between events (shared-json.ts): frozen all the way down, and an object holding them serialises,
// with their texts spliced in, to exactly what JSON.stringify writes.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { jsonWithShared, sharedJson, sharedText, stringText } from '../../src/domain/shared-json.js';

const text = fc.string({ unit: 'binary', maxLength: 20 });
const json = fc.jsonValue({ maxDepth: 3 });

describe('shared JSON values', () => {
  it("a string's text is JSON.stringify's, byte for byte (property)", () => {
    const awkward = fc.constantFrom('"', '\\', '\u0000', '\u001f', '\u007f', '\u2028', '\ud800', '\udfff', '😀', 'é');
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 40 }),
          fc.array(awkward).map((xs) => xs.join('')),
        ),
        (value) => {
          assert.equal(stringText(value), JSON.stringify(value));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('are frozen all the way down, with their JSON text', () => {
    const value = sharedJson({ a: { b: [1, { c: 'd' }] }, e: {} });
    assert.ok(Object.isFrozen(value) && Object.isFrozen(value.a.b[1]) && Object.isFrozen(value.e));
    assert.equal(sharedText(value), JSON.stringify(value));
    assert.equal(sharedText({ a: 1 }), undefined);
  });

  it('an object holding some serialises as JSON.stringify does; one holding none is left to it (property)', () => {
    fc.assert(
      fc.property(
        fc.dictionary(text, json),
        fc.dictionary(text, fc.dictionary(text, json)),
        fc.constantFrom(undefined, null, false, 1.5, 'é"\\\u0001\ud800'),
        (plain, toShare, odd) => {
          assert.equal(jsonWithShared(plain), undefined);
          const object: Record<string, unknown> = { ...plain, odd };
          for (const [key, value] of Object.entries(toShare)) object[key] = sharedJson(structuredClone(value));
          const expected = JSON.stringify(object);
          assert.equal(jsonWithShared(object) ?? expected, expected);
          if (Object.keys(toShare).length > 0) assert.notEqual(jsonWithShared(object), undefined);
        },
      ),
      { numRuns: 500, seed: 7 },
    );
  });

  it('leaves no comma for values JSON.stringify leaves out first, and keeps many distinct keys right', () => {
    const shared = sharedJson({ b: 1 });
    const object = { gone: undefined, fn: () => 1, ua: shared, after: undefined, last: 'x' };
    assert.equal(jsonWithShared(object), JSON.stringify(object));
    for (let i = 0; i < 3000; i++) {
      const many = { [`k${i}`]: i, [`"${i}`]: shared };
      assert.equal(jsonWithShared(many), JSON.stringify(many));
    }
  });
});
