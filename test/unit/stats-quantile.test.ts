// GET /admin/v1/stats reads commit latency percentiles from the histogram's buckets: the upper bound of the
// bucket that holds the rank, as Prometheus' histogram_quantile would without interpolation.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bucketQuantile } from '../../src/services/stats-service.js';

const buckets = [
  { le: 0.001, count: 50 },
  { le: 0.005, count: 90 },
  { le: 0.01, count: 99 },
  { le: 0.1, count: 100 },
];

describe('bucketQuantile', () => {
  const cases: Array<[string, number, number | null]> = [
    ['the median falls in the first bucket', 0.5, 0.001],
    ['0.51 needs the second', 0.51, 0.005],
    ['p99 is the third bucket (99 of 100 at or below 10 ms)', 0.99, 0.01],
    ['p100 is the last bucket', 1, 0.1],
  ];
  for (const [name, q, expected] of cases) {
    it(name, () => assert.equal(bucketQuantile({ count: 100, sum: 0.3, buckets }, q), expected));
  }

  it('is null with no observation', () => {
    assert.equal(bucketQuantile({ count: 0, sum: 0, buckets: buckets.map((b) => ({ ...b, count: 0 })) }, 0.5), null);
  });

  it('observations above every finite bucket answer the largest finite bound', () => {
    assert.equal(bucketQuantile({ count: 10, sum: 50, buckets: buckets.map((b) => ({ ...b, count: 0 })) }, 0.5), 0.1);
  });
});
