// The batch route measures each event's JSON size (contract §7: one event at most 32 KiB) from its
// properties serialised once for storage; that must equal the size of the whole event's JSON.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { eventJsonBytes, type V2EventInput } from '../../src/domain/events.js';

const text = fc.string({ unit: 'binary', minLength: 1, maxLength: 40 });

const event = fc.record(
  {
    event: text,
    event_type: text,
    action: text,
    subject_type: fc.constantFrom('user', 'account', 'subscription'),
    subject_id: text,
    occurred_at: fc.constant('2026-03-01T12:00:00.123456+01:00'),
    properties: fc.dictionary(text, fc.jsonValue()),
    external_id: text,
  },
  { requiredKeys: ['subject_type', 'subject_id'] },
);

describe('eventJsonBytes', () => {
  it('equals the UTF-8 length of JSON.stringify(event) (property)', () => {
    fc.assert(
      fc.property(event, (input) => {
        const propertiesJson = JSON.stringify(input.properties ?? {});
        assert.equal(eventJsonBytes(input as V2EventInput, propertiesJson), Buffer.byteLength(JSON.stringify(input)));
      }),
      { numRuns: 500 },
    );
  });

  it('counts metadata like properties', () => {
    const input = { subject_type: 'user', subject_id: 'ü', event: 'a.b', metadata: { note: 'é'.repeat(10) } };
    assert.equal(eventJsonBytes(input, JSON.stringify(input.metadata)), Buffer.byteLength(JSON.stringify(input)));
  });
});
