// Contract §6 rules as pure functions: table-driven cases plus fast-check properties.
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  PLACEHOLDER_EXTERNAL_IDS,
  TRAITS_MAX_BYTES,
  applyIdentifiers,
  checkExternalId,
  decideMerge,
  identifyConflicts,
  mergeTraits,
  validateIdentifiers,
  validateTraits,
} from '../../src/domain/identity.js';

describe('checkExternalId', () => {
  const accepted: Array<[string, string]> = [
    ['plain id', 'user_42'],
    ['one character', 'a'],
    ['255 characters', 'x'.repeat(255)],
    ['looks like a placeholder but is not', 'nullable'],
    ['zero with more digits', '00'],
    ['minus two', '-2'],
    ['uuid that is not all zero', '00000000-0000-0000-0000-000000000001'],
    ['non-ASCII', 'ユーザー'],
    ['surrogate pair', 'user_😀'],
  ];
  for (const [name, value] of accepted) {
    it(`accepts ${name}`, () => assert.equal(checkExternalId(value, '/external_id'), undefined));
  }

  const rejected: Array<[string, unknown, RegExp]> = [
    ['empty', '', /empty/],
    ['blank', '   ', /placeholder/],
    ['256 characters', 'x'.repeat(256), /at most 255/],
    ['null', 'null', /placeholder/],
    ['NULL', 'NULL', /placeholder/],
    ['Undefined', 'Undefined', /placeholder/],
    ['anonymous', 'anonymous', /placeholder/],
    ['Guest padded', '  Guest ', /placeholder/],
    ['none', 'None', /placeholder/],
    ['nil', 'NIL', /placeholder/],
    ['0', '0', /placeholder/],
    ['-1', ' -1', /placeholder/],
    ['all-zero UUID', '00000000-0000-0000-0000-000000000000', /placeholder/],
    ['not a string', 42, /string/],
    ['NUL character', 'a\u0000b', /NUL/],
    ['lone surrogate', 'a\uD800b', /surrogate/],
  ];
  for (const [name, value, message] of rejected) {
    it(`rejects ${name}`, () => {
      const error = checkExternalId(value, '/external_id');
      assert.ok(error, `expected ${JSON.stringify(value)} to be rejected`);
      assert.equal(error.pointer, '/external_id');
      assert.match(error.message, message);
    });
  }

  it('rejects every placeholder in any letter case with any surrounding whitespace', () => {
    const whitespace = fc.string({ unit: fc.constantFrom(' ', '\t', '\n'), maxLength: 3 });
    fc.assert(
      fc.property(
        fc.constantFrom(...PLACEHOLDER_EXTERNAL_IDS),
        fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
        whitespace,
        whitespace,
        (placeholder, upper, before, after) => {
          const cased = [...placeholder].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join('');
          assert.ok(checkExternalId(`${before}${cased}${after}`, '/x'));
        },
      ),
    );
  });
});

describe('validateIdentifiers', () => {
  it('lower-cases and trims email, keeps other kinds exactly', () => {
    const result = validateIdentifiers({ email: '  Ada@Example.COM ', stripe_id: ' Cus_ABC ' });
    assert.deepEqual(result, { ok: true, value: { email: 'ada@example.com', stripe_id: ' Cus_ABC ' } });
  });

  it('passes null through as a removal', () => {
    assert.deepEqual(validateIdentifiers({ email: null }), { ok: true, value: { email: null } });
  });

  it('accepts 20 kinds, a 64-character kind and a 512-character value', () => {
    const twenty = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, 'v']));
    assert.equal(validateIdentifiers(twenty).ok, true);
    assert.equal(validateIdentifiers({ ['k'.repeat(64)]: 'v'.repeat(512) }).ok, true);
  });

  const rejected: Array<[string, unknown, string, RegExp]> = [
    ['not an object', ['a'], '/identifiers', /object/],
    [
      '21 kinds',
      Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, 'v'])),
      '/identifiers',
      /at most 20/,
    ],
    ['upper-case kind', { Email: 'a@b.c' }, '/identifiers/Email', /must match/],
    ['kind starting with a digit', { '1d': 'x' }, '/identifiers/1d', /must match/],
    ['kind with a slash (pointer escaped)', { 'a/b': 'x' }, '/identifiers/a~1b', /must match/],
    ['65-character kind', { ['k'.repeat(65)]: 'x' }, `/identifiers/${'k'.repeat(65)}`, /at most 64/],
    ['empty value', { email: '' }, '/identifiers/email', /empty/],
    ['blank email', { email: '   ' }, '/identifiers/email', /blank/],
    ['513-character value', { crm: 'v'.repeat(513) }, '/identifiers/crm', /at most 512/],
    ['number value', { crm: 7 }, '/identifiers/crm', /string/],
    ['NUL in value', { crm: 'a\u0000' }, '/identifiers/crm', /NUL/],
  ];
  for (const [name, input, pointer, message] of rejected) {
    it(`rejects ${name}`, () => {
      const result = validateIdentifiers(input);
      assert.equal(result.ok, false);
      if (result.ok) return;
      assert.equal(result.errors[0]?.pointer, pointer);
      assert.match(result.errors[0]!.message, message);
    });
  }

  it('normalizes email idempotently and compares other kinds exactly (property)', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 40 }).filter((s) => s.trim() !== ''),
        (value) => {
          const once = validateIdentifiers({ email: value, other: value });
          if (!once.ok) return; // NUL or lone surrogates: refused, covered above
          const email = once.value.email!;
          assert.equal(email, value.trim().toLowerCase());
          assert.deepEqual(validateIdentifiers({ email }), { ok: true, value: { email } });
          assert.equal(once.value.other, value);
        },
      ),
    );
  });
});

describe('validateTraits', () => {
  it('accepts exactly 32 KiB of JSON and rejects one byte more', () => {
    const overhead = JSON.stringify({ t: '' }).length;
    assert.equal(validateTraits({ t: 'x'.repeat(TRAITS_MAX_BYTES - overhead) }).ok, true);
    const over = validateTraits({ t: 'x'.repeat(TRAITS_MAX_BYTES - overhead + 1) });
    assert.equal(over.ok, false);
    if (!over.ok) assert.match(over.errors[0]!.message, /at most 32768 bytes/);
  });

  it('counts UTF-8 bytes, not characters', () => {
    const overhead = JSON.stringify({ t: '' }).length;
    assert.equal(validateTraits({ t: 'é'.repeat((TRAITS_MAX_BYTES - overhead) / 2 + 1) }).ok, false);
  });

  it('rejects arrays and null', () => {
    assert.equal(validateTraits([]).ok, false);
    assert.equal(validateTraits(null).ok, false);
  });

  it('refuses values that would not be stored as sent, naming each one (as for event properties)', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100; i++) deep = { a: deep };
    const cases: Array<[unknown, string, RegExp]> = [
      [{ name: 'a\u0000b' }, '/traits/name', /NUL/],
      [{ big: Infinity }, '/traits/big', /finite/],
      [{ deep }, '/traits/deep', /nested more than 64/],
    ];
    for (const [traits, pointer, message] of cases) {
      const result = validateTraits(traits);
      assert.equal(result.ok, false, pointer);
      if (!result.ok) {
        assert.ok(
          result.errors.some((e) => e.pointer.startsWith(pointer) && message.test(e.message)),
          JSON.stringify(result.errors),
        );
      }
    }
    assert.equal(validateTraits({ plan: 'pro', seats: 3, tags: ['a'], nested: { ok: true } }).ok, true);
  });
});

const traitValue = fc.oneof(fc.string({ maxLength: 5 }), fc.integer(), fc.boolean(), fc.constant(null));
const traitKey = fc.constantFrom('plan', 'name', 'age', 'seats', 'country', 'beta');
const storedTraits = fc.dictionary(
  traitKey,
  traitValue.filter((v) => v !== null),
);
const traitPatch = fc.dictionary(traitKey, traitValue);

describe('mergeTraits', () => {
  it('is a shallow merge where the patch wins and null removes (property)', () => {
    fc.assert(
      fc.property(storedTraits, traitPatch, (stored, patch) => {
        const merged = mergeTraits(stored, patch);
        for (const [key, value] of Object.entries(patch)) {
          if (value === null) assert.equal(key in merged, false);
          else assert.deepEqual(merged[key], value);
        }
        for (const [key, value] of Object.entries(stored)) {
          if (!(key in patch)) assert.deepEqual(merged[key], value);
        }
        for (const key of Object.keys(merged)) assert.ok(key in stored || key in patch);
        assert.equal(Object.values(merged).includes(null), false);
      }),
    );
  });

  it('does not change its inputs', () => {
    const stored = { plan: 'free', name: 'Ada' };
    mergeTraits(stored, { plan: null, seats: 3 });
    assert.deepEqual(stored, { plan: 'free', name: 'Ada' });
  });
});

describe('applyIdentifiers', () => {
  it('replaces a kind, removes with null, keeps the rest', () => {
    assert.deepEqual(applyIdentifiers({ email: 'a@x', crm: '1' }, { email: 'b@x', crm: null, stripe: 's' }), {
      email: 'b@x',
      stripe: 's',
    });
  });
});

describe('identifyConflicts', () => {
  it('reports identifiers held by another user, sorted by kind, and ignores the own and removed ones', () => {
    const holders = new Map([
      ['email\u0000a@x', 'other'],
      ['crm\u00001', 'me'],
      ['billing\u0000b', 'third'],
    ]);
    const conflicts = identifyConflicts(
      { email: 'a@x', crm: '1', billing: 'b', phone: null },
      (k, v) => holders.get(`${k}\u0000${v}`),
      'me',
    );
    assert.deepEqual(conflicts, [
      { kind: 'billing', value: 'b', externalId: 'third' },
      { kind: 'email', value: 'a@x', externalId: 'other' },
    ]);
  });
});

const identifierKind = fc.constantFrom('email', 'crm', 'stripe', 'phone');
const identifiers = fc.dictionary(identifierKind, fc.constantFrom('1', '2', '3'));
const state = (externalId: string) =>
  fc
    .record({ identifiers, traits: storedTraits })
    .map((s) => ({ externalId, identifiers: s.identifiers, traits: s.traits }));

describe('decideMerge', () => {
  it('unites identifiers, lets T win traits, and conflicts exactly when one kind has two values (property)', () => {
    fc.assert(
      fc.property(state('F'), state('T'), (from, into) => {
        const decision = decideMerge(from, into);
        const clashing = Object.keys(from.identifiers).filter(
          (kind) => into.identifiers[kind] !== undefined && into.identifiers[kind] !== from.identifiers[kind],
        );
        if (clashing.length > 0) {
          assert.equal(decision.status, 'identifier_conflict');
          if (decision.status !== 'identifier_conflict') return;
          assert.deepEqual([...new Set(decision.conflicts.map((c) => c.kind))].sort(), clashing.sort());
          for (const c of decision.conflicts) {
            const holder = c.externalId === 'F' ? from : into;
            assert.equal(holder.identifiers[c.kind], c.value);
          }
          return;
        }
        assert.equal(decision.status, 'merge');
        if (decision.status !== 'merge') return;
        assert.deepEqual(decision.identifiers, { ...from.identifiers, ...into.identifiers });
        for (const [kind, value] of Object.entries(from.identifiers)) assert.equal(decision.identifiers[kind], value);
        for (const [kind, value] of Object.entries(into.identifiers)) assert.equal(decision.identifiers[kind], value);
        for (const [key, value] of Object.entries(into.traits)) assert.deepEqual(decision.traits[key], value);
        for (const [key, value] of Object.entries(from.traits)) {
          if (!(key in into.traits)) assert.deepEqual(decision.traits[key], value);
        }
        assert.equal(
          Object.keys(decision.traits).length,
          new Set([...Object.keys(from.traits), ...Object.keys(into.traits)]).size,
        );
      }),
    );
  });

  it('table: T keeps its traits, F fills gaps', () => {
    const decision = decideMerge(
      { externalId: 'anon', identifiers: { device: 'd1' }, traits: { plan: 'free', utm: 'ad' } },
      { externalId: 'u1', identifiers: { email: 'a@x' }, traits: { plan: 'pro' } },
    );
    assert.deepEqual(decision, {
      status: 'merge',
      identifiers: { device: 'd1', email: 'a@x' },
      traits: { plan: 'pro', utm: 'ad' },
    });
  });

  it('table: a kind named like an Object.prototype member is an ordinary kind', () => {
    assert.deepEqual(
      decideMerge(
        { externalId: 'a', identifiers: { constructor: 'x' }, traits: {} },
        { externalId: 'b', identifiers: {}, traits: {} },
      ),
      {
        status: 'merge',
        identifiers: { constructor: 'x' },
        traits: {},
      },
    );
  });

  it('table: same value for a kind is no conflict; different values list both holders', () => {
    assert.equal(
      decideMerge(
        { externalId: 'a', identifiers: { email: 'x' }, traits: {} },
        { externalId: 'b', identifiers: { email: 'x' }, traits: {} },
      ).status,
      'merge',
    );
    assert.deepEqual(
      decideMerge(
        { externalId: 'a', identifiers: { email: 'x' }, traits: {} },
        { externalId: 'b', identifiers: { email: 'y' }, traits: {} },
      ),
      {
        status: 'identifier_conflict',
        conflicts: [
          { kind: 'email', value: 'x', externalId: 'a' },
          { kind: 'email', value: 'y', externalId: 'b' },
        ],
      },
    );
  });
});
