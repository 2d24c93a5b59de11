// The buffer behind rejections and plan violations (services/capped-recorder.ts): the per-product hourly
// cap (past it only counted, clarifications §20), a failed flush that keeps its rows and counts for the
// next one, the memory bound while storage is away, and the retention sweep.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createCappedRecorder, MAX_PENDING, type HourCount } from '../../src/services/capped-recorder.js';

interface Row {
  id: number;
  productId: string;
  receivedAt: string;
}

function harness(maxPerHour: number) {
  const stored: Row[] = [];
  const counts: HourCount[] = [];
  const sweeps: string[] = [];
  let failing = false;
  const recorder = createCappedRecorder<Row>({
    maxPerHour,
    retentionDays: 14,
    now: () => Date.parse('2026-11-23T12:00:00Z'),
    insert: async (rows) => {
      if (failing) throw new Error('connection refused');
      stored.push(...rows);
    },
    addUnrecorded: async (rows) => {
      if (failing) throw new Error('connection refused');
      counts.push(...rows.map((r) => ({ ...r })));
    },
    deleteOlderThan: async (at) => sweeps.push(at),
  });
  let id = 0;
  const record = (productId: string, receivedAt = '2026-11-23T12:00:00.000Z') => {
    if (recorder.admit(productId, receivedAt)) recorder.push({ id: id++, productId, receivedAt });
  };
  return { recorder, stored, counts, sweeps, record, fail: (on: boolean) => (failing = on) };
}

const total = (counts: HourCount[], productId: string) =>
  counts.filter((c) => c.productId === productId).reduce((sum, c) => sum + c.count, 0);

describe('capped recorder', () => {
  it('records up to the hourly cap per product, counts the rest, and starts again the next hour', async () => {
    const h = harness(3);
    for (let i = 0; i < 5; i++) h.record('a');
    h.record('b');
    h.record('a', '2026-11-23T13:00:00.000Z');
    await h.recorder.flush();
    assert.deepEqual(
      h.stored.map((r) => r.productId),
      ['a', 'a', 'a', 'b', 'a'],
    );
    assert.deepEqual(h.counts, [{ productId: 'a', hour: '2026-11-23T12', count: 2 }]);
    assert.deepEqual(h.sweeps, ['2026-11-09T12:00:00.000Z'], 'the first flush sweeps what is older than the retention');
  });

  it('a failed flush keeps its rows and counts; the next flush writes them once, in order', async () => {
    const h = harness(2);
    h.record('a');
    h.record('a');
    h.record('a'); // counted
    h.fail(true);
    await assert.rejects(h.recorder.flush(), /connection refused/);
    h.record('b'); // arrives while storage is away
    await assert.rejects(h.recorder.flush(), /connection refused/);
    h.fail(false);
    await h.recorder.flush();
    assert.deepEqual(
      h.stored.map((r) => r.id),
      [0, 1, 2],
    );
    assert.equal(total(h.counts, 'a'), 1);
  });

  it('while storage is away at most MAX_PENDING rows wait; older ones are counted, never silently dropped', async () => {
    const h = harness(Number.MAX_SAFE_INTEGER);
    h.fail(true);
    for (let i = 0; i < MAX_PENDING + 25; i++) h.record('a');
    await assert.rejects(h.recorder.flush());
    h.fail(false);
    await h.recorder.flush();
    assert.equal(h.stored.length, MAX_PENDING);
    assert.equal(h.stored[0]!.id, 25, 'the newest are kept');
    assert.equal(total(h.counts, 'a'), 25);
  });
});
