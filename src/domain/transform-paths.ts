// Dotted paths into a transformation document (transformations.md §3): reading, writing (objects created
// on the way), removing. Paths that do not exist are skipped by every reader and remover.
import { boundedMemo } from './bounded-memo.js';

/** Segments no path may name: they would reach an object's prototype instead of its data. */
const FORBIDDEN_SEGMENTS: ReadonlySet<string> = new Set(['__proto__', 'prototype', 'constructor']);

export const MAX_PATH_LENGTH = 256;
export const MAX_PATH_SEGMENTS = 16;

/** Roots under which a step may write or remove; the top-level fields `set` (and `mask`) may change. */
export const WRITABLE_ROOTS = ['properties', 'traits', 'context'] as const;
export const SETTABLE_FIELDS = ['event', 'subject_type', 'subject_id', 'occurred_at'] as const;

/** Why a path is not a well-formed path, or undefined. */
export function pathProblem(path: unknown): string | undefined {
  if (typeof path !== 'string') return 'must be a string';
  if (path.length === 0) return 'must not be empty';
  if (path.length > MAX_PATH_LENGTH) return `must be at most ${MAX_PATH_LENGTH} characters`;
  const segments = path.split('.');
  if (segments.length > MAX_PATH_SEGMENTS) return `must have at most ${MAX_PATH_SEGMENTS} segments`;
  for (const segment of segments) {
    if (segment.length === 0) return `"${path}" has an empty segment`;
    if (FORBIDDEN_SEGMENTS.has(segment)) return `"${path}" names "${segment}", which no path may`;
  }
  return undefined;
}

/** A well-formed path under properties., traits. or context. (a key below the root, not the root itself). */
export function isUnderWritableRoot(path: string): boolean {
  const dot = path.indexOf('.');
  return dot > 0 && (WRITABLE_ROOTS as readonly string[]).includes(path.slice(0, dot));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A path's segments. Steps name the same few paths on every event: each is split once (the cache is bounded, and
 * the arrays are never changed by their users).
 */
const segmentsOf = boundedMemo<string, readonly string[]>(4096, (path) => path.split('.'));

/** The value at a path; undefined when any part of the way is missing. */
export function getPath(root: Record<string, unknown>, path: string): unknown {
  let node: unknown = root;
  for (const segment of segmentsOf(path)) {
    if (!isObject(node) || !Object.hasOwn(node, segment)) return undefined;
    node = node[segment];
  }
  return node;
}

/**
 * Sets a value, creating objects on the way. Throws when a part of the way holds something that is not
 * an object (writing through it would destroy that value silently). A shared value on the way (frozen:
 * shared-json.ts) is replaced by a copy first, so the write changes this document only.
 */
export function setPath(root: Record<string, unknown>, path: string, value: unknown): void {
  const segments = segmentsOf(path);
  let node = root;
  for (let i = 0; i < segments.length - 1; i++) {
    const segment = segments[i]!;
    const next = Object.hasOwn(node, segment) ? node[segment] : undefined;
    if (next === undefined || next === null) {
      const created: Record<string, unknown> = {};
      node[segment] = created;
      node = created;
    } else if (isObject(next)) node = ownable(node, segment, next);
    else throw new Error(`${segments.slice(0, i + 1).join('.')} is not an object`);
  }
  node[segments[segments.length - 1]!] = value;
}

/** `object` without `key` (all of it when undefined), as a new object with the other keys in their order. */
function without(object: Record<string, unknown>, key: string | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(object)) {
    if (name === key) continue;
    // An own `__proto__` key (JSON.parse makes one) must stay data, not become the copy's prototype.
    if (name === '__proto__')
      Object.defineProperty(out, name, { value: object[name], enumerable: true, writable: true, configurable: true });
    else out[name] = object[name];
  }
  return out;
}

/** `parent[key]` (the object `child`) made writable: a frozen one, shared with other events, is copied in its place. */
function ownable(
  parent: Record<string, unknown>,
  key: string,
  child: Record<string, unknown>,
): Record<string, unknown> {
  if (!Object.isFrozen(child)) return child;
  const copy = without(child, undefined);
  parent[key] = copy;
  return copy;
}

/**
 * Removes the value at a path; false when there was none. The object that held it is replaced in its parent by a
 * copy without the key rather than changed with `delete`, which would turn it into a slow dictionary for the rest
 * of the request (its serialisation, the catalogue's walk, later steps). The root itself is changed in place.
 * Shared values on the way are copied (setPath), only once the path was found.
 */
export function removePath(root: Record<string, unknown>, path: string): boolean {
  const segments = segmentsOf(path);
  let parent: Record<string, unknown> | undefined;
  let node: unknown = root;
  for (let i = 0; i < segments.length - 1; i++) {
    if (!isObject(node) || !Object.hasOwn(node, segments[i]!)) return false;
    parent = node;
    node = node[segments[i]!];
  }
  const last = segments[segments.length - 1]!;
  if (!isObject(node) || !Object.hasOwn(node, last)) return false;
  if (parent === undefined) {
    delete node[last];
    return true;
  }
  let holder = root;
  for (let i = 0; i < segments.length - 2; i++)
    holder = ownable(holder, segments[i]!, holder[segments[i]!] as Record<string, unknown>);
  holder[segments[segments.length - 2]!] = without(node, last);
  return true;
}

/**
 * Moves the value found at `from` (given) to `to`: setPath(to) then removePath(from). Two keys of one object (a
 * property renamed) make one copy of it instead of a new key on it and then a copy without the old one.
 */
export function movePath(root: Record<string, unknown>, from: string, to: string, value: unknown): void {
  const source = segmentsOf(from);
  const target = segmentsOf(to);
  const depth = source.length - 1;
  if (depth < 1 || target.length !== source.length || !samePrefix(source, target, depth)) {
    setPath(root, to, value);
    removePath(root, from);
    return;
  }
  // The holder of the object both keys belong to (found: `from` was), shared values on the way copied.
  let holder = root;
  for (let i = 0; i < depth - 1; i++)
    holder = ownable(holder, source[i]!, holder[source[i]!] as Record<string, unknown>);
  const object = holder[source[depth - 1]!] as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  const fromKey = source[depth]!;
  const toKey = target[depth]!;
  for (const name of Object.keys(object)) {
    if (name === fromKey) continue;
    const kept = name === toKey ? value : object[name];
    // An own `__proto__` key (JSON.parse makes one) must stay data, not become the copy's prototype.
    if (name === '__proto__')
      Object.defineProperty(out, name, { value: kept, enumerable: true, writable: true, configurable: true });
    else out[name] = kept;
  }
  // A key not there yet comes last, as setPath adds it.
  if (!Object.hasOwn(object, toKey)) out[toKey] = value;
  holder[source[depth - 1]!] = out;
}

function samePrefix(a: readonly string[], b: readonly string[], length: number): boolean {
  for (let i = 0; i < length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A deep copy of JSON data (what a document holds), so steps never change what they were given. */
export function cloneJson<T>(value: T): T {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(cloneJson) as T;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    const copy = cloneJson((value as Record<string, unknown>)[key]);
    // An own `__proto__` key (JSON.parse makes one) must stay data, not become the copy's prototype.
    if (key === '__proto__') Object.defineProperty(out, key, { value: copy, enumerable: true, writable: true });
    else out[key] = copy;
  }
  return out as T;
}
