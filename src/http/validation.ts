// One validator for every request schema: TypeBox's compiled checker. Fastify uses it for bodies,
// params and query strings (no coercion, no silent removal of unknown fields), and the batch route
// uses the very same compiled schema for each element, so a field is judged identically in both.
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors';
import type { TSchema } from '@sinclair/typebox';
import type { FastifySchemaCompiler } from 'fastify';
import { validationError, type FieldError } from '../domain/errors.js';
import { rejectUnstorable } from '../domain/json-values.js';

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

export function compileSchema(schema: TSchema): TypeCheck<TSchema> {
  let check = compiled.get(schema);
  if (check === undefined) {
    check = TypeCompiler.Compile(schema);
    compiled.set(schema, check);
  }
  return check;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** Levenshtein distance, for "did you mean" on unknown fields. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let previous = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const current = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, previous + (a[i - 1] === b[j - 1] ? 0 : 1));
      previous = current;
    }
  }
  return row[b.length]!;
}

function closest(field: string, known: string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const d = distance(field.toLowerCase(), candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(field.length / 3)) ? best : undefined;
}

function message(error: ValueError): string {
  const schema = error.schema as Record<string, unknown>;
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required';
    case ValueErrorType.ObjectAdditionalProperties: {
      const known = Object.keys((schema.properties as Record<string, unknown> | undefined) ?? {});
      const field = error.path.slice(error.path.lastIndexOf('/') + 1);
      const guess = closest(field, known);
      return guess === undefined
        ? `is not a known field (known fields: ${known.join(', ')})`
        : `is not a known field; did you mean "${guess}"?`;
    }
    case ValueErrorType.StringMaxLength:
      return `must be at most ${String(schema.maxLength)} characters`;
    case ValueErrorType.StringMinLength:
      return schema.minLength === 1 ? 'must not be empty' : `must be at least ${String(schema.minLength)} characters`;
    case ValueErrorType.StringPattern:
      return typeof schema.errorMessage === 'string'
        ? schema.errorMessage
        : `must match the pattern ${String(schema.pattern)}`;
    case ValueErrorType.String:
      return `must be a string, got ${describe(error.value)}`;
    case ValueErrorType.Object:
      return `must be an object, got ${describe(error.value)}`;
    case ValueErrorType.Array:
      return `must be an array, got ${describe(error.value)}`;
    case ValueErrorType.ArrayMinItems:
      return `must contain at least ${String(schema.minItems)} item(s)`;
    case ValueErrorType.ArrayMaxItems:
      return `must contain at most ${String(schema.maxItems)} items`;
    case ValueErrorType.Integer:
    case ValueErrorType.Number:
      return `must be a number, got ${describe(error.value)}`;
    case ValueErrorType.Boolean:
      return `must be a boolean, got ${describe(error.value)}`;
    case ValueErrorType.Union: {
      const options = Array.isArray(schema.anyOf)
        ? (schema.anyOf as Array<Record<string, unknown>>).map((s) => s.const).filter((c) => c !== undefined)
        : [];
      return options.length > 0 ? `must be one of ${options.map((o) => JSON.stringify(o)).join(', ')}` : error.message;
    }
    default:
      return error.message.charAt(0).toLowerCase() + error.message.slice(1);
  }
}

/**
 * JSON Schema (and the contract: "1–255 chars") counts characters as code points, TypeBox counts
 * UTF-16 units, so 255 emoji would be "510 long". A maxLength error that code points refute is none.
 */
function isFalseMaxLength(error: ValueError): boolean {
  if (error.type !== ValueErrorType.StringMaxLength || typeof error.value !== 'string') return false;
  const max = (error.schema as { maxLength?: unknown }).maxLength;
  return typeof max === 'number' && [...error.value].length <= max;
}

/**
 * Strings no backend can store as sent (U+0000, lone surrogates), non-finite numbers and runaway
 * nesting, anywhere in a value that passed its schema: one rule for every body, query string and
 * path parameter, so no route can hand such a value to SQL (issue 9, clarifications §13).
 */
function unstorableErrors(value: unknown, base: string): FieldError[] {
  const errors: FieldError[] = [];
  rejectUnstorable(value, base, errors);
  return errors;
}

/** Checks `value` against `schema`; returns field errors (one per pointer, first wins) or an empty list. */
export function schemaErrors(schema: TSchema, value: unknown, base = ''): FieldError[] {
  const check = compileSchema(schema);
  if (check.Check(value)) return unstorableErrors(value, base);
  const seen = new Set<string>();
  const errors: FieldError[] = [];
  for (const error of check.Errors(value)) {
    if (isFalseMaxLength(error)) continue;
    const pointer = base + error.path;
    if (seen.has(pointer)) continue;
    seen.add(pointer);
    errors.push({ pointer, message: message(error) });
    if (errors.length >= 20) break;
  }
  // Only code-point-refuted maxLength errors: the value passed, so the storability rule applies.
  return errors.length === 0 ? unstorableErrors(value, base) : errors;
}

/**
 * schemaErrors, and when the value passed: an upper bound of the UTF-8 bytes of `JSON.stringify(value)`, from the
 * same walk (rejectUnstorable); Infinity when it failed, or passed only once code points refuted a maxLength error.
 */
export function schemaCheck(schema: TSchema, value: unknown, base = ''): { errors: FieldError[]; maxBytes: number } {
  if (!compileSchema(schema).Check(value)) return { errors: schemaErrors(schema, value, base), maxBytes: Infinity };
  const errors: FieldError[] = [];
  const maxBytes = rejectUnstorable(value, base, errors);
  return { errors, maxBytes };
}

/** Fastify's validator compiler: the same TypeBox checks, failing with our `validation_error`. */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  const check = compileSchema(schema);
  return (value: unknown) => {
    const errors = check.Check(value) ? unstorableErrors(value, '') : schemaErrors(schema, value);
    if (errors.length === 0) return { value };
    const where = httpPart === 'querystring' ? 'query parameter' : httpPart === 'params' ? 'path parameter' : 'field';
    const labelled =
      httpPart === 'querystring' || httpPart === 'params'
        ? errors.map((e) => ({ pointer: e.pointer, message: `${where} ${e.pointer.slice(1)} ${e.message}` }))
        : errors;
    return { error: validationError(labelled) };
  };
};
