// The erasure job's event batches at the storage level (storage/erasure-store.ts, deleteEvents), on the backend
// under test: a person with several ids, each with more events than a batch. The job (services/erasure/jobs.ts)
// stops at the first batch smaller than its limit, so a batch may be short only when every id is done: on
// PostgreSQL each id is read on its own in the subject index's order, and the next id fills the rest of a batch.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { eventRow } from './event-rows.js';
import { createTestApp, eventProduct, type TestContext } from './helpers.js';

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp();
});
after(async () => ctx.close());

const event = (productId: string, subjectId: string, externalId: string) =>
  eventRow(productId, externalId, { subjectId });

async function subjectsLeft(productId: string): Promise<Record<string, number>> {
  const rows = await ctx.services.storage.db
    .selectFrom('events')
    .select(['subject_id'])
    .where('product_id', '=', eventProduct(productId))
    .execute();
  const counts: Record<string, number> = {};
  for (const row of rows) counts[row.subject_id] = (counts[row.subject_id] ?? 0) + 1;
  return counts;
}

describe('erasure: event batches of a person with several ids', () => {
  it('fills each batch across the ids, is short only when every id is done, and leaves everyone else', async () => {
    const product = await ctx.product('batches');
    const other = await ctx.product('other');
    const rows = [
      ...Array.from({ length: 7 }, (_, i) => event(product.id, 'alias-a', `a-${i}`)),
      ...Array.from({ length: 5 }, (_, i) => event(product.id, 'alias-b', `b-${i}`)),
      ...Array.from({ length: 3 }, (_, i) => event(product.id, 'bystander', `x-${i}`)),
      ...Array.from({ length: 4 }, (_, i) => event(other.id, 'alias-a', `o-${i}`)),
    ];
    await ctx.services.storage.events.insertMany(rows);

    const ids = ['alias-a', 'alias-b', 'alias-none'];
    const batches: number[] = [];
    for (;;) {
      const n = await ctx.services.storage.erasure.deleteEvents(product.id, ids, 4);
      batches.push(n);
      if (n < 4) break;
    }
    assert.deepEqual(batches, [4, 4, 4, 0], 'full batches of 4 across both ids (7 + 5 = 12), then an empty one');
    assert.deepEqual(
      await subjectsLeft(product.id),
      { bystander: 3 },
      'every event of the ids is gone, the others stay',
    );
    assert.deepEqual(await subjectsLeft(other.id), { 'alias-a': 4 }, 'the same id in another product is untouched');
  });
});
