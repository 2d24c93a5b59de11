// Identity rules (contract §6). Pure functions, no I/O: the identity store reads the current state,
// asks these functions what to do, and writes the answer.
import type { FieldError } from './errors.js';
import { rejectUnstorable } from './json-values.js';

export const EXTERNAL_ID_MAX_LENGTH = 255;
export const IDENTIFIER_KIND_PATTERN = /^[a-z][a-z0-9_]*$/;
export const IDENTIFIER_KIND_PATTERN_SOURCE = '^[a-z][a-z0-9_]*$';
export const IDENTIFIER_KIND_MAX_LENGTH = 64;
export const IDENTIFIER_MAX_KINDS = 20;
export const IDENTIFIER_VALUE_MAX_LENGTH = 512;
/** Serialized JSON (UTF-8 bytes) of the `traits` object of one request. */
export const TRAITS_MAX_BYTES = 32 * 1024;

/**
 * Values that SDKs send when they have no real user id. Compared after trimming, case-insensitively:
 * accepting them would merge every anonymous visitor into one user.
 */
export const PLACEHOLDER_EXTERNAL_IDS: readonly string[] = [
  'null',
  'undefined',
  'anonymous',
  'guest',
  'none',
  'nil',
  '0',
  '-1',
  '00000000-0000-0000-0000-000000000000',
];

export type Identifiers = Record<string, string>;
export type Traits = Record<string, unknown>;
/** A requested change of identifiers: a value sets the kind, `null` removes it. */
export type IdentifierPatch = Record<string, string | null>;
/** A requested change of traits: a value sets the trait, `null` removes it. */
export type TraitPatch = Record<string, unknown>;

/**
 * One identity change, as every entry point asks it of the identity pipeline (services/identity-service.ts):
 * the native identify and alias routes, and the side effects of Segment items.
 */
export type IdentityOperation =
  | {
      kind: 'identify';
      externalId: string;
      /** Identifiers the request sets (native identify), validated by the pipeline. */
      identifiers?: Record<string, unknown> | undefined;
      /** Identifiers the traits imply (a Segment identify's `traits.email`): through a browser key they stay traits. */
      impliedIdentifiers?: Record<string, string> | undefined;
      traits?: Record<string, unknown> | undefined;
      /** Whether the user becomes identified (clarifications §18); true unless said otherwise. */
      identifiesUser?: boolean;
    }
  /** Merge the user `from` resolves to into the one `to` resolves to (Segment: alias, or a call carrying both ids). */
  | { kind: 'alias'; from: string; to: string };

export interface IdentifierConflict {
  kind: string;
  value: string;
  /** The external id of the user that holds the identifier. */
  externalId: string;
}

/** The state of one user as the merge rules see it. */
export interface IdentityState {
  externalId: string;
  identifiers: Identifiers;
  traits: Traits;
}

export type Validated<T> = { ok: true; value: T } | { ok: false; errors: FieldError[] };

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * PostgreSQL text cannot hold U+0000, and a lone surrogate would be stored as U+FFFD (a different id
 * than the one sent). Both are refused on every database, so the two adapters accept the same input.
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function unstorableText(value: string): string | undefined {
  if (value.includes('\u0000')) return 'must not contain the NUL character (U+0000)';
  if (LONE_SURROGATE.test(value)) return 'must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

export function isPlaceholderExternalId(value: string): boolean {
  const normalized = value.trim().toLowerCase();
  return normalized === '' || PLACEHOLDER_EXTERNAL_IDS.includes(normalized);
}

/** `external_id`, `from_external_id`, `to_external_id`: 1–255 characters and not a placeholder. Stored exactly as sent. */
export function checkExternalId(value: unknown, pointer: string): FieldError | undefined {
  if (typeof value !== 'string') return { pointer, message: 'must be a string' };
  if (value.length === 0) return { pointer, message: 'must not be empty' };
  if (value.length > EXTERNAL_ID_MAX_LENGTH)
    return { pointer, message: `must be at most ${EXTERNAL_ID_MAX_LENGTH} characters` };
  const unstorable = unstorableText(value);
  if (unstorable) return { pointer, message: unstorable };
  if (isPlaceholderExternalId(value)) {
    return {
      pointer,
      message: `"${value}" is a placeholder, not a user id (refused: ${PLACEHOLDER_EXTERNAL_IDS.join(', ')}, and blank values; case-insensitive)`,
    };
  }
  return undefined;
}

/** Kind `email` compares trimmed and lower-cased; every other kind compares exactly. */
export function normalizeIdentifierValue(kind: string, value: string): string {
  return kind === 'email' ? value.trim().toLowerCase() : value;
}

/** Validates `identifiers` and returns it with every value normalized. */
export function validateIdentifiers(input: unknown, pointer = '/identifiers'): Validated<IdentifierPatch> {
  if (!isPlainObject(input)) return { ok: false, errors: [{ pointer, message: 'must be an object' }] };
  const errors: FieldError[] = [];
  const kinds = Object.keys(input);
  if (kinds.length > IDENTIFIER_MAX_KINDS) {
    errors.push({ pointer, message: `must have at most ${IDENTIFIER_MAX_KINDS} kinds, got ${kinds.length}` });
  }
  const patch: IdentifierPatch = {};
  for (const kind of kinds) {
    const at = `${pointer}/${escapePointer(kind)}`;
    if (kind.length > IDENTIFIER_KIND_MAX_LENGTH) {
      errors.push({ pointer: at, message: `identifier kind must be at most ${IDENTIFIER_KIND_MAX_LENGTH} characters` });
      continue;
    }
    if (!IDENTIFIER_KIND_PATTERN.test(kind)) {
      errors.push({
        pointer: at,
        message: `identifier kind "${kind}" must match ${IDENTIFIER_KIND_PATTERN_SOURCE} (lower-case letters, digits and underscores, starting with a letter)`,
      });
      continue;
    }
    const value = input[kind];
    if (value === null) {
      patch[kind] = null;
      continue;
    }
    if (typeof value !== 'string') {
      errors.push({ pointer: at, message: 'must be a string, or null to remove the identifier' });
      continue;
    }
    if (value.length === 0) {
      errors.push({ pointer: at, message: 'must not be empty (send null to remove the identifier)' });
      continue;
    }
    if (value.length > IDENTIFIER_VALUE_MAX_LENGTH) {
      errors.push({ pointer: at, message: `must be at most ${IDENTIFIER_VALUE_MAX_LENGTH} characters` });
      continue;
    }
    const unstorable = unstorableText(value);
    if (unstorable) {
      errors.push({ pointer: at, message: unstorable });
      continue;
    }
    const normalized = normalizeIdentifierValue(kind, value);
    if (normalized.length === 0) {
      errors.push({ pointer: at, message: 'must not be blank' });
      continue;
    }
    patch[kind] = normalized;
  }
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value: patch };
}

/** Validates `traits`: an object of at most 32 KiB of JSON. */
export function validateTraits(input: unknown, pointer = '/traits'): Validated<TraitPatch> {
  if (!isPlainObject(input)) return { ok: false, errors: [{ pointer, message: 'must be an object' }] };
  const bytes = Buffer.byteLength(JSON.stringify(input), 'utf8');
  if (bytes > TRAITS_MAX_BYTES) {
    return {
      ok: false,
      errors: [{ pointer, message: `must be at most ${TRAITS_MAX_BYTES} bytes of JSON, got ${bytes}` }],
    };
  }
  // The same rule as event properties: nothing may be stored other than as sent (NUL, 1e400, deep nesting).
  const errors: FieldError[] = [];
  rejectUnstorable(input, pointer, errors);
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value: input };
}

/** RFC 6901: `~` → `~0`, `/` → `~1`. */
function escapePointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Shallow merge; a trait set to `null` is removed. */
export function mergeTraits(stored: Traits, patch: TraitPatch): Traits {
  const merged: Traits = { ...stored };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else merged[key] = value;
  }
  return merged;
}

/**
 * The value of an identifier kind, or undefined. Kinds are client-chosen keys and `constructor` is a
 * valid kind, so a plain `identifiers[kind]` would find Object.prototype's members.
 */
export function identifierOf(identifiers: Identifiers, kind: string): string | undefined {
  return Object.hasOwn(identifiers, kind) ? identifiers[kind] : undefined;
}

/** One value per kind: a value replaces the kind's current value, `null` removes the kind. */
export function applyIdentifiers(stored: Identifiers, patch: IdentifierPatch): Identifiers {
  const merged: Identifiers = { ...stored };
  for (const [kind, value] of Object.entries(patch)) {
    if (value === null) delete merged[kind];
    else merged[kind] = value;
  }
  return merged;
}

/**
 * The identifiers of `patch` that another user holds. `holderOf` answers the external id of the user
 * holding an identifier; `self` is the external id of the user being identified (undefined if new).
 */
export function identifyConflicts(
  patch: IdentifierPatch,
  holderOf: (kind: string, value: string) => string | undefined,
  self: string | undefined,
): IdentifierConflict[] {
  const conflicts: IdentifierConflict[] = [];
  for (const [kind, value] of Object.entries(patch)) {
    if (value === null) continue;
    const holder = holderOf(kind, value);
    if (holder !== undefined && holder !== self) conflicts.push({ kind, value, externalId: holder });
  }
  return conflicts.sort(compareConflicts);
}

function compareConflicts(a: IdentifierConflict, b: IdentifierConflict): number {
  return a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0;
}

export type MergeDecision =
  | { status: 'merge'; identifiers: Identifiers; traits: Traits }
  | { status: 'identifier_conflict'; conflicts: IdentifierConflict[] };

/**
 * Merging F (`from`) into T (`into`): identifiers are united, T's traits win and F's fill the gaps.
 * When both hold different values for one kind, nothing may change; the conflict lists both holders
 * for each such kind (F first), so the client sees which value each user has.
 */
export function decideMerge(from: IdentityState, into: IdentityState): MergeDecision {
  const conflicts: IdentifierConflict[] = [];
  for (const kind of Object.keys(from.identifiers).sort()) {
    const fromValue = from.identifiers[kind]!;
    const intoValue = identifierOf(into.identifiers, kind);
    if (intoValue !== undefined && intoValue !== fromValue) {
      conflicts.push({ kind, value: fromValue, externalId: from.externalId });
      conflicts.push({ kind, value: intoValue, externalId: into.externalId });
    }
  }
  if (conflicts.length > 0) return { status: 'identifier_conflict', conflicts };
  return {
    status: 'merge',
    identifiers: { ...from.identifiers, ...into.identifiers },
    traits: { ...from.traits, ...into.traits },
  };
}
