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
  if (typeof rule === 'object' && rule !== null) {
    let compiled = comparisons.get(rule);
    if (compiled === undefined) {
      compiled = comparisonOf(rule) ?? null;
      comparisons.set(rule, compiled);
    }
    if (compiled !== null) return compiled(document);
  }
  return jsonLogic.truthy(jsonLogic.apply(rule as jsonLogic.RulesLogic, document));
}

/**
 * The commonest rule, a path compared with a constant (`{"==": [{"var": "properties.test"}, true]}`), as a function
 * that does what json-logic-js does for it without walking the rule on every item: `var` reads each segment with
 * `[]` and answers null for what is missing, then the operator's JavaScript comparison. Other rules: undefined.
 */
function comparisonOf(rule: object): ((document: object) => boolean) | undefined {
  const keys = Object.keys(rule);
  if (keys.length !== 1 || Array.isArray(rule)) return undefined;
  const op = keys[0]!;
  const args = (rule as Record<string, unknown>)[op];
  if (!Array.isArray(args) || args.length !== 2 || !COMPARISONS.has(op)) return undefined;
  let [left, right] = args as [unknown, unknown];
  const swapped = !isConstant(left);
  if (swapped) [left, right] = [right, left];
  const path = varPath(right);
  if (!isConstant(left) || path === undefined) return undefined;
  const constant = left;
  const segments = path.split('.');
  const read = (document: object): unknown => {
    let data: unknown = document;
    for (const segment of segments) {
      if (data === null || data === undefined) return null;
      data = (data as Record<string, unknown>)[segment];
      if (data === undefined) return null;
    }
    return data;
  };
  // Loose and strict comparisons are symmetric, so the order of the two sides does not change an answer.
  switch (op) {
    case '==':
      return (document) => read(document) == constant;
    case '===':
      return (document) => read(document) === constant;
    case '!=':
      return (document) => read(document) != constant;
    default:
      return (document) => read(document) !== constant;
  }
}

const COMPARISONS: ReadonlySet<string> = new Set(['==', '===', '!=', '!==']);
const comparisons = new WeakMap<object, ((document: object) => boolean) | null>();

function isConstant(value: unknown): value is string | number | boolean | null {
  return value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean';
}

/** The path of `{"var": "a.b"}` or `{"var": ["a.b"]}` (no default), or undefined for anything else. */
function varPath(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== 1 || keys[0] !== 'var') return undefined;
  let name = (value as { var: unknown }).var;
  if (Array.isArray(name)) {
    if (name.length !== 1) return undefined;
    name = name[0];
  }
  return typeof name === 'string' && name !== '' ? name : undefined;
}
