// Free-form JSON values (event properties, user traits) must be stored exactly as sent, on both backends.
import type { FieldError } from './errors.js';

const NUL = '\u0000';
/** Nesting levels allowed inside `properties` and `traits`; deeper JSON would exhaust the stack of every JSON tool. */
export const MAX_PROPERTY_DEPTH = 64;

/**
 * Values that would not be stored as sent. PostgreSQL cannot store U+0000 in TEXT or JSONB (SQLite
 * can): both backends must answer the same, so it is a 400 here. Numbers beyond the double range
 * would silently become null. Nesting is bounded.
 */
export function rejectUnstorable(value: unknown, pointer: string, errors: FieldError[], depth = 0): void {
  if (errors.length >= 20) return;
  if (typeof value === 'string') {
    if (value.includes(NUL)) errors.push({ pointer, message: 'must not contain the NUL character (U+0000)' });
    return;
  }
  if (typeof value === 'number') {
    // JSON like 1e400 parses to Infinity, which JSON can only store as null: refuse, do not alter.
    if (!Number.isFinite(value)) errors.push({ pointer, message: 'must be a finite number (this one is out of range)' });
    return;
  }
  if (value === null || typeof value !== 'object') return;
  if (depth >= MAX_PROPERTY_DEPTH) {
    errors.push({ pointer, message: `is nested more than ${MAX_PROPERTY_DEPTH} levels deep` });
    return;
  }
  if (Array.isArray(value)) {
    value.forEach((item, i) => rejectUnstorable(item, `${pointer}/${i}`, errors, depth + 1));
    return;
  }
  for (const [key, item] of Object.entries(value)) {
    const child = `${pointer}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    if (key.includes(NUL)) errors.push({ pointer: child, message: 'property names must not contain the NUL character (U+0000)' });
    else rejectUnstorable(item, child, errors, depth + 1);
  }
}

