// Segment-compatible ingestion (segment-compat.md): translates SDK items into drafts (domain/segment),
// hands them to the one accept pipeline, then performs the identity side effects of the items that
// were stored: identify, alias, and the anonymous → user link any call carrying both ids implies.
import { AppError } from '../domain/errors.js';
import {
  SEGMENT_LIMITS,
  SEGMENT_SOURCE,
  translateSegmentItem,
  type IdentityOp,
  type SegmentCall,
  type SentJson,
} from '../domain/segment.js';
import type { IdentityService } from './identity-service.js';
import type { Candidate, IngestService } from './ingest-service.js';
import type { AuthContext } from './key-service.js';
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

export function createSegmentService(ingest: IngestService, identity: IdentityService, rejections?: RejectionService) {
  const links = new Map<string, string>();

  function remember(key: string, value: string): void {
    if (links.size >= MAX_REMEMBERED_LINKS) links.delete(links.keys().next().value as string);
    links.set(key, value);
  }

  /** Performs one identity side effect; returns the warning when it could not be done. */
  async function perform(auth: AuthContext, op: IdentityOp): Promise<AppError | undefined> {
    try {
      if (op.kind === 'identify') {
        await identity.identify(
          auth.productId,
          {
            external_id: op.externalId,
            traits: op.traits,
            ...(op.email === undefined ? {} : { identifiers: { email: op.email } }),
          },
          { identifies: op.identifiesUser },
        );
        return undefined;
      }
      const key = `${auth.productId}\u0000${op.from}`;
      const known = links.get(key);
      if (known === op.to) return undefined;
      // Through a public key, a link never merges two users that were each identified (clarifications §18).
      if (auth.kind === 'browser' && (await identity.mergesTwoIdentified(auth.productId, op.from, op.to))) {
        return new AppError(
          'identity_conflict',
          `"${op.from}" and "${op.to}" are two identified users; a browser key does not merge them.`,
        );
      }
      await identity.alias(auth.productId, { from_external_id: op.from, to_external_id: op.to });
      remember(key, op.to);
      return undefined;
    } catch (error) {
      if (!(error instanceof AppError)) throw error;
      if (error.code === 'alias_conflict' || error.code === 'identifier_conflict') {
        if (op.kind === 'link') remember(`${auth.productId}\u0000${op.from}`, op.to);
        return new AppError('identity_conflict', error.message);
      }
      return error;
    }
  }

  /**
   * Browser keys: an explicit alias, or an identify whose userId and anonymousId belong to two users that
   * were each identified, is refused before it is stored (`identified_merge_forbidden`, clarifications §18).
   */
  async function refuseIdentifiedMerges(
    auth: AuthContext,
    candidates: Candidate[],
    calls: Array<SegmentCall | undefined>,
    ops: IdentityOp[][],
  ): Promise<void> {
    for (let index = 0; index < candidates.length; index++) {
      const call = calls[index];
      if (!candidates[index]!.ok || (call !== 'identify' && call !== 'alias')) continue;
      for (const op of ops[index] ?? []) {
        if (op.kind !== 'link') continue;
        if (await identity.mergesTwoIdentified(auth.productId, op.from, op.to)) {
          candidates[index] = {
            ok: false,
            error: new AppError(
              'identified_merge_forbidden',
              `"${op.from}" and "${op.to}" are two identified users: a browser key may not merge them (do it from your server with an events key).`,
            ),
            format: 'segment',
          };
          break;
        }
      }
    }
  }

  return {
    async ingest(auth: AuthContext, request: SegmentRequest): Promise<SegmentAnswer> {
      const { items, receivedAt } = request;
      const messageIds: Array<string | null> = new Array(items.length).fill(null);
      const identityOps: IdentityOp[][] = new Array(items.length);
      const calls: Array<SegmentCall | undefined> = new Array(items.length);
      const candidates: Candidate[] = items.map((item, index): Candidate => {
        const base = request.call === undefined ? `/batch/${index}` : '';
        const bound = request.itemBytes?.[index];
        const bytes =
          bound !== undefined && bound <= SEGMENT_LIMITS.itemBytes
            ? bound
            : Buffer.byteLength(JSON.stringify(item) ?? '');
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

      if (auth.kind === 'browser') await refuseIdentifiedMerges(auth, candidates, calls, identityOps);

      const { outcomes } = await ingest.accept(auth, candidates, {
        endpoint: 'segment',
        receivedAt,
        source: SEGMENT_SOURCE,
        record: {
          route: request.route,
          item: (index) => items[index],
          messageId: (index) => messageIds[index] ?? null,
        },
      });

      const answer: SegmentAnswer = { success: true, accepted: 0, duplicates: 0, rejected: [], warnings: [] };
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
        answer.accepted++;
        for (const op of identityOps[index] ?? []) {
          const warning = await perform(auth, op);
          if (warning !== undefined)
            answer.warnings.push({ index, messageId: messageIds[index]!, code: warning.code, detail: warning.message });
        }
      }
      if (answer.warnings.length > 0) {
        rejections?.record(
          auth,
          request.route,
          answer.warnings.map((w) => ({ ...w, severity: 'warning' as const, item: items[w.index] })),
          receivedAt,
        );
      }
      return answer;
    },
  };
}

export type SegmentService = ReturnType<typeof createSegmentService>;
