// The change stage of the identity pipeline (contract §6): validates with the domain rules, asks the identity
// store, and turns its outcomes into answers. Conflicts come back from storage as values; here they become the
// 409 errors of the contract, with their details as extra members of the problem body.
import { AppError, validationError, type FieldError } from '../domain/errors.js';
import {
  checkExternalId,
  validateIdentifiers,
  validateTraits,
  type IdentifierConflict,
  type IdentifierPatch,
  type TraitPatch,
} from '../domain/identity.js';
import type { IdentityStore, UserRecord } from '../storage/types.js';

export interface IdentifyRequest {
  external_id: string;
  identifiers?: Record<string, unknown> | undefined;
  traits?: Record<string, unknown> | undefined;
}

export interface AliasRequest {
  from_external_id: string;
  to_external_id: string;
}

export function identifierConflictError(conflicts: IdentifierConflict[]): AppError {
  const first = conflicts[0];
  const detail =
    first === undefined
      ? 'An identifier belongs to another user.'
      : `Identifier ${first.kind} "${first.value}" belongs to the user "${first.externalId}"${conflicts.length > 1 ? ` (and ${conflicts.length - 1} more conflicts)` : ''}; nothing was changed.`;
  return new AppError('identifier_conflict', detail, {
    extras: { conflicts: conflicts.map((c) => ({ kind: c.kind, value: c.value, external_id: c.externalId })) },
  });
}

export function aliasConflictError(from: string, to: string, mergedInto: string): AppError {
  return new AppError(
    'alias_conflict',
    `"${from}" is already merged into the user "${mergedInto}", so it cannot become an alias of "${to}"; nothing was changed.`,
    {
      extras: { from_external_id: from, merged_into: mergedInto, to_external_id: to },
    },
  );
}

export function createIdentityChanges(store: IdentityStore) {
  return {
    /**
     * Creates or updates a user; `created` tells which. Throws validation_error or identifier_conflict.
     * `identifies` (default true) flags the user as identified (clarifications §18): every native identify
     * does, a Segment identify only when it carries a userId.
     */
    async identify(
      productId: string,
      request: IdentifyRequest,
      options: { identifies?: boolean } = {},
    ): Promise<{ created: boolean; user: UserRecord }> {
      const errors: FieldError[] = [];
      const externalIdError = checkExternalId(request.external_id, '/external_id');
      if (externalIdError) errors.push(externalIdError);
      let identifiers: IdentifierPatch = {};
      if (request.identifiers !== undefined) {
        const checked = validateIdentifiers(request.identifiers);
        if (checked.ok) identifiers = checked.value;
        else errors.push(...checked.errors);
      }
      let traits: TraitPatch = {};
      if (request.traits !== undefined) {
        const checked = validateTraits(request.traits);
        if (checked.ok) traits = checked.value;
        else errors.push(...checked.errors);
      }
      if (errors.length > 0) throw validationError(errors);

      const outcome = await store.identify(
        productId,
        { externalId: request.external_id, identifiers, traits },
        new Date().toISOString(),
      );
      if (outcome.status === 'identifier_conflict') throw identifierConflictError(outcome.conflicts);
      if (options.identifies !== false)
        await store.markIdentified(productId, request.external_id, new Date().toISOString());
      return { created: outcome.status === 'created', user: outcome.user };
    },

    /** Merges `from` into `to` (idempotent). Throws validation_error, alias_conflict or identifier_conflict. */
    async alias(productId: string, request: AliasRequest): Promise<UserRecord> {
      const errors = [
        checkExternalId(request.from_external_id, '/from_external_id'),
        checkExternalId(request.to_external_id, '/to_external_id'),
      ].filter((e): e is FieldError => e !== undefined);
      if (errors.length === 0 && request.from_external_id === request.to_external_id) {
        errors.push({ pointer: '/to_external_id', message: 'must differ from from_external_id' });
      }
      if (errors.length > 0) throw validationError(errors);

      const before = await store.identifiedStatus(productId, [request.from_external_id]);
      const outcome = await store.alias(
        productId,
        request.from_external_id,
        request.to_external_id,
        new Date().toISOString(),
      );
      // The merged user is identified when the id merged into it was.
      if (outcome.status === 'merged' && before.get(request.from_external_id)?.identified === true) {
        await store.markIdentified(productId, request.to_external_id, new Date().toISOString());
      }
      switch (outcome.status) {
        case 'merged':
        case 'unchanged':
          return outcome.user;
        case 'alias_conflict':
          throw aliasConflictError(request.from_external_id, request.to_external_id, outcome.mergedInto);
        case 'identifier_conflict':
          throw identifierConflictError(outcome.conflicts);
      }
    },

    /** Whether `a` and `b` belong to two different users that have each been identified. */
    async mergesTwoIdentified(productId: string, a: string, b: string): Promise<boolean> {
      const status = await store.identifiedStatus(productId, [a, b]);
      const x = status.get(a);
      const y = status.get(b);
      return x !== undefined && y !== undefined && x.userId !== y.userId && x.identified && y.identified;
    },
  };
}

export type IdentityChanges = ReturnType<typeof createIdentityChanges>;
