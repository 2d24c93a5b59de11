// The destination filter (events-out §6): types, canonical names and sources narrow what a destination gets,
// and `user.erased` passes every filter (governance §3: every destination receives it).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { matches } from '../../src/services/destinations/messages.js';
import type { EventRecord, StoredMessage } from '../../src/storage/types.js';

const event = { canonicalName: 'order_placed', source: 'api' } as EventRecord;
const created: StoredMessage = { kind: 'event', position: '1', event };
const identity = (type: 'user.identified' | 'user.merged' | 'user.erased'): StoredMessage => ({
  kind: 'identity',
  position: '2',
  id: 'idm_1',
  type,
  createdAt: '2026-11-24T00:00:00.000Z',
  data: {} as never,
});

describe('destination filter', () => {
  it('no filter: every message', () => {
    for (const m of [created, identity('user.identified'), identity('user.merged'), identity('user.erased')])
      assert.equal(matches({}, m), true);
  });

  it('types narrow events and identity messages', () => {
    assert.equal(matches({ types: ['user.merged'] }, created), false);
    assert.equal(matches({ types: ['event.created'] }, created), true);
    assert.equal(matches({ types: ['event.created'] }, identity('user.identified')), false);
    assert.equal(matches({ types: ['event.created'] }, identity('user.merged')), false);
    assert.equal(matches({ types: ['user.merged'] }, identity('user.merged')), true);
  });

  it('canonical names and sources narrow events only', () => {
    assert.equal(matches({ canonicalNames: ['other'] }, created), false);
    assert.equal(matches({ sources: ['segment'] }, created), false);
    assert.equal(matches({ canonicalNames: ['order_placed'], sources: ['api'] }, created), true);
    assert.equal(matches({ canonicalNames: ['other'], sources: ['segment'] }, identity('user.merged')), true);
  });

  it('user.erased passes every filter: the erasure notice reaches every destination', () => {
    assert.equal(matches({ types: ['event.created'] }, identity('user.erased')), true);
    assert.equal(
      matches({ types: ['user.identified'], canonicalNames: ['x'], sources: ['y'] }, identity('user.erased')),
      true,
    );
  });
});
