// A destination's transformation on stored messages (domain/transform-stored.ts): a stored event becomes the same
// document its item was at ingest, a kept document the event the destination receives, and an identity message's
// identifiers follow the traits of their names, so a value masked in the traits never reaches it as an identifier.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { documentOfUser, eventPartsOf, userAfter } from '../../src/domain/transform-stored.js';
import { documentFrom, type DocumentParts } from '../../src/domain/transform-document.js';

const stored: DocumentParts = {
  canonicalName: 'user_identified',
  eventType: 'user',
  action: 'identified',
  subjectType: 'user',
  subjectId: 'u1',
  occurredAt: '2026-11-28T10:00:00.000Z',
  source: 'segment',
  properties: { email: 'a@x.io' },
  context: null,
  original: { type: 'identify', userId: 'u1' },
};

describe('transform-stored', () => {
  it('a stored Segment identify is an identify document: its properties are the traits; no context is {}', () => {
    const document = documentFrom(stored);
    assert.equal(document.type, 'identify');
    assert.deepEqual(document.traits, { email: 'a@x.io' });
    assert.deepEqual(document.properties, {});
    assert.deepEqual(document.context, {});
    assert.equal(document.source, 'segment');
  });

  it('a native event is an `event` document; back to an event, an empty context stays null unless it had one', () => {
    const document = documentFrom({ ...stored, original: null, properties: { n: 1 } });
    assert.equal(document.type, 'event');
    assert.deepEqual(document.properties, { n: 1 });
    assert.equal(eventPartsOf(document, false).context, null);
    assert.deepEqual(eventPartsOf(document, true).context, {});
    assert.deepEqual(eventPartsOf({ ...document, context: { ip: '1' } }, false).context, { ip: '1' });
  });

  const user = {
    externalId: 'ada',
    traits: { email: 'a@x.io', name: 'Ada' },
    identifiers: { email: 'a@x.io', crm: 'c1' },
  };
  const cases: Array<[string, Record<string, unknown>, Record<string, string>]> = [
    ['unchanged traits keep every identifier', { email: 'a@x.io', name: 'Ada' }, { email: 'a@x.io', crm: 'c1' }],
    ['a redacted trait drops its identifier', { email: '[redacted]', name: 'Ada' }, { crm: 'c1' }],
    ['a hashed trait makes the identifier the hash', { email: 'ab12', name: 'Ada' }, { email: 'ab12', crm: 'c1' }],
    ['a removed trait drops its identifier', { name: 'Ada' }, { crm: 'c1' }],
    ['a trait that is no longer a string drops it', { email: { a: 1 } }, { crm: 'c1' }],
  ];
  for (const [what, traits, identifiers] of cases)
    it(what, () => {
      const document = { ...documentOfUser('user.identified', user, '2026-11-28T10:00:00.000Z'), traits };
      assert.deepEqual(userAfter(user, document), { traits, identifiers });
    });

  it('an identifier that holds another value than the trait of its name is kept as it is', () => {
    const other = { ...user, traits: { email: 'home@x.io' }, identifiers: { email: 'work@x.io' } };
    const document = {
      ...documentOfUser('user.identified', other, '2026-11-28T10:00:00.000Z'),
      traits: { email: 'ab12' },
    };
    assert.deepEqual(userAfter(other, document).identifiers, { email: 'work@x.io' });
    // E-mail addresses compare as identifiers do: trimmed and lower-cased.
    const cased = { ...user, traits: { email: ' A@X.io' } };
    const hashed = {
      ...documentOfUser('user.identified', cased, '2026-11-28T10:00:00.000Z'),
      traits: { email: 'ab12' },
    };
    assert.deepEqual(userAfter(cased, hashed).identifiers, { email: 'ab12', crm: 'c1' });
  });

  it('user.merged is a user_merged identify document of the user merged into', () => {
    const document = documentOfUser('user.merged', user, '2026-11-28T10:00:00.000Z');
    assert.deepEqual([document.type, document.event, document.subject_id], ['identify', 'user_merged', 'ada']);
  });
});
