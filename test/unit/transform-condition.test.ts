// The `where` of a step (src/domain/transform-condition.ts): a path compared with a constant is evaluated without
// json-logic-js, and must answer exactly as json-logic-js does, loose equality, missing paths and prototypes included.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import jsonLogic from 'json-logic-js';
import { holds } from '../../src/domain/transform-condition.js';

const constant = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.constantFrom(0, 1, -1, 2.5, '', '0', '1', 'true', 'false', 'null', 'a', 'free'),
  fc.integer({ min: -3, max: 3 }),
);
const value = fc.oneof(constant, fc.constant([]), fc.constant([1]), fc.constant({}), fc.constant({ a: 1 }));
const path = fc.constantFrom(
  'properties.test',
  'properties.plan',
  'properties.nested.a',
  'properties.missing',
  'properties.plan.length',
  'context.bot',
  'properties.toString',
  'event',
  'properties',
);

function outcome(evaluate: () => boolean): boolean | string {
  try {
    return evaluate();
  } catch (error) {
    return `throws ${(error as Error).name}`;
  }
}

describe('holds', () => {
  it('answers as json-logic-js on a path compared with a constant, either way round, in every form of var', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('==', '===', '!=', '!=='),
        path,
        constant,
        fc.boolean(),
        fc.boolean(),
        fc.record({ test: value, plan: value, nested: fc.oneof(value, fc.record({ a: value })) }),
        fc.record({ bot: value }),
        (op, name, other, swap, wrapped, properties, context) => {
          const variable = { var: wrapped ? [name] : name };
          const rule = { [op]: swap ? [other, variable] : [variable, other] };
          const document = { event: 'a_b', properties, context };
          // A loose comparison of an object without a prototype throws (no valueOf): then both must throw.
          const expected = outcome(() => jsonLogic.truthy(jsonLogic.apply(rule as jsonLogic.RulesLogic, document)));
          assert.equal(
            outcome(() => holds(rule, document)),
            expected,
            JSON.stringify({ rule, document }),
          );
          assert.equal(
            outcome(() => holds(rule, document)),
            expected,
            'the same from the compiled rule',
          );
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('leaves other rules to json-logic-js', () => {
    const document = { properties: { n: 5, plan: 'pro' } };
    assert.equal(holds({ '>': [{ var: 'properties.n' }, 3] }, document), true);
    assert.equal(holds({ '==': [{ var: ['properties.x', 'pro'] }, 'pro'] }, document), true, 'a var with a default');
    assert.equal(holds({ '==': [{ var: 'properties.plan' }, { var: 'properties.plan' }] }, document), true);
    assert.equal(holds({ and: [{ '==': [{ var: 'properties.plan' }, 'pro'] }, { '<': [1, 2] }] }, document), true);
    assert.equal(holds({ '==': [1, 1] }, document), true);
  });
});
