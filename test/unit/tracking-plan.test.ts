// The pure parts of governance.md §1–2: compiling a plan (pointers into the plan), checking items
// (modes, unplanned, pointers relative to the checked object, never values), the catalogue's path walk,
// and the draft — with a fast-check property: a draft validates every object it was drawn from.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  checkEvent,
  checkTraits,
  compilePlan,
  draftPlan,
  escapePointerToken,
  MAX_ITEM_ERRORS,
  type CompiledPlan,
} from '../../src/domain/tracking-plan.js';
import { jsonType, walkPaths } from '../../src/services/catalog-service.js';

function compiled(document: unknown): CompiledPlan {
  const result = compilePlan(document, 1);
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.plan;
}

const schema = {
  type: 'object',
  properties: { plan: { type: 'string' }, 'a/b': { type: 'integer' } },
  required: ['plan'],
};

describe('checkEvent', () => {
  const cases: Array<{
    name: string;
    plan: unknown;
    event: string;
    properties: Record<string, unknown>;
    expect: undefined | { code: string; severity: string; pointers: string[] };
  }> = [
    {
      name: 'valid in enforce',
      plan: { mode: 'enforce', events: { e: { properties: schema } } },
      event: 'e',
      properties: { plan: 'pro' },
      expect: undefined,
    },
    {
      name: 'wrong type in enforce',
      plan: { mode: 'enforce', events: { e: { properties: schema } } },
      event: 'e',
      properties: { plan: 7 },
      expect: { code: 'tracking_plan_violation', severity: 'rejected', pointers: ['/plan'] },
    },
    {
      name: 'missing required points at the property',
      plan: { mode: 'warn', events: { e: { properties: schema } } },
      event: 'e',
      properties: {},
      expect: { code: 'tracking_plan_violation', severity: 'warning', pointers: ['/plan'] },
    },
    {
      name: 'pointer tokens are escaped',
      plan: { mode: 'warn', events: { e: { properties: schema } } },
      event: 'e',
      properties: { plan: 'x', 'a/b': 'y' },
      expect: { code: 'tracking_plan_violation', severity: 'warning', pointers: ['/a~1b'] },
    },
    {
      name: 'event mode wins over the plan',
      plan: { mode: 'enforce', events: { e: { properties: schema, mode: 'warn' } } },
      event: 'e',
      properties: {},
      expect: { code: 'tracking_plan_violation', severity: 'warning', pointers: ['/plan'] },
    },
    {
      name: 'event mode off',
      plan: { mode: 'enforce', events: { e: { properties: schema, mode: 'off' } } },
      event: 'e',
      properties: {},
      expect: undefined,
    },
    {
      name: 'plan off checks nothing',
      plan: { mode: 'off', unplanned: 'reject', events: { e: { properties: schema, mode: 'enforce' } } },
      event: 'x',
      properties: {},
      expect: undefined,
    },
    { name: 'unplanned allow (default)', plan: { mode: 'enforce' }, event: 'x', properties: {}, expect: undefined },
    {
      name: 'unplanned warn',
      plan: { mode: 'enforce', unplanned: 'warn' },
      event: 'x',
      properties: {},
      expect: { code: 'unplanned_event', severity: 'warning', pointers: [''] },
    },
    {
      name: 'unplanned reject',
      plan: { mode: 'warn', unplanned: 'reject' },
      event: 'x',
      properties: {},
      expect: { code: 'unplanned_event', severity: 'rejected', pointers: [''] },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const finding = checkEvent(compiled(c.plan), c.event, c.properties);
      if (c.expect === undefined) return assert.equal(finding, undefined);
      assert.equal(finding?.code, c.expect.code);
      assert.equal(finding?.severity, c.expect.severity);
      assert.deepEqual(
        finding?.errors.map((e) => e.pointer),
        c.expect.pointers,
      );
    });
  }

  it('never quotes a value and caps the errors', () => {
    const plan = compiled({
      mode: 'warn',
      events: { e: { properties: { type: 'object', additionalProperties: { type: 'integer', const: 1 } } } },
    });
    const properties = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`p${i}`, `secret-${i}`]));
    const finding = checkEvent(plan, 'e', properties)!;
    assert.equal(finding.errors.length, MAX_ITEM_ERRORS);
    assert.ok(!JSON.stringify(finding).includes('secret-'));
  });

  it('checks traits against the traits schema only', () => {
    const plan = compiled({
      mode: 'enforce',
      unplanned: 'reject',
      traits: { type: 'object', properties: { email: { type: 'string', format: 'email' } } },
    });
    assert.equal(checkTraits(plan, { email: 'a@example.com' }), undefined);
    assert.deepEqual(
      checkTraits(plan, { email: 'nope' })?.errors.map((e) => e.pointer),
      ['/email'],
    );
    assert.equal(checkTraits(compiled({ mode: 'enforce' }), { email: 1 }), undefined);
  });
});

describe('compilePlan', () => {
  it('points into the plan at what is wrong', () => {
    const cases: Array<[unknown, string]> = [
      [{}, '/mode'],
      [{ mode: 'warn', extra: 1 }, '/extra'],
      [{ mode: 'warn', events: { e: { properties: { type: 'strin' } } } }, '/events/e/properties/type'],
      [
        { mode: 'warn', events: { 'a/b': { properties: { type: 'object', requierd: [] } } } },
        '/events/a~1b/properties',
      ],
      [{ mode: 'warn', events: { e: {} } }, '/events/e/properties'],
      [{ mode: 'warn', traits: { type: 'object', properties: { x: { format: 'no-such-format' } } } }, '/traits'],
    ];
    for (const [document, pointer] of cases) {
      const result = compilePlan(document, 1);
      assert.equal(result.ok, false, JSON.stringify(document));
      if (!result.ok)
        assert.ok(
          result.errors.some((e) => e.pointer === pointer),
          `${JSON.stringify(document)} → ${JSON.stringify(result.errors)}`,
        );
    }
    assert.equal(escapePointerToken('a~/b'), 'a~0~1b');
  });
});

describe('catalogue paths and the draft', () => {
  it('walks dotted paths to depth 3 with JSON types', () => {
    const seen: string[] = [];
    walkPaths({ a: 1, b: 1.5, c: 'x', d: null, e: [1], f: true, g: { h: { i: { j: 1 } } } }, (path, type) =>
      seen.push(`${path}:${type}`),
    );
    assert.deepEqual(seen, [
      'a:integer',
      'b:number',
      'c:string',
      'd:null',
      'e:array',
      'f:boolean',
      'g:object',
      'g.h:object',
      'g.h.i:object',
    ]);
    assert.equal(jsonType({}), 'object');
  });

  it('a draft validates every object it was drawn from (property)', () => {
    const value = fc.oneof(
      fc.string(),
      fc.integer(),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.boolean(),
      fc.constant(null),
      fc.array(fc.integer(), { maxLength: 2 }),
    );
    const object = fc.dictionary(
      fc.constantFrom('a', 'b', 'c', 'd.e', 'f/g'),
      fc.oneof(value, fc.dictionary(fc.constantFrom('x', 'y'), value, { maxKeys: 2 })),
      { maxKeys: 4 },
    );
    fc.assert(
      fc.property(fc.array(object, { minLength: 1, maxLength: 6 }), (objects) => {
        // Count the objects as the catalogue does.
        const paths = new Map<string, Record<string, number>>();
        for (const o of objects) {
          walkPaths(o, (path, type) => {
            const types = paths.get(path) ?? {};
            types[type] = (types[type] ?? 0) + 1;
            paths.set(path, types);
          });
        }
        const draft = draftPlan(
          [
            {
              canonicalName: 'e',
              count: objects.length,
              properties: [...paths].map(([path, types]) => ({ path, types })),
            },
          ],
          [],
        );
        const plan = compiled({ ...draft, mode: 'enforce', unplanned: 'reject' });
        for (const o of objects) assert.equal(checkEvent(plan, 'e', o), undefined, JSON.stringify({ o, draft }));
      }),
      { numRuns: 200 },
    );
  });
});
