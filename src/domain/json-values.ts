// Free-form JSON values (event properties, user traits) must be stored exactly as sent, on both backends.
import type { FieldError } from './errors.js';

const NUL = '\u0000';
/** A quick filter: only strings holding U+0000 or any surrogate need the closer look. */
// eslint-disable-next-line no-control-regex -- U+0000 is exactly what this looks for
const SUSPECT = /[\u0000\uD800-\uDFFF]/;
/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/**
 * Nesting levels allowed in a whole Segment request body (the envelope plus `properties`' own 64
 * levels). The native routes judge each batch element on its own instead (rejectUnstorable).
 */
export const MAX_BODY_DEPTH = 128;
/** Nesting levels allowed inside `properties` and `traits`; deeper JSON would exhaust the stack of every JSON tool. */
export const MAX_PROPERTY_DEPTH = 64;

/** Why a string cannot be stored as sent, or undefined when it can. */
export function unstorableString(value: string): string | undefined {
  if (!SUSPECT.test(value)) return undefined;
  if (value.includes(NUL)) return 'must not contain the NUL character (U+0000)';
  // A lone surrogate is not Unicode: UTF-8 cannot encode it, so PostgreSQL refuses it and SQLite
  // would store U+FFFD instead (clarifications §13).
  if (LONE_SURROGATE.test(value)) return 'must not contain a lone surrogate (an unpaired \\uD800–\\uDFFF escape)';
  return undefined;
}

/**
 * Values that would not be stored as sent. PostgreSQL cannot store U+0000 in TEXT or JSONB (SQLite
 * can), and no UTF-8 store can hold a lone surrogate: both backends must answer the same, so it is a
 * 400 here. The HTTP validation applies this rule to every body, query string and path parameter. Numbers beyond the double range
 * would silently become null. Nesting is bounded.
 *
 * Returns, at no extra walk, an upper bound of the UTF-8 bytes of `JSON.stringify(value)` for JSON data (what
 * `JSON.parse` makes), meaningful when no error was added: the batch route's size check settles nearly every
 * event with it, and serialises only one that may be over the limit.
 */
export function rejectUnstorable(value: unknown, pointer: string, errors: FieldError[], depth = 0): number {
  return walk({ base: pointer, path: [], errors }, value, depth);
}

/**
 * The most bytes JSON.stringify writes for one UTF-16 unit of a string: `\uXXXX` (a control character or a lone
 * surrogate); any other unit is at most 3 bytes of UTF-8 or a two-character escape.
 */
const MAX_BYTES_PER_UNIT = 6;
/**
 * The longest text JSON.stringify writes for a finite number: 17 significant digits written out down to 10^-6
 * (`-0.0000012345678901234567`); with an exponent they are at most 24.
 */
const MAX_NUMBER_BYTES = 25;

function stringBound(value: string): number {
  return MAX_BYTES_PER_UNIT * value.length + 2;
}

/**
 * One walk of rejectUnstorable. The path is kept as the keys and indexes on the way down, and made into a JSON
 * pointer only for a value that is refused: building the pointer of every value visited (a string and two
 * replaces per key) was most of the walk's cost, which runs over every event of every request.
 */
interface Walk {
  base: string;
  path: Array<string | number>;
  errors: FieldError[];
}

function pointerOf(walk: Walk): string {
  let pointer = walk.base;
  for (const part of walk.path)
    pointer += `/${typeof part === 'number' ? part : part.replace(/~/g, '~0').replace(/\//g, '~1')}`;
  return pointer;
}

/** Walks one value; returns the bound of its JSON text's bytes (rejectUnstorable). */
function walk(state: Walk, value: unknown, depth: number): number {
  const errors = state.errors;
  if (errors.length >= 20) return 0;
  if (typeof value === 'string') {
    const problem = unstorableString(value);
    if (problem !== undefined) errors.push({ pointer: pointerOf(state), message: problem });
    return stringBound(value);
  }
  if (typeof value === 'number') {
    // JSON like 1e400 parses to Infinity, which JSON can only store as null: refuse, do not alter.
    if (!Number.isFinite(value))
      errors.push({ pointer: pointerOf(state), message: 'must be a finite number (this one is out of range)' });
    return MAX_NUMBER_BYTES;
  }
  // true, false, null (and, in an array, what JSON.stringify writes as null).
  if (value === null || typeof value !== 'object') return 5;
  if (depth >= MAX_PROPERTY_DEPTH) {
    errors.push({ pointer: pointerOf(state), message: `is nested more than ${MAX_PROPERTY_DEPTH} levels deep` });
    return 0;
  }
  const path = state.path;
  // The brackets, and a comma after every member (one more than there are).
  let bytes = 2;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      path.push(i);
      bytes += walk(state, value[i], depth + 1) + 1;
      path.pop();
    }
    return bytes;
  }
  const object = value as Record<string, unknown>;
  for (const key of Object.keys(object)) {
    path.push(key);
    const problem = unstorableString(key);
    if (problem !== undefined) errors.push({ pointer: pointerOf(state), message: `property names ${problem}` });
    // The key, its colon and comma.
    else bytes += stringBound(key) + 2 + walk(state, object[key], depth + 1);
    path.pop();
  }
  return bytes;
}

/**
 * Whether JSON text nests deeper than `max` arrays/objects. One pass over the characters, no
 * recursion: it runs before parsing, so that nothing after the parser (serialisers, validators,
 * `JSON.stringify` in a log line) ever meets a value deep enough to exhaust the stack.
 */
export function jsonNestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Most of the text is strings: jump to the quote that ends this one, the first not escaped by an odd run of
      // backslashes (the opening quote stops the run), instead of looking at each character of it.
      for (;;) {
        i = text.indexOf('"', i + 1);
        if (i === -1) return false;
        let before = i - 1;
        while (text.charCodeAt(before) === 0x5c) before--;
        if ((i - before) % 2 === 1) break;
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/** An escape through which U+0000 or a surrogate could be written, or such a character itself (storableJson). */
export const ESCAPE_OR_SUSPECT = new RegExp(`\\\\u|${SUSPECT.source}`);

/**
 * Whether rejectUnstorable would accept every value parsed from this JSON text (as JSON.stringify writes it) at
 * any depth: no escape through which U+0000 or a surrogate could be written, no such character itself, and no
 * nesting as deep as the limit (the whole text's, so the values inside it nest less). Numbers in such text are
 * finite. False says only that the values must be walked.
 */
export function storableJson(text: string): boolean {
  return !ESCAPE_OR_SUSPECT.test(text) && !jsonNestsDeeperThan(text, MAX_PROPERTY_DEPTH);
}

// eslint-disable-next-line no-control-regex -- U+0000 is exactly what this replaces
const UNSTORABLE_CHARACTERS = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text that every backend stores as given: NUL and lone surrogates become U+FFFD. Only for what Inlet
 * records about a request it refused (clarifications §13), never for data it accepts, which is
 * refused instead of altered.
 */
export function storableText(value: string): string {
  return SUSPECT.test(value) ? value.replace(UNSTORABLE_CHARACTERS, '\uFFFD') : value;
}
