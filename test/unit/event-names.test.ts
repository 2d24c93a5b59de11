// Contract §4 "Name rules" and the RFC 3339 rule of §4 "Fields", as table-driven unit tests of the
// pure domain functions, plus fast-check properties of the name split.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { splitV1Name, splitV2Name, V1_EVENT_TYPES, type NameInput } from '../../src/domain/event-names.js';
import { parseRfc3339 } from '../../src/domain/timestamps.js';

const long = (n: number) => 'a'.repeat(n);

describe('splitV2Name: accepted names', () => {
  const cases: Array<{ input: NameInput; eventType: string; action: string; canonical: string; format: string }> = [
    // preferred: used as given
    {
      input: { event_type: 'project', action: 'created' },
      eventType: 'project',
      action: 'created',
      canonical: 'project_created',
      format: 'preferred',
    },
    {
      input: { event_type: 'billing', action: 'invoice_paid' },
      eventType: 'billing',
      action: 'invoice_paid',
      canonical: 'billing_invoice_paid',
      format: 'preferred',
    },
    {
      input: { event_type: 'project_board', action: 'created' },
      eventType: 'project_board',
      action: 'created',
      canonical: 'project_board_created',
      format: 'preferred',
    },
    {
      input: { event_type: 'a1', action: 'b2' },
      eventType: 'a1',
      action: 'b2',
      canonical: 'a1_b2',
      format: 'preferred',
    },
    {
      input: { event_type: long(64), action: long(64) },
      eventType: long(64),
      action: long(64),
      canonical: `${long(64)}_${long(64)}`,
      format: 'preferred',
    },
    // unified: split at the leftmost of . : _
    {
      input: { event: 'billing.invoice_paid' },
      eventType: 'billing',
      action: 'invoice_paid',
      canonical: 'billing_invoice_paid',
      format: 'unified',
    },
    {
      input: { event: 'project:created' },
      eventType: 'project',
      action: 'created',
      canonical: 'project_created',
      format: 'unified',
    },
    {
      input: { event: 'project.created' },
      eventType: 'project',
      action: 'created',
      canonical: 'project_created',
      format: 'unified',
    },
    {
      input: { event: 'user_signed_up' },
      eventType: 'user',
      action: 'signed_up',
      canonical: 'user_signed_up',
      format: 'unified',
    },
    {
      input: { event: 'user:signed_up' },
      eventType: 'user',
      action: 'signed_up',
      canonical: 'user_signed_up',
      format: 'unified',
    },
    {
      input: { event: `${long(64)}.${long(64)}` },
      eventType: long(64),
      action: long(64),
      canonical: `${long(64)}_${long(64)}`,
      format: 'unified',
    },
    // legacy flat: split at the first underscore, canonical_name is the original value
    {
      input: { event_type: 'user_signed_up' },
      eventType: 'user',
      action: 'signed_up',
      canonical: 'user_signed_up',
      format: 'legacy',
    },
    {
      input: { event_type: 'billing_invoice_paid' },
      eventType: 'billing',
      action: 'invoice_paid',
      canonical: 'billing_invoice_paid',
      format: 'legacy',
    },
    {
      input: { event_type: `${long(31)}_${long(32)}` },
      eventType: long(31),
      action: long(32),
      canonical: `${long(31)}_${long(32)}`,
      format: 'legacy',
    },
  ];
  for (const c of cases) {
    it(`${JSON.stringify(c.input)} → ${c.eventType} / ${c.action} (${c.format})`, () => {
      const result = splitV2Name(c.input);
      assert.ok(result.ok, JSON.stringify(result));
      assert.deepEqual(result.name, {
        eventType: c.eventType,
        action: c.action,
        canonicalName: c.canonical,
        nameFormat: c.format,
      });
    });
  }
});

describe('splitV2Name: rejected names', () => {
  const cases: Array<{ why: string; input: NameInput; pointer: string }> = [
    {
      why: 'project_board.created: the action half "board.created" breaks the pattern',
      input: { event: 'project_board.created' },
      pointer: '/event',
    },
    { why: 'unified without separator', input: { event: 'signup' }, pointer: '/event' },
    { why: 'unified with empty type half', input: { event: '.created' }, pointer: '/event' },
    { why: 'unified with empty action half', input: { event: 'project.' }, pointer: '/event' },
    { why: 'unified with upper case', input: { event: 'Project.created' }, pointer: '/event' },
    { why: 'unified type half starting with a digit', input: { event: '1project.created' }, pointer: '/event' },
    { why: 'unified action with a hyphen', input: { event: 'project.was-created' }, pointer: '/event' },
    { why: 'unified action half over 64 characters', input: { event: `project.${long(65)}` }, pointer: '/event' },
    { why: 'unified type half over 64 characters', input: { event: `${long(65)}.created` }, pointer: '/event' },
    {
      why: 'event together with event_type',
      input: { event: 'project.created', event_type: 'project' },
      pointer: '/event',
    },
    { why: 'event together with action', input: { event: 'project.created', action: 'created' }, pointer: '/event' },
    { why: 'action without event_type', input: { action: 'created' }, pointer: '/event_type' },
    { why: 'no name at all', input: {}, pointer: '/event_type' },
    {
      why: 'preferred event_type over 64 characters',
      input: { event_type: long(65), action: 'created' },
      pointer: '/event_type',
    },
    {
      why: 'preferred action over 64 characters',
      input: { event_type: 'project', action: long(65) },
      pointer: '/action',
    },
    {
      why: 'preferred action breaking the pattern',
      input: { event_type: 'project', action: 'Created' },
      pointer: '/action',
    },
    {
      why: 'preferred event_type breaking the pattern',
      input: { event_type: 'project.x', action: 'created' },
      pointer: '/event_type',
    },
    { why: 'legacy flat without underscore', input: { event_type: 'signup' }, pointer: '/action' },
    {
      why: 'legacy flat ending in an underscore (empty action)',
      input: { event_type: 'user_' },
      pointer: '/event_type',
    },
    { why: 'legacy flat over 64 characters', input: { event_type: `user_${long(60)}` }, pointer: '/event_type' },
    { why: 'legacy flat breaking the pattern', input: { event_type: 'user_Signed' }, pointer: '/event_type' },
  ];
  for (const c of cases) {
    it(`rejects ${c.why}`, () => {
      const result = splitV2Name(c.input);
      assert.equal(result.ok, false, JSON.stringify(result));
      if (result.ok) return;
      assert.ok(result.errors.length > 0);
      assert.equal(result.errors[0]!.pointer, c.pointer);
      assert.ok(result.errors[0]!.message.length > 0);
    });
  }

  it('prefixes pointers with the batch element base', () => {
    const result = splitV2Name({ event: 'nope' }, '/events/3');
    assert.equal(result.ok, false);
    if (!result.ok) assert.equal(result.errors[0]!.pointer, '/events/3/event');
    const preferred = splitV2Name({ event_type: 'project', action: 'Bad' }, '/events/3');
    assert.equal(preferred.ok, false);
    if (!preferred.ok) assert.equal(preferred.errors[0]!.pointer, '/events/3/action');
  });
});

describe('splitV1Name', () => {
  const accepted: Array<[string, string, string]> = [
    ['user_signed_up', 'user', 'signed_up'],
    ['user_active', 'user', 'active'],
    ['session_start', 'session', 'start'],
    ['session_end', 'session', 'end'],
    ['user_deleted', 'user', 'deleted'],
  ];
  it('the closed list is exactly the five canonical types', () => {
    assert.deepEqual([...V1_EVENT_TYPES].sort(), accepted.map((a) => a[0]).sort());
  });
  for (const [flat, eventType, action] of accepted) {
    it(`${flat} → ${eventType} / ${action}, canonical_name the flat value`, () => {
      const result = splitV1Name(flat);
      assert.ok(result.ok);
      assert.deepEqual(result.name, { eventType, action, canonicalName: flat, nameFormat: 'v1' });
    });
  }
  for (const flat of [
    'project_created',
    'user_signed_in',
    'USER_SIGNED_UP',
    'user.signed_up',
    'user_signed_up ',
    '',
    'session',
  ]) {
    it(`rejects ${JSON.stringify(flat)} naming the allowed list`, () => {
      const result = splitV1Name(flat);
      assert.equal(result.ok, false);
      if (result.ok) return;
      assert.equal(result.errors[0]!.pointer, '/event_type');
      for (const allowed of V1_EVENT_TYPES) assert.match(result.errors[0]!.message, new RegExp(allowed));
    });
  }
});

describe('parseRfc3339', () => {
  const valid: Array<[string, string]> = [
    ['2026-03-01T12:00:00Z', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01t12:00:00z', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01T13:00:00+01:00', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01T06:30:00-05:30', '2026-03-01T12:00:00.000Z'],
    ['2026-03-01T00:30:00+01:00', '2026-02-28T23:30:00.000Z'],
    ['2026-12-31T23:30:00-01:00', '2027-01-01T00:30:00.000Z'],
    ['2026-03-01T12:00:00.1Z', '2026-03-01T12:00:00.100Z'],
    ['2026-03-01T12:00:00.12Z', '2026-03-01T12:00:00.120Z'],
    ['2026-03-01T12:00:00.123Z', '2026-03-01T12:00:00.123Z'],
    ['2026-03-01T12:00:00.123456789Z', '2026-03-01T12:00:00.123Z'],
    ['2026-03-01T12:00:00.123456789012Z', '2026-03-01T12:00:00.123Z'], // RFC 3339 sets no digit limit
    ['2026-03-01T12:00:00.999999+00:00', '2026-03-01T12:00:00.999Z'],
    ['2024-02-29T00:00:00Z', '2024-02-29T00:00:00.000Z'], // leap year
    ['2000-02-29T00:00:00Z', '2000-02-29T00:00:00.000Z'], // divisible by 400: leap
    ['2026-01-31T23:59:59Z', '2026-01-31T23:59:59.000Z'],
    ['0050-06-01T00:00:00Z', '0050-06-01T00:00:00.000Z'], // two-digit years are not shifted to 19xx
  ];
  for (const [input, expected] of valid) {
    it(`${input} → ${expected}`, () => assert.equal(parseRfc3339(input), expected));
  }
  const invalid = [
    '2026-02-30T00:00:00Z', // impossible date
    '2026-02-29T00:00:00Z', // not a leap year
    '1900-02-29T00:00:00Z', // divisible by 100 but not 400
    '2026-04-31T00:00:00Z',
    '2026-13-01T00:00:00Z',
    '2026-00-10T00:00:00Z',
    '2026-01-00T00:00:00Z',
    '2026-03-01T24:00:00Z',
    '2026-03-01T12:60:00Z',
    '2026-03-01T12:00:60Z',
    '2026-03-01T12:00:00', // no offset
    '2026-03-01T12:00:00+0100', // offset without colon
    '2026-03-01T12:00:00+24:00',
    '2026-03-01T12:00:00+01:60',
    '2026-03-01 12:00:00Z',
    '2026-03-01',
    '2026-03-01T12:00Z',
    '2026-03-01T12:00:00.Z',
    ' 2026-03-01T12:00:00Z',
    '1772366400',
    '',
  ];
  for (const input of invalid) {
    it(`rejects ${JSON.stringify(input)}`, () => assert.equal(parseRfc3339(input), undefined));
  }

  it('property: any instant printed with any whole-minute offset parses back to the same UTC millisecond', () => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('9999-01-01T00:00:00Z'), noInvalidDate: true }),
        fc.integer({ min: -(23 * 60 + 59), max: 23 * 60 + 59 }),
        (date, offset) => {
          const local = new Date(date.getTime() + offset * 60_000).toISOString().slice(0, 23);
          const sign = offset < 0 ? '-' : '+';
          const abs = Math.abs(offset);
          const text = `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
          assert.equal(parseRfc3339(text), date.toISOString());
        },
      ),
    );
  });
});

describe('name split properties', () => {
  const noUnderscore = fc.stringMatching(/^[a-z][a-z0-9]{0,63}$/);
  const withUnderscore = fc.stringMatching(/^[a-z][a-z0-9]{0,30}_[a-z0-9_]{0,31}$/);
  const name = fc.stringMatching(/^[a-z][a-z0-9_]{0,63}$/);

  it('unified "<type><sep><action>" and preferred give the same split and canonical name when the type has no underscore', () => {
    fc.assert(
      fc.property(noUnderscore, name, fc.constantFrom('.', ':', '_'), (eventType, action, sep) => {
        const preferred = splitV2Name({ event_type: eventType, action });
        const unified = splitV2Name({ event: `${eventType}${sep}${action}` });
        assert.ok(preferred.ok && unified.ok);
        assert.equal(unified.name.eventType, preferred.name.eventType);
        assert.equal(unified.name.action, preferred.name.action);
        assert.equal(unified.name.canonicalName, preferred.name.canonicalName);
        assert.equal(preferred.name.canonicalName, `${eventType}_${action}`);
      }),
    );
  });

  it('a unified name never silently splits differently from the preferred form: it is the same or rejected', () => {
    fc.assert(
      fc.property(withUnderscore, name, fc.constantFrom('.', ':'), (eventType, action, sep) => {
        const unified = splitV2Name({ event: `${eventType}${sep}${action}` });
        assert.equal(unified.ok, false);
      }),
    );
  });

  it('legacy flat "<type>_<action>" splits like preferred and keeps the flat value as canonical name', () => {
    fc.assert(
      fc.property(noUnderscore, name, (eventType, action) => {
        fc.pre(eventType.length + 1 + action.length <= 64);
        const legacy = splitV2Name({ event_type: `${eventType}_${action}` });
        assert.ok(legacy.ok);
        assert.equal(legacy.name.nameFormat, 'legacy');
        assert.equal(legacy.name.eventType, eventType);
        assert.equal(legacy.name.action, action);
        assert.equal(legacy.name.canonicalName, `${eventType}_${action}`);
      }),
    );
  });

  it('every accepted split has halves that match the pattern and the 64-character limit', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 140 }), (event) => {
        const result = splitV2Name({ event });
        if (!result.ok) return;
        for (const part of [result.name.eventType, result.name.action]) {
          assert.match(part, /^[a-z][a-z0-9_]*$/);
          assert.ok(part.length <= 64);
        }
      }),
    );
  });
});
