// JSON values shared by many events instead of copied into each (an enrichment's answer, the same for every event
// from one user agent). Each is frozen, so nothing can change it in place: a step that writes inside one copies it
// first (transform-paths.ts), and the event then holds its own. Its JSON text is made once, and an object holding
// shared values is serialised with their texts spliced in rather than walked again.
import { boundedMemo } from './bounded-memo.js';

const texts = new WeakMap<object, string>();

function deepFreeze(value: unknown): void {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return;
  for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
  Object.freeze(value);
}

/** `value` (JSON data), deeply frozen and with its JSON text remembered, to be shared between events. */
export function sharedJson<T extends object>(value: T): T {
  deepFreeze(value);
  texts.set(value, JSON.stringify(value));
  return value;
}

/** The JSON text of a shared value, or undefined for any other. */
export function sharedText(value: object): string | undefined {
  return texts.get(value);
}

/** Strings JSON.stringify writes as they are between quotes. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what JSON escapes
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** Whether JSON.stringify writes `value` as it is, between quotes: no control character, quote, backslash or
 *  UTF-16 surrogate (a lone one is escaped). A regular expression: V8 runs it as native code, which a loop in
 *  JavaScript matches only on strings of a few dozen characters and loses to on longer ones. */
export function isPlainString(value: string): boolean {
  return !NEEDS_ESCAPE.test(value);
}

/** `JSON.stringify(value)` of a string, without the call for one that needs no escape (most do not). */
export function stringText(value: string): string {
  return isPlainString(value) ? `"${value}"` : JSON.stringify(value);
}

/**
 * `JSON.stringify(object)` for a plain object of JSON data some of whose values are shared (their texts are put in
 * as they are), or undefined when none is: the caller serialises it as usual then.
 */
export function jsonWithShared(object: Record<string, unknown>): string | undefined {
  const keys = Object.keys(object);
  let found = false;
  for (const key of keys) {
    const value = object[key];
    if (typeof value === 'object' && value !== null && texts.has(value)) {
      found = true;
      break;
    }
  }
  if (!found) return undefined;
  // Appended piece by piece, each key's text made once: a template per key cost a flat copy of the text so far.
  let text = '{';
  for (const key of keys) {
    const value = object[key];
    let part: string | undefined;
    if (typeof value === 'string') part = stringText(value);
    else if (typeof value === 'object' && value !== null) part = texts.get(value) ?? JSON.stringify(value);
    else part = JSON.stringify(value);
    // What JSON.stringify leaves out of an object (undefined, functions, symbols).
    if (part === undefined) continue;
    if (text.length > 1) text += ',';
    text += keyText(key);
    text += part;
  }
  return text + '}';
}

/** `"key":` of the keys objects are serialised with here (a few, the same on every event); bounded all the same. */
const keyText = boundedMemo(1024, (key: string) => `${stringText(key)}:`);
