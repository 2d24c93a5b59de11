// The benches' median (bench/report.ts), on which their PASS and FAIL lines rest: with an even number of rounds,
// which the benches that alternate their variants' order run, it is the mean of the two middle values, not the
// upper one. And the order those benches run their variants in, round by round.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inRoundOrder, median } from '../../bench/report.js';

test('the median of an odd count is its middle value', () => {
  assert.equal(median([3]), 3);
  assert.equal(median([9, 1, 5]), 5);
});

test('the median of an even count is the mean of its two middle values', () => {
  assert.equal(median([36_673, 34_411, 32_315, 33_526]), (33_526 + 34_411) / 2);
  assert.equal(median([2, 1]), 1.5);
});

test('the values given are left as they were', () => {
  const rounds = [4, 1, 3, 2];
  median(rounds);
  assert.deepEqual(rounds, [4, 1, 3, 2]);
});

test('the variants alternate their order round by round, each first as often', () => {
  const variants = ['none', 'declarative', 'function'] as const;
  assert.deepEqual(inRoundOrder(variants, 0), ['none', 'declarative', 'function']);
  assert.deepEqual(inRoundOrder(variants, 1), ['function', 'declarative', 'none']);
  assert.deepEqual(inRoundOrder(variants, 2), inRoundOrder(variants, 0));
  assert.deepEqual(variants, ['none', 'declarative', 'function'], 'the list given is left as it was');
});
