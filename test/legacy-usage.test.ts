// Legacy usage is counted in memory and written by a timer; a read must still see every use made before it,
// also while the timer's write is in flight (a race seen under load: the read found the counts already taken
// out of memory and read the table before the write had landed).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adminHeaders, bearer, createTestApp, type TestContext } from './helpers.js';

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp({ legacyFlat: 'accept' });
});
after(async () => ctx.close());

describe('legacy usage reads', () => {
  it('a read while a flush is still writing waits for that write', async () => {
    const p = await ctx.product('legacy-race');
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: { subject_type: 'user', subject_id: 'u', event_type: 'user_signed_up' },
    });
    assert.equal(res.statusCode, 201, res.body);

    // Hold the storage write of the first flush; note whether the table is read while it is held.
    const store = ctx.services.storage.legacyUsage;
    const record = store.record.bind(store);
    const list = store.list.bind(store);
    let held = true;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let writing!: () => void;
    const writeStarted = new Promise<void>((resolve) => (writing = resolve));
    const readWhileHeld: boolean[] = [];
    store.record = async (increments) => {
      writing();
      await gate;
      await record(increments);
    };
    store.list = async (productId) => {
      readWhileHeld.push(held);
      return list(productId);
    };
    try {
      const first = ctx.services.ingest.legacyUsage(p.id); // takes the counts out of memory, then waits in record()
      await writeStarted;
      const second = ctx.app.inject({
        method: 'GET',
        url: `/admin/v1/products/${p.id}/legacy_usage`,
        headers: adminHeaders(),
      });
      // Time for a read that does not wait to reach the table (it must not).
      await new Promise((resolve) => setTimeout(resolve, 50));
      held = false;
      release();
      await first;
      const answer = await second;
      assert.equal(answer.statusCode, 200, answer.body);
      const rows = answer.json().data as Array<{ event_name: string; count: number }>;
      assert.deepEqual(
        rows.map((r) => [r.event_name, r.count]),
        [['user_signed_up', 1]],
      );
      assert.deepEqual(readWhileHeld, [false, false], 'no read of the table while a flush was still writing');
    } finally {
      store.record = record;
      store.list = list;
      release();
    }
  });
});
