// The checks the sandbox's thread runs on a call's JSON text before the host parses it (quickjs-function.ts):
// one search first, and the same answers as the two checks it stands for, whatever the text holds.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MAX_PROPERTY_DEPTH, storableJson } from '../../src/domain/json-values.js';
import { isPlain, textFlags } from '../../src/services/transformations/quickjs-function.js';

function expected(text: string) {
  return { plain: isPlain(text), storable: storableJson(text) };
}

const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

test('textFlags answers as isPlain and storableJson on texts with and without what they look for', () => {
  const texts = [
    '[{"properties":{"plan":"pro"}}]',
    '[{"properties":{"__proto__":{"admin":true}}}]',
    '[{"properties":{"constructor":{"prototype":{}}}}]',
    '[{"properties":{"note":"a constructor call"}}]',
    '[{"properties":{"\\u005f_proto__":1}}]',
    '[{"properties":{"nul":"a\\u0000b"}}]',
    '[{"properties":{"accent":"\\u00e9"}}]',
    '[{"properties":{"escaped":"\\ud83d\\ude00"}}]',
    '[{"properties":{"raw":"a\u0000b"}}]',
    '[{"properties":{"lone":"x\uD800"}}]',
    '[{"properties":{"pair":"😀"}}]',
    `[${nested(MAX_PROPERTY_DEPTH - 1)}]`,
    `[${nested(MAX_PROPERTY_DEPTH)}]`,
    `[{"__proto__":${nested(MAX_PROPERTY_DEPTH)}}]`,
    '[null,"transform threw","the returned event is larger than 10 bytes"]',
  ];
  for (const text of texts) assert.deepEqual(textFlags(text), expected(text), text);
  // Each of those answers occurs, so a check that always said true (or false) would fail here.
  const answers = new Set(texts.map((text) => JSON.stringify(textFlags(text))));
  assert.ok(answers.has('{"plain":true,"storable":true}'));
  assert.ok(answers.has('{"plain":true,"storable":false}'));
  assert.ok(answers.has('{"plain":false,"storable":true}'));
  assert.ok(answers.has('{"plain":false,"storable":false}'));
});

test('textFlags agrees with isPlain and storableJson on any JSON text', () => {
  const key = fc.oneof(fc.string(), fc.constantFrom('__proto__', 'constructor', 'plan', '\u0000', '\uD800'));
  const value = fc.letrec((tie) => ({
    node: fc.oneof(
      { depthSize: 'small' },
      fc.string(),
      fc.constantFrom('constructor', '\u0000', '\uDC00', 'é', '😀'),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
      fc.array(tie('node'), { maxLength: 4 }),
      fc.dictionary(key, tie('node'), { maxKeys: 4 }),
    ),
  })).node;
  fc.assert(
    fc.property(fc.array(value, { maxLength: 4 }), (items) => {
      const text = JSON.stringify(items);
      assert.deepEqual(textFlags(text), expected(text));
    }),
    { numRuns: 2000, seed: 33 },
  );
});
