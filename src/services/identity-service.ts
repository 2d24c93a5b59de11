// Identity (contract §6): the one entry every identify and alias goes through (`apply`, the pipeline of
// identity-pipeline.ts, whose change stage is identity-changes.ts), and the reads of users.
import { AppError, validationError } from '../domain/errors.js';
import { IDENTIFIER_KIND_PATTERN_SOURCE, normalizeIdentifierValue } from '../domain/identity.js';
import type { EventRecord, ResolvedUser, Storage } from '../storage/types.js';
import { createIdentityChanges } from './identity-changes.js';
import { createIdentityPipeline, type IdentityPipelineDependencies } from './identity-pipeline.js';

export interface UserDetails extends ResolvedUser {
  /** Most recent first: events whose subject is this user under its external id or any alias. */
  events: EventRecord[];
  /** The stored flag of clarifications §18: a native identify, or a Segment identify with a userId, named them. */
  identified: boolean;
}

/** `dependencies`: what the pipeline's stages use besides the identity store (erasure, governance, rejections). */
export function createIdentityService(storage: Storage, dependencies: Omit<IdentityPipelineDependencies, 'changes'>) {
  const changes = createIdentityChanges(storage.identity);
  const pipeline = createIdentityPipeline({ ...dependencies, changes });

  async function userDetails(productId: string, externalId: string, eventsLimit: number): Promise<UserDetails> {
    const resolved = await storage.identity.getUser(productId, externalId);
    if (resolved === undefined)
      throw new AppError('not_found', `No user with external id "${externalId}" in product "${productId}".`);
    const { user } = resolved;
    const events = await storage.events.listBySubjects(
      productId,
      'user',
      [user.externalId, ...user.aliases],
      eventsLimit,
    );
    const status = await storage.identity.identifiedStatus(productId, [user.externalId]);
    return { ...resolved, events, identified: status.get(user.externalId)?.identified ?? false };
  }

  return {
    /**
     * Every identify and alias of the routes and of Segment items: browser-key rule, suppression, the product's
     * transformation (a native identify's), tracking plan, the change and the catalogue, in the pipeline's order.
     * Throws the refusal as an AppError; an identify a step dropped answers `{ dropped, step }`.
     */
    apply: pipeline.apply,

    /** The refusal a Segment identify or alias item gets before it is stored, if any (asked by accept, after the steps). */
    admit: pipeline.admit,

    /** The change alone, without the stages before it: for callers that are the product's own server code (tests, tools). */
    identify: changes.identify,
    alias: changes.alias,

    /** The user an external id resolves to, its merge history and its most recent events; not_found if unknown. */
    getUser: userDetails,

    /**
     * The user holding an identifier, given as `kind:value` (split at the first colon; the value is
     * normalised as identify stores it, so `email:Ada@Example.com` finds `ada@example.com`).
     */
    async getUserByIdentifier(productId: string, identifier: string, eventsLimit: number): Promise<UserDetails> {
      const colon = identifier.indexOf(':');
      const kind = colon < 0 ? '' : identifier.slice(0, colon);
      const value = colon < 0 ? '' : identifier.slice(colon + 1);
      if (!new RegExp(IDENTIFIER_KIND_PATTERN_SOURCE).test(kind) || value.length === 0) {
        throw validationError([{ pointer: '/identifier', message: 'must be kind:value, e.g. email:ada@example.com' }]);
      }
      const normalized = normalizeIdentifierValue(kind, value);
      const externalId = await storage.identity.externalIdByIdentifier(productId, kind, normalized);
      if (externalId === undefined)
        throw new AppError('not_found', `No user with identifier ${kind} "${normalized}" in product "${productId}".`);
      return userDetails(productId, externalId, eventsLimit);
    },
  };
}

export type IdentityService = ReturnType<typeof createIdentityService>;
