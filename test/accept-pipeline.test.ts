// The one accept pipeline (STYLE "Where Inlet stands" 1): per-item outcomes in order, legacy policy
// applied once, every item counted exactly once in inlet_events_total, the source scopes external ids.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AppError } from '../src/domain/errors.js';
import { draftV2 } from '../src/domain/events.js';
import type { Candidate } from '../src/services/ingest/service.js';
import { createTestApp, type TestContext } from './helpers.js';

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp({ legacyFlat: 'reject' });
});
after(async () => ctx.close());

const at = '2026-11-01T00:00:00.000Z';
function candidate(input: Record<string, unknown>): Candidate {
  const result = draftV2({ subject_type: 'user', subject_id: 'u1', ...input } as never, at);
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result;
}

async function counter(labels: Record<string, string>): Promise<number> {
  const metric = await ctx.services.metrics.events.get();
  const sample = metric.values.find((v) =>
    Object.entries(labels).every(
      ([k, value]) => (v.labels as Record<string, string | number | undefined>)[k] === value,
    ),
  );
  return sample?.value ?? 0;
}

describe('accept', () => {
  it('answers each item in order: created, duplicate, rejected (given and by the legacy policy), and counts each once', async () => {
    const product = await ctx.product('accept');
    const auth = await ctx.services.keys.authenticate(`Bearer ${product.eventsKey}`, 'events');
    const refused: Candidate = { ok: false, error: new AppError('validation_error', 'bad') };
    const items = [
      candidate({ event_type: 'project', action: 'created', external_id: 'a' }),
      candidate({ event_type: 'project', action: 'created', external_id: 'a' }),
      refused,
      candidate({ event_type: 'user_signed_up' }),
    ];
    const before = {
      created: await counter({ endpoint: 'test', outcome: 'created' }),
      rejected: await counter({ endpoint: 'test', outcome: 'rejected' }),
    };
    const { outcomes, legacySeen } = await ctx.services.ingest.accept(auth, items, {
      endpoint: 'test',
      receivedAt: at,
    });
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['created', 'duplicate', 'rejected', 'rejected'],
    );
    assert.equal(legacySeen, true);
    const legacy = outcomes[3]!;
    assert.ok(legacy.status === 'rejected' && legacy.error.code === 'legacy_format_removed');
    assert.equal((await counter({ endpoint: 'test', outcome: 'created' })) - before.created, 1);
    assert.equal(await counter({ endpoint: 'test', format: 'preferred', outcome: 'duplicate' }), 1);
    assert.equal(await counter({ endpoint: 'test', outcome: 'rejected', format: 'unknown' }), 1);
    assert.equal(await counter({ endpoint: 'test', outcome: 'rejected', format: 'legacy' }), 1);
  });

  it('scopes external ids by source: the same id under another source is a new event', async () => {
    const product = await ctx.product('accept-source');
    const auth = await ctx.services.keys.authenticate(`Bearer ${product.eventsKey}`, 'events');
    const item = () => candidate({ event_type: 'page', action: 'viewed', external_id: 'same' });
    const first = await ctx.services.ingest.accept(auth, [item()], { endpoint: 'test', receivedAt: at });
    const other = await ctx.services.ingest.accept(auth, [item()], {
      endpoint: 'test',
      receivedAt: at,
      source: 'segment',
    });
    const again = await ctx.services.ingest.accept(auth, [item()], {
      endpoint: 'test',
      receivedAt: at,
      source: 'segment',
    });
    assert.deepEqual(
      [first, other, again].map((r) => r.outcomes[0]!.status),
      ['created', 'created', 'duplicate'],
    );
  });
});
