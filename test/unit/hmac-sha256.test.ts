// The HMAC-SHA256 of `mask` `hash` (src/domain/hmac-sha256.ts) gives what node:crypto gives, for any key and text:
// the hashes are what operators join on, so the faster path must not change one of them.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { HmacSha256 } from '../../src/domain/hmac-sha256.js';

function expected(key: Uint8Array, text: string): string {
  return createHmac('sha256', key).update(text, 'utf8').digest('hex');
}

describe('HmacSha256', () => {
  it('matches node:crypto at every padding boundary, for short and long keys', () => {
    for (const keyLength of [0, 1, 32, 63, 64, 65, 200]) {
      const key = Uint8Array.from({ length: keyLength }, (_, i) => (i * 37 + 11) & 0xff);
      const hmac = new HmacSha256(key);
      for (let length = 0; length <= 200; length++) {
        const text = 'a'.repeat(length);
        assert.equal(hmac.hex(text), expected(key, text), `key of ${keyLength} bytes, text of ${length}`);
        assert.equal(hmac.hex(text, true), expected(key, `"${text}"`), `the same between quotes`);
      }
    }
  });

  it('matches node:crypto on any text, multi-byte characters and texts past the scratch buffer included', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 100 }),
        fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'grapheme', minLength: 1400 })),
        (key, text) => {
          const hmac = new HmacSha256(key);
          assert.equal(hmac.hex(text), expected(key, text));
          assert.equal(hmac.hex(text), expected(key, text), 'the same again: no state is left from the last call');
          assert.equal(hmac.hex(text, true), expected(key, `"${text}"`), 'between quotes, without making the text');
        },
      ),
      { numRuns: 300 },
    );
  });

  it('gives the same hash for a text whose lone surrogate node:crypto also replaces', () => {
    const key = new Uint8Array([1, 2, 3]);
    assert.equal(new HmacSha256(key).hex('a\ud800b'), expected(key, 'a\ud800b'));
  });
});
