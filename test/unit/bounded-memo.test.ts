import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { boundedMemo } from '../../src/domain/bounded-memo.js';

describe('boundedMemo', () => {
  it('makes each value once, undefined ones too, and starts over once it holds its limit', () => {
    const made: string[] = [];
    const memo = boundedMemo(2, (key: string) => {
      made.push(key);
      return key === 'none' ? undefined : key.toUpperCase();
    });
    assert.equal(memo('a'), 'A');
    assert.equal(memo('a'), 'A');
    assert.equal(memo('none'), undefined);
    assert.equal(memo('none'), undefined);
    assert.deepEqual(made, ['a', 'none']);
    // Full: the third key empties the memo, so 'a' is made again afterwards.
    assert.equal(memo('b'), 'B');
    assert.equal(memo('a'), 'A');
    assert.deepEqual(made, ['a', 'none', 'b', 'a']);
  });
});
