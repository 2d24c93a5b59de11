// The one accept pipeline (every entry point calls it): candidates → legacy policy → tracking plan →
// group-commit writer → one outcome per item, metrics counted once; stored events are then counted
// into the catalogue (in memory, flushed in the background). Also counts legacy-format use.
import { AppError } from '../domain/errors.js';
import type { NameFormat } from '../domain/event-names.js';
import type { EventDraft } from '../domain/events.js';
import { uuidv7 } from '../domain/ids.js';
import { legacyRefusal, type LegacyFlatMode } from '../domain/legacy-policy.js';
import { checkEvent, checkTraits, type CompiledPlan } from '../domain/tracking-plan.js';
import type { EventInsert, EventRecord, InsertOutcome, LegacyUsageIncrement, Storage } from '../storage/types.js';
import { GroupCommitWriter } from './group-commit.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';
import type { RejectionEntry, RejectionService } from './rejection-service.js';
import type { CatalogService } from './catalog-service.js';
import { planRefusal, type TrackingPlanService, type ViolationEntry } from './tracking-plan-service.js';
import { SUPPRESSED_DETAIL } from './erasure/suppression.js';

/** Events sent through the HTTP API carry this source (contract §4). */
export const API_SOURCE = 'api';

const LEGACY_FLUSH_MS = 1000;

/**
 * One item handed to `accept`, already translated by its entry point: a draft, or the reason it
 * could not become one (schema, name or size). `format` labels the metrics of a refused item.
 */
export type Candidate =
  { ok: true; draft: EventDraft } | { ok: false; error: AppError; format?: NameFormat | 'unknown' };

export type ItemOutcome =
  | { status: 'created'; event: EventRecord }
  | { status: 'duplicate'; event: EventRecord }
  | { status: 'rejected'; error: AppError };

export interface AcceptOptions {
  /** The metrics label of the entry point: v1, v2, batch, segment. */
  endpoint: string;
  receivedAt: string;
  /** The event source, the scope of external ids (contract §4); `api` unless said otherwise. */
  source?: string;
  /**
   * Record every rejected item (batch routes): the route, and each item as received with its message id.
   * `planOnly` (single-event routes): record only the items the tracking plan refused (governance.md §2).
   */
  record?: { route: string; item(index: number): unknown; messageId(index: number): string | null; planOnly?: boolean };
}

const PLAN_CODES: ReadonlySet<string> = new Set(['tracking_plan_violation', 'unplanned_event']);

export interface AcceptResult {
  /** One per candidate, in order. */
  outcomes: ItemOutcome[];
  /** Some item used the deprecated legacy flat name (accepted or refused): the answer carries the deprecation headers. */
  legacySeen: boolean;
}

/** The suppression check of erasure (governance.md §3), given by the erasure service. */
export interface SuppressionCheck {
  suppressionCheck(productId: string): Promise<((ids: Iterable<string>) => boolean) | undefined>;
  countSuppressed(n: number): void;
}

/** The ids of a person an item names: a Segment item's userId, anonymousId, previousId; a native event's user subject. */
function personIdsOf(draft: EventDraft): string[] {
  return draft.personIds ?? (draft.subjectType === 'user' ? [draft.subjectId] : []);
}

export interface IngestOptions {
  legacyFlat: LegacyFlatMode;
  rejections?: RejectionService;
  suppressions?: SuppressionCheck;
  governance?: { catalog: CatalogService; plans: TrackingPlanService };
}

/**
 * Checks one draft against the plan: undefined when it may be stored without a word; otherwise the
 * violation to record and, in enforce, the refusal. Pointers: into the request body for the answer,
 * into the item as received for the record.
 */
function planCheck(plan: CompiledPlan, draft: EventDraft): { entry: ViolationEntry; refusal?: AppError } | undefined {
  const received = draft.received ?? { base: '', field: 'properties' as const };
  const finding =
    received.identify === true
      ? checkTraits(plan, draft.properties)
      : checkEvent(plan, draft.name.canonicalName, draft.properties);
  if (finding === undefined) return undefined;
  const field = finding.code === 'unplanned_event' ? '' : `/${received.field}`;
  // A pointer into the item: under its properties field, or where a moved property came from.
  const inItem = (pointer: string): string => {
    if (received.moved !== undefined && pointer !== '') {
      const cut = pointer.indexOf('/', 1);
      const from =
        received.moved[(cut < 0 ? pointer.slice(1) : pointer.slice(1, cut)).replace(/~1/g, '/').replace(/~0/g, '~')];
      if (from !== undefined) return `${from}${cut < 0 ? '' : pointer.slice(cut)}`;
    }
    return `${field}${pointer}`;
  };
  const errors = finding.errors.map((e) => ({ pointer: inItem(e.pointer), message: e.message }));
  const entry: ViolationEntry = {
    canonicalName: draft.name.canonicalName,
    code: finding.code,
    severity: finding.severity,
    planVersion: plan.version,
    messageId: draft.externalId,
    subjectId: draft.subjectId,
    errors,
  };
  if (finding.severity === 'warning') return { entry };
  const answered = errors.map((e) => ({ pointer: `${received.base}${e.pointer}`, message: e.message }));
  return { entry, refusal: planRefusal(finding.code, draft.name.canonicalName, answered, received.identify === true) };
}

export function createIngestService(
  storage: Storage,
  metrics: Metrics,
  options: IngestOptions = { legacyFlat: 'accept' },
) {
  // How many events a commit takes and how many commits run at once: the backend's commit policy.
  const writer = new GroupCommitWriter<EventInsert, InsertOutcome>(
    (rows) => storage.events.insertMany(rows),
    storage.capabilities.commits,
    (items, seconds) => {
      metrics.commitDuration.observe(seconds);
      metrics.commitSize.observe(items);
    },
    (error) => storage.isUnavailable(error),
  );

  // Legacy usage is counted in memory and written once a second: bookkeeping stays off the hot path.
  const legacy = new Map<string, LegacyUsageIncrement>();
  let legacyTimer: NodeJS.Timeout | undefined;
  let legacyWriting: Promise<void> | undefined;

  async function flushLegacyUsage(): Promise<void> {
    // A flush already writing (the timer's) holds counts no longer in the map: a reader waits for it.
    while (legacyWriting !== undefined) await legacyWriting.catch(() => {});
    if (legacyTimer !== undefined) clearTimeout(legacyTimer);
    legacyTimer = undefined;
    const increments = [...legacy.values()];
    legacy.clear();
    if (increments.length === 0) return;
    legacyWriting = storage.legacyUsage.record(increments);
    try {
      await legacyWriting;
    } catch (error) {
      // Storage away (a failover): keep the counts and try again, so none are lost.
      for (const increment of increments) addLegacyUse(`${increment.apiKeyId}\u0000${increment.eventName}`, increment);
      throw error;
    } finally {
      legacyWriting = undefined;
    }
  }

  function addLegacyUse(id: string, use: LegacyUsageIncrement): void {
    const entry = legacy.get(id);
    if (entry === undefined) legacy.set(id, { ...use });
    else {
      entry.count += use.count;
      if (use.lastSeenAt > entry.lastSeenAt) entry.lastSeenAt = use.lastSeenAt;
    }
    legacyTimer ??= setTimeout(() => void flushLegacyUsage().catch(() => {}), LEGACY_FLUSH_MS).unref();
  }

  /** Stores the drafts (one commit shared with concurrent requests); outcomes in draft order. */
  function commit(
    auth: AuthContext,
    drafts: EventDraft[],
    receivedAt: string,
    source: string,
  ): Promise<InsertOutcome[]> {
    const rows: EventInsert[] = drafts.map((draft) => ({
      id: uuidv7(),
      productId: auth.productId,
      source,
      externalId: draft.externalId,
      eventType: draft.name.eventType,
      action: draft.name.action,
      canonicalName: draft.name.canonicalName,
      nameFormat: draft.name.nameFormat,
      subjectType: draft.subjectType,
      subjectId: draft.subjectId,
      occurredAt: draft.occurredAt,
      receivedAt,
      properties: draft.properties,
      propertiesJson: draft.propertiesJson,
      apiKeyId: auth.keyId,
      context: draft.context ?? null,
      original: draft.original ?? null,
      contextJson: draft.context == null ? null : (draft.contextJson ?? JSON.stringify(draft.context)),
      originalJson: draft.original == null ? null : JSON.stringify(draft.original),
    }));
    return writer.submit(rows);
  }

  /** Counts one use of a legacy flat name (accepted or refused). */
  function noteLegacyUse(auth: AuthContext, eventName: string, at: string): void {
    addLegacyUse(`${auth.keyId}\u0000${eventName}`, {
      productId: auth.productId,
      apiKeyId: auth.keyId,
      eventName,
      count: 1,
      lastSeenAt: at,
    });
  }

  return {
    /**
     * The pipeline every entry point calls: applies the legacy policy, stores the drafts that pass in
     * one group commit, and counts each item once in `inlet_events_total`. A single-event route is a
     * batch of one. Throws only when storage fails (nothing of the request was stored then).
     */
    async accept(auth: AuthContext, candidates: Candidate[], accept: AcceptOptions): Promise<AcceptResult> {
      const { receivedAt, endpoint } = accept;
      const outcomes: Array<ItemOutcome | undefined> = new Array(candidates.length);
      const formats: Array<NameFormat | 'unknown'> = new Array(candidates.length);
      const drafts: EventDraft[] = [];
      const draftIndexes: number[] = [];
      let legacySeen = false;
      // The plan is cached per instance: a Map lookup, or one query the first time this instance sees the product.
      const plan =
        options.governance === undefined ? undefined : await options.governance.plans.planFor(auth.productId);
      const checking = plan !== undefined && plan.mode !== 'off';
      const violations: ViolationEntry[] = [];
      // Erasure: undefined unless the product has suppressed ids (then one HMAC per id an item names).
      const suppressed =
        options.suppressions === undefined ? undefined : await options.suppressions.suppressionCheck(auth.productId);
      let suppressedCount = 0;
      for (let index = 0; index < candidates.length; index++) {
        const candidate = candidates[index]!;
        if (!candidate.ok) {
          outcomes[index] = { status: 'rejected', error: candidate.error };
          formats[index] = candidate.format ?? 'unknown';
          continue;
        }
        const { name } = candidate.draft;
        formats[index] = name.nameFormat;
        if (suppressed !== undefined && suppressed(personIdsOf(candidate.draft))) {
          // Before the plan and the legacy count: nothing of the item is kept (governance.md §3).
          outcomes[index] = { status: 'rejected', error: new AppError('subject_suppressed', SUPPRESSED_DETAIL) };
          suppressedCount++;
          continue;
        }
        if (name.nameFormat === 'legacy') {
          legacySeen = true;
          noteLegacyUse(auth, name.canonicalName, receivedAt);
          const refusal = legacyRefusal(name, options.legacyFlat);
          if (refusal !== undefined) {
            outcomes[index] = { status: 'rejected', error: refusal };
            continue;
          }
        }
        if (checking) {
          const found = planCheck(plan, candidate.draft);
          if (found !== undefined) {
            violations.push(found.entry);
            if (found.refusal !== undefined) {
              outcomes[index] = { status: 'rejected', error: found.refusal };
              continue;
            }
          }
        }
        drafts.push(candidate.draft);
        draftIndexes.push(index);
      }
      if (drafts.length > 0) {
        const stored = await commit(auth, drafts, receivedAt, accept.source ?? API_SOURCE);
        const created: EventRecord[] = [];
        for (let i = 0; i < stored.length; i++) {
          const outcome = stored[i]!;
          outcomes[draftIndexes[i]!] = outcome;
          if (outcome.status !== 'created') continue;
          created.push(outcome.event);
          if (drafts[i]!.received?.identify === true)
            options.governance?.catalog.observeTraits(auth.productId, drafts[i]!.properties, receivedAt);
        }
        options.governance?.catalog.observeEvents(auth.productId, created);
      }
      if (suppressedCount > 0) options.suppressions!.countSuppressed(suppressedCount);
      if (violations.length > 0)
        options.governance!.plans.record(auth, accept.record?.route ?? endpoint, violations, receivedAt, plan!);
      // Counted per (format, outcome) first: one metrics update per distinct pair, not one per item.
      const tally = new Map<
        string,
        { format: NameFormat | 'unknown'; outcome: ItemOutcome['status']; count: number }
      >();
      for (let index = 0; index < outcomes.length; index++) {
        const format = formats[index]!;
        const outcome = outcomes[index]!.status;
        const key = `${format}/${outcome}`;
        const entry = tally.get(key);
        if (entry === undefined) tally.set(key, { format, outcome, count: 1 });
        else entry.count++;
      }
      for (const { format, outcome, count } of tally.values()) metrics.events.inc({ endpoint, format, outcome }, count);
      const { record } = accept;
      if (record !== undefined && options.rejections !== undefined) {
        const entries: RejectionEntry[] = [];
        outcomes.forEach((outcome, index) => {
          if (outcome?.status !== 'rejected') return;
          if (outcome.error.code === 'subject_suppressed') {
            // Recorded without the item and its message id: they belong to the erased person.
            entries.push({
              index,
              messageId: null,
              code: outcome.error.code,
              detail: outcome.error.message,
              severity: 'rejected',
              item: null,
            });
            return;
          }
          if (record.planOnly === true && !PLAN_CODES.has(outcome.error.code)) return;
          entries.push({
            index,
            messageId: record.messageId(index),
            code: outcome.error.code,
            detail: outcome.error.message,
            severity: 'rejected',
            item: record.item(index),
          });
        });
        options.rejections.record(auth, record.route, entries, receivedAt);
      }
      return { outcomes: outcomes as ItemOutcome[], legacySeen };
    },

    async legacyUsage(productId: string) {
      await flushLegacyUsage();
      return storage.legacyUsage.list(productId);
    },

    /** Waits for every accepted event to be committed, then writes pending bookkeeping. */
    async close(): Promise<void> {
      await writer.drain();
      await flushLegacyUsage();
    },
  };
}

export type IngestService = ReturnType<typeof createIngestService>;
