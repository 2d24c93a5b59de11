// A destination's transformation (transformations.md §1) works on stored messages, not drafts: an event as it
// was stored is turned back into the document steps see (§2) by transform-document.ts's documentFrom, the same
// as at ingest, and a kept document into the event that destination receives here. Identity messages (user.identified, user.merged) carry a user whose traits the steps
// see as an identify document; the rest of the message (ids, aliases, times) is not theirs to change.
import { normalizeIdentifierValue } from './identity.js';
import { REDACTED } from './transform-engine.js';
import { storedProperties, type DocumentParts } from './transform-document.js';
import type { TransformDocument } from './transform-types.js';

/** What of a stored event a kept document changes: its name, subject, time, properties and context. */
export type TransformedEventParts = Omit<DocumentParts, 'source' | 'original' | 'context'> & {
  /** null when the event had none and the steps added none. */
  context: Record<string, unknown> | null;
};

export function eventPartsOf(document: TransformDocument, hadContext: boolean): TransformedEventParts {
  const empty = Object.keys(document.context).length === 0;
  return {
    canonicalName: document.event,
    eventType: document.event_type,
    action: document.action,
    subjectType: document.subject_type,
    subjectId: document.subject_id,
    occurredAt: document.occurred_at,
    properties: storedProperties(document),
    context: empty && !hadContext ? null : document.context,
  };
}

/** The user of an identity message, as much of it as the steps see and change. */
export interface StoredUser {
  externalId: string;
  traits: Record<string, unknown>;
  identifiers: Record<string, string>;
}

/** An identity message's user as an identify document (`user_identified` or `user_merged`). */
export function documentOfUser(
  type: 'user.identified' | 'user.merged',
  user: StoredUser,
  at: string,
): TransformDocument {
  const action = type === 'user.identified' ? 'identified' : 'merged';
  return {
    type: 'identify',
    event: `user_${action}`,
    event_type: 'user',
    action,
    subject_type: 'user',
    subject_id: user.externalId,
    occurred_at: at,
    properties: {},
    traits: user.traits,
    context: {},
    source: 'api',
  };
}

/**
 * Identifiers after the steps changed the traits beside them (steps see traits, never identifiers): an identifier
 * that holds the same value as the trait of its name (`email` and `traits.email`, compared as identifiers compare)
 * follows what the steps did to that trait. It becomes the trait's new value (a hash), or is left out when the trait
 * was removed, redacted or is no longer a non-empty string, so that a value masked in the traits is neither kept nor
 * sent on as an identifier. Any other identifier (another value, no trait of its name, `null` to remove one) is as
 * it was. Serves a native identify at ingest and an identity message's user in a destination's copy.
 */
export function identifiersAfter<V>(
  identifiers: Readonly<Record<string, V>>,
  traitsBefore: Readonly<Record<string, unknown>>,
  traitsAfter: Readonly<Record<string, unknown>>,
): Record<string, V | string> {
  const after: Record<string, V | string> = {};
  for (const [kind, value] of Object.entries(identifiers)) {
    const trait = Object.hasOwn(traitsBefore, kind) ? traitsBefore[kind] : undefined;
    const same =
      typeof value === 'string' &&
      typeof trait === 'string' &&
      normalizeIdentifierValue(kind, value) === normalizeIdentifierValue(kind, trait);
    const now = Object.hasOwn(traitsAfter, kind) ? traitsAfter[kind] : undefined;
    if (!same || now === trait) after[kind] = value;
    else if (typeof now === 'string' && now !== REDACTED && now !== '') after[kind] = now;
  }
  return after;
}

/** The user's traits and identifiers after the steps: the traits from the document, the identifiers following them. */
export function userAfter(
  before: StoredUser,
  document: TransformDocument,
): { traits: Record<string, unknown>; identifiers: Record<string, string> } {
  const traits = document.traits ?? {};
  return { traits, identifiers: identifiersAfter(before.identifiers, before.traits, traits) };
}
