// Segment-compatible ingestion (segment-compat.md): translates SDK items into drafts (domain/segment),
// hands them to the one accept pipeline, then hands the identity side effects of the items that were
// stored to the identity pipeline: identify, alias, and the anonymous → user link any call carrying both
// ids implies. The accept pipeline already ran suppression, the transformation, the tracking plan and the
// catalogue on each item, and asked the identity pipeline's refusal of an identify or alias item (`admit`)
// between the transformation and the plan.
import { AppError } from '../domain/errors.js';
import type { IdentityOperation } from '../domain/identity.js';
import { REDACTED } from '../domain/transform-engine.js';
import {
  SEGMENT_LIMITS,
  SEGMENT_SOURCE,
  translateSegmentItem,
  type SegmentCall,
  type SentJson,
} from '../domain/segment.js';
import type { IdentityEntry } from './identity-pipeline.js';
import type { IdentityService } from './identity-service.js';
import type { AcceptOptions, Candidate, IngestService } from './ingest/service.js';
import type { AuthContext } from './key-service.js';
import type { EventRecord } from '../storage/types.js';
import type { RejectionService } from './rejection-service.js';

export interface SegmentItemProblem {
  index: number;
  messageId: string | null;
  code: string;
  detail: string;
}

/** The 200 answer of every Segment route; SDKs ignore it, people and tests read it. */
export interface SegmentAnswer {
  success: true;
  accepted: number;
  duplicates: number;
  rejected: SegmentItemProblem[];
  /** Items stored whose identity side effect failed (`identity_conflict`): counted as accepted. */
  warnings: SegmentItemProblem[];
}

export interface SegmentRequest {
  /** The call implied by the route; undefined for a batch (each item names its `type`). */
  call: SegmentCall | undefined;
  items: unknown[];
  receivedAt: string;
  /** The route, as recorded with rejections. */
  route: string;
  /** The client's address (browser keys: filled into `context.ip` when the item has none). */
  clientIp?: string;
  batch?: { sentAt?: unknown; context?: unknown; integrations?: unknown };
  /** Every value of the request is storable as sent (`SegmentBodyScan.plain`): the per-value walk is skipped. */
  storable?: boolean;
  /** Each item's JSON bytes, or an upper bound on them (from the body's text): an item within the limit is not serialised again to be measured. */
  itemBytes?: number[];
  /** Each item's `properties` and `context` as the JSON text they arrived in (`sentFieldsJson`). */
  sentJson?: (index: number) => SentJson | undefined;
}

/** Links already made, so that an anonymous → user link costs one identity transaction, not one per event. */
const MAX_REMEMBERED_LINKS = 100_000;

type AliasOperation = Extract<IdentityOperation, { kind: 'alias' }>;

/** The aliases already made (or refused for good by a conflict), per product: each is asked of the identity pipeline once. */
function createLinkMemory() {
  const links = new Map<string, string>();
  const keyOf = (productId: string, op: AliasOperation) => `${productId}\u0000${op.from}`;
  return {
    known(productId: string, op: AliasOperation): boolean {
      return links.get(keyOf(productId, op)) === op.to;
    },
    remember(productId: string, op: AliasOperation): void {
      if (links.size >= MAX_REMEMBERED_LINKS) links.delete(links.keys().next().value as string);
      links.set(keyOf(productId, op), op.to);
    },
  };
}

type LinkMemory = ReturnType<typeof createLinkMemory>;

/** Each item translated (or refused for its size), with what the steps after `accept` need of it. */
interface TranslatedItems {
  candidates: Candidate[];
  messageIds: Array<string | null>;
  identityOps: IdentityOperation[][];
  calls: Array<SegmentCall | undefined>;
}

function translateItems(auth: AuthContext, request: SegmentRequest): TranslatedItems {
  const { items, receivedAt } = request;
  const messageIds: Array<string | null> = new Array(items.length).fill(null);
  const identityOps: IdentityOperation[][] = new Array(items.length);
  const calls: Array<SegmentCall | undefined> = new Array(items.length);
  const candidates: Candidate[] = items.map((item, index): Candidate => {
    const base = request.call === undefined ? `/batch/${index}` : '';
    const bound = request.itemBytes?.[index];
    const bytes =
      bound !== undefined && bound <= SEGMENT_LIMITS.itemBytes ? bound : Buffer.byteLength(JSON.stringify(item) ?? '');
    if (bytes > SEGMENT_LIMITS.itemBytes) {
      const id = (item as { messageId?: unknown } | null)?.messageId;
      messageIds[index] = typeof id === 'string' ? id.slice(0, 255) : null;
      return {
        ok: false,
        error: new AppError(
          'payload_too_large',
          `The item is ${bytes} bytes of JSON; one event may be at most ${SEGMENT_LIMITS.itemBytes}.`,
          {
            errors: [{ pointer: base, message: `larger than ${SEGMENT_LIMITS.itemBytes} bytes` }],
          },
        ),
        format: 'segment',
      };
    }
    const translated = translateSegmentItem(item, {
      call: request.call,
      base,
      receivedAt,
      keyId: auth.keyId,
      browser: auth.kind === 'browser',
      storable: request.storable === true,
      sentJson: request.sentJson?.(index),
      ...(request.clientIp === undefined ? {} : { clientIp: request.clientIp }),
      ...(request.batch === undefined ? {} : { batch: request.batch }),
    });
    messageIds[index] = translated.messageId ?? null;
    if (!translated.ok) return { ok: false, error: translated.error, format: 'segment' };
    identityOps[index] = translated.identity;
    calls[index] = translated.call;
    return { ok: true, draft: translated.draft };
  });
  return { candidates, messageIds, identityOps, calls };
}

/**
 * An operation as the product's transformation left its item: where it named the item's subject as received (an
 * identify's external id, the target of an alias or of the link a call with both ids implies), it names the subject
 * as the steps left it, so a step that changed `subject_id` (a masked userId) changes it there too. A group's
 * subject is its groupId, which its link between the user's ids does not name.
 */
function withSubject(op: IdentityOperation, before: string, after: string): IdentityOperation {
  if (before === after) return op;
  if (op.kind === 'alias') return op.to === before ? { ...op, to: after } : op;
  return op.externalId === before ? { ...op, externalId: after } : op;
}

/** The subject of a translated item as received (before the product's transformation). */
function subjectAsReceived(candidate: Candidate | undefined): string | undefined {
  return candidate?.ok === true ? candidate.draft.subjectId : undefined;
}

/**
 * The refusal an identify or alias item gets before anything is stored, if any (a browser key merging two
 * identified users, clarifications §18): asked by accept once suppression and the transformation ran, of the
 * operations as the steps left the item, so that the refusal is recorded with the item masked. Undefined when the
 * request has no such item.
 */
function identityAdmission(
  identity: Pick<IdentityService, 'admit'>,
  auth: AuthContext,
  translated: TranslatedItems,
  entry: IdentityEntry,
): AcceptOptions['admit'] {
  const { candidates, calls, identityOps } = translated;
  const identityCall = (call: SegmentCall | undefined) => call === 'identify' || call === 'alias';
  if (!calls.some(identityCall)) return undefined;
  return async (index, draft) => {
    const received = subjectAsReceived(candidates[index]);
    if (!identityCall(calls[index]) || received === undefined) return undefined;
    for (const op of identityOps[index] ?? []) {
      const refusal = await identity.admit(auth, withSubject(op, received, draft.subjectId), entry);
      if (refusal !== undefined) return refusal;
    }
    return undefined;
  };
}

/** Performs one identity side effect of a stored item; returns the warning when it could not be done. */
async function performIdentity(
  identity: Pick<IdentityService, 'apply'>,
  links: LinkMemory,
  auth: AuthContext,
  op: IdentityOperation,
  entry: IdentityEntry,
): Promise<AppError | undefined> {
  if (op.kind === 'alias' && links.known(auth.productId, op)) return undefined;
  try {
    await identity.apply(auth, op, entry);
    if (op.kind === 'alias') links.remember(auth.productId, op);
    return undefined;
  } catch (error) {
    if (!(error instanceof AppError)) throw error;
    if (error.code === 'alias_conflict' || error.code === 'identifier_conflict') {
      if (op.kind === 'alias') links.remember(auth.productId, op);
      return new AppError('identity_conflict', error.message);
    }
    return error;
  }
}

/**
 * An identify as its event was stored: the traits (and the e-mail they imply) of the stored event, so that what
 * the product's transformation changed or masked is what the user record gets (transformations.md §8). A redacted
 * e-mail is no identifier; a hashed one is the hash.
 */
function asStored(op: IdentityOperation, received: string, event: EventRecord): IdentityOperation {
  // An alias links to the item's subject (its userId), as the steps left it: a masked userId links as its hash.
  const stored = withSubject(op, received, event.subjectId);
  if (stored.kind !== 'identify') return stored;
  const traits = event.properties;
  const email = traits.email;
  const implied =
    stored.identifiesUser === true && typeof email === 'string' && email !== REDACTED ? { email } : undefined;
  return { ...stored, traits, impliedIdentifiers: implied };
}

/**
 * A stored item as its identity warning records it: the item as the product's transformation left it (its stored
 * properties or traits and context, beside the rest of what it carried), never as received, so that a value a
 * step masked does not reach the rejections list by this path (transformations.md §1).
 */
function itemAsStored(event: EventRecord): Record<string, unknown> {
  const original = event.original ?? {};
  const hasTraits = original.type === 'identify' || original.type === 'group';
  return {
    ...original,
    [hasTraits ? 'traits' : 'properties']: event.properties,
    ...(event.context == null ? {} : { context: event.context }),
  };
}

export function createSegmentService(
  ingest: Pick<IngestService, 'accept'>,
  identity: Pick<IdentityService, 'apply' | 'admit'>,
  rejections?: Pick<RejectionService, 'record'>,
) {
  const links = createLinkMemory();

  return {
    async ingest(auth: AuthContext, request: SegmentRequest): Promise<SegmentAnswer> {
      const { items, receivedAt, route } = request;
      const translated = translateItems(auth, request);
      const { candidates, messageIds, identityOps } = translated;
      const admit = identityAdmission(identity, auth, translated, { route, receivedAt, segmentItem: 'before' });

      const { outcomes } = await ingest.accept(auth, candidates, {
        endpoint: 'segment',
        maxEventBytes: SEGMENT_LIMITS.itemBytes,
        receivedAt,
        source: SEGMENT_SOURCE,
        record: {
          route,
          item: (index) => items[index],
          messageId: (index) => messageIds[index] ?? null,
        },
        ...(admit === undefined ? {} : { admit }),
      });

      const answer: SegmentAnswer = { success: true, accepted: 0, duplicates: 0, rejected: [], warnings: [] };
      const stored: IdentityEntry = { route, receivedAt, segmentItem: 'stored' };
      const warned = new Map<number, EventRecord>();
      for (let index = 0; index < outcomes.length; index++) {
        const outcome = outcomes[index]!;
        if (outcome.status === 'rejected') {
          answer.rejected.push({
            index,
            messageId: messageIds[index]!,
            code: outcome.error.code,
            detail: outcome.error.message,
          });
          continue;
        }
        if (outcome.status === 'duplicate') {
          // A repeat is not performed again.
          answer.duplicates++;
          continue;
        }
        // SDKs expect success: an item the product's transformation dropped counts as accepted (transformations.md §5).
        answer.accepted++;
        if (outcome.status === 'dropped') continue;
        const received = subjectAsReceived(candidates[index]) ?? outcome.event.subjectId;
        for (const op of identityOps[index] ?? []) {
          const warning = await performIdentity(identity, links, auth, asStored(op, received, outcome.event), stored);
          if (warning === undefined) continue;
          answer.warnings.push({ index, messageId: messageIds[index]!, code: warning.code, detail: warning.message });
          warned.set(index, outcome.event);
        }
      }
      if (answer.warnings.length > 0) {
        rejections?.record(
          auth,
          route,
          answer.warnings.map((w) => ({
            ...w,
            severity: 'warning' as const,
            item: itemAsStored(warned.get(w.index)!),
          })),
          receivedAt,
        );
      }
      return answer;
    },
  };
}

export type SegmentService = ReturnType<typeof createSegmentService>;
