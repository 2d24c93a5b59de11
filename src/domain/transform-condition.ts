// The `where` of a step: a JSON Logic rule (jsonlogic.com), checked against a list of operators before it
// is stored, evaluated with json-logic-js on the document as it stands when the step runs.
import jsonLogic from 'json-logic-js';
import type { FieldError } from './errors.js';
import { pathProblem } from './transform-paths.js';

/** The operators of jsonlogic.com's reference, less `log` (writes to the server's console). */
const OPERATORS: ReadonlySet<string> = new Set([
  'var',
  'missing',
  'missing_some',
  'if',
  '?:',
  '==',
  '===',
  '!=',
  '!==',
  '!',
  '!!',
  'or',
  'and',
  '>',
  '>=',
  '<',
  '<=',
  'max',
  'min',
  '+',
  '-',
  '*',
  '/',
  '%',
  'map',
  'filter',
  'reduce',
  'all',
  'none',
  'some',
  'merge',
  'in',
  'cat',
  'substr',
]);

export const MAX_CONDITION_BYTES = 8 * 1024;
const MAX_CONDITION_DEPTH = 32;

/** Problems of a rule, with pointers under `pointer`. */
export function conditionProblems(rule: unknown, pointer: string): FieldError[] {
  const errors: FieldError[] = [];
  const text = JSON.stringify(rule);
  if (text === undefined) return [{ pointer, message: 'must be a JSON Logic rule' }];
  if (text.length > MAX_CONDITION_BYTES)
    return [{ pointer, message: `must be at most ${MAX_CONDITION_BYTES} bytes of JSON` }];
  walk(rule, pointer, 0, errors);
  return errors;
}

function walk(node: unknown, pointer: string, depth: number, errors: FieldError[]): void {
  if (errors.length >= 10) return;
  if (depth > MAX_CONDITION_DEPTH) {
    errors.push({ pointer, message: `nests deeper than ${MAX_CONDITION_DEPTH}` });
    return;
  }
  if (Array.isArray(node)) {
    node.forEach((item, i) => walk(item, `${pointer}/${i}`, depth + 1, errors));
    return;
  }
  if (typeof node !== 'object' || node === null) return;
  const keys = Object.keys(node);
  if (keys.length !== 1) {
    errors.push({ pointer, message: 'an operation is an object with exactly one key, the operator' });
    return;
  }
  const op = keys[0]!;
  const at = `${pointer}/${op.replace(/~/g, '~0').replace(/\//g, '~1')}`;
  if (!OPERATORS.has(op)) {
    errors.push({ pointer: at, message: `"${op}" is not a JSON Logic operator Inlet accepts` });
    return;
  }
  const args = (node as Record<string, unknown>)[op];
  if (op === 'var') {
    const name = Array.isArray(args) ? args[0] : args;
    // `{"var": ""}` is the whole document; a number indexes an array (inside map/filter/reduce).
    if (typeof name === 'string' && name !== '') {
      const problem = pathProblem(name);
      if (problem !== undefined) errors.push({ pointer: Array.isArray(args) ? `${at}/0` : at, message: problem });
    } else if (name !== undefined && name !== null && name !== '' && typeof name !== 'number')
      errors.push({ pointer: at, message: 'a var names a dotted path' });
    return;
  }
  walk(args, at, depth + 1, errors);
}

/** Whether the rule holds for the document (JSON Logic truthiness). Throws what the rule's evaluation throws. */
export function holds(rule: unknown, document: object): boolean {
  return jsonLogic.truthy(jsonLogic.apply(rule as jsonLogic.RulesLogic, document));
}
