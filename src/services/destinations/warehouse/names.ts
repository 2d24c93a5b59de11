// Warehouse names (warehouses.md §1): every table and column Inlet creates matches `^[a-z_][a-z0-9_]*$`, is at
// most 63 bytes and never a PostgreSQL reserved word. A name is made from the event name or the property path
// deterministically; when it is taken (a fixed column, another path, a fixed table) a suffix made from a hash
// of the path decides, so the same path gets the same column on every instance. The column map kept in the
// warehouse (`_inlet_columns`) remembers each path's column once chosen.
import { createHash } from 'node:crypto';

/** PostgreSQL's reserved key words (the "reserved" and "reserved (can be function or type)" rows of its key word list). */
const RESERVED = new Set(
  (
    'all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate ' +
    'collation column concurrently constraint create cross current_catalog current_date current_role ' +
    'current_schema current_time current_timestamp current_user default deferrable desc distinct do else end ' +
    'except false fetch for foreign freeze from full grant group having ilike in initially inner intersect ' +
    'into is isnull join lateral leading left like limit localtime localtimestamp natural not notnull null ' +
    'offset on only or order outer overlaps placing primary references returning right select session_user ' +
    'similar some symmetric system_user table tablesample then to trailing true union unique user using ' +
    'variadic verbose when where window with'
  ).split(' '),
);

/** The longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes). */
export const MAX_NAME = 63;

function hashOf(text: string, length: number): string {
  return createHash('sha256').update(text).digest('hex').slice(0, length);
}

/** `text` as a safe name: lower case, runs of other characters as `_`, no leading digit, not reserved, ≤ 63 bytes. */
export function safeName(text: string): string {
  let name = text
    .normalize('NFKD')
    .toLowerCase()
    .replace(/[^a-z0-9_]+/g, '_');
  if (name === '' || name === '_') name = '_';
  if (/^[0-9]/.test(name)) name = `_${name}`;
  if (RESERVED.has(name)) name = `${name}_`;
  // Every character is ASCII here: length is bytes. A long name keeps its start and a hash of the whole text.
  if (name.length > MAX_NAME) name = `${name.slice(0, MAX_NAME - 9)}_${hashOf(text, 8)}`;
  return name;
}

/**
 * A name for `key` (an event name, a property path) that none of `taken` holds: safeName, else that name with
 * a suffix from the key's hash (then numbered, should two hashes meet).
 */
export function freeName(key: string, base: string, taken: (name: string) => boolean): string {
  if (!taken(base)) return base;
  const suffix = hashOf(key, 6);
  const stem = base.slice(0, MAX_NAME - suffix.length - 1);
  let candidate = `${stem}_${suffix}`;
  for (let n = 2; taken(candidate); n++) candidate = `${stem.slice(0, MAX_NAME - suffix.length - 6)}_${suffix}_${n}`;
  return candidate;
}

/** A double-quoted identifier (every name is safe already; quoting keeps it so whatever it is). */
export function quoted(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
