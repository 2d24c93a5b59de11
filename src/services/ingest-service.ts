// The one accept pipeline (every entry point calls it): candidates → legacy policy → group-commit
// writer → one outcome per item, metrics counted once. Also counts legacy-format use.
import type { AppError } from '../domain/errors.js';
import type { NameFormat } from '../domain/event-names.js';
import type { EventDraft } from '../domain/events.js';
import { uuidv7 } from '../domain/ids.js';
import { legacyRefusal, type LegacyFlatMode } from '../domain/legacy-policy.js';
import type { EventInsert, EventRecord, InsertOutcome, LegacyUsageIncrement, Storage } from '../storage/types.js';
import { GroupCommitWriter } from './group-commit.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';
import type { RejectionEntry, RejectionService } from './rejection-service.js';

/** Events sent through the HTTP API carry this source (contract §4). */
export const API_SOURCE = 'api';

const LEGACY_FLUSH_MS = 1000;

/**
 * A SQLite commit runs on the event loop, so a huge group stalls every other request while it lasts.
 * Measured with `npm run bench -- --scenario batch` (batches of 100, 50 connections): groups capped at
 * 5000 events gave ~2,470-event commits of ~100 ms and a batch p99 of 3.2 s; capped at 400, commits of
 * ~14 ms and a p99 of 0.6–1.1 s at the same or better throughput (see bench/README.md).
 */
const SQLITE_MAX_COMMIT_EVENTS = 400;

/**
 * One item handed to `accept`, already translated by its entry point: a draft, or the reason it
 * could not become one (schema, name or size). `format` labels the metrics of a refused item.
 */
export type Candidate = { ok: true; draft: EventDraft } | { ok: false; error: AppError; format?: NameFormat | 'unknown' };

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
  /** Record every rejected item (batch routes): the route, and each item as received with its message id. */
  record?: { route: string; item(index: number): unknown; messageId(index: number): string | null };
}

export interface AcceptResult {
  /** One per candidate, in order. */
  outcomes: ItemOutcome[];
  /** Some item used the deprecated legacy flat name (accepted or refused): the answer carries the deprecation headers. */
  legacySeen: boolean;
}

export interface IngestOptions {
  legacyFlat: LegacyFlatMode;
  rejections?: RejectionService;
}

export function createIngestService(storage: Storage, metrics: Metrics, options: IngestOptions = { legacyFlat: 'accept' }) {
  const writer = new GroupCommitWriter<EventInsert, InsertOutcome>(
    (rows) => storage.events.insertMany(rows),
    { maxItems: storage.dialect === 'sqlite' ? SQLITE_MAX_COMMIT_EVENTS : 5000, maxInFlight: storage.dialect === 'sqlite' ? 1 : 4 },
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
  function commit(auth: AuthContext, drafts: EventDraft[], receivedAt: string, source: string): Promise<InsertOutcome[]> {
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
      contextJson: draft.context == null ? null : JSON.stringify(draft.context),
      originalJson: draft.original == null ? null : JSON.stringify(draft.original),
    }));
    return writer.submit(rows);
  }

  /** Counts one use of a legacy flat name (accepted or refused). */
  function noteLegacyUse(auth: AuthContext, eventName: string, at: string): void {
    addLegacyUse(`${auth.keyId}\u0000${eventName}`, { productId: auth.productId, apiKeyId: auth.keyId, eventName, count: 1, lastSeenAt: at });
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
      for (let index = 0; index < candidates.length; index++) {
        const candidate = candidates[index]!;
        if (!candidate.ok) {
          outcomes[index] = { status: 'rejected', error: candidate.error };
          formats[index] = candidate.format ?? 'unknown';
          continue;
        }
        const { name } = candidate.draft;
        formats[index] = name.nameFormat;
        if (name.nameFormat === 'legacy') {
          legacySeen = true;
          noteLegacyUse(auth, name.canonicalName, receivedAt);
          const refusal = legacyRefusal(name, options.legacyFlat);
          if (refusal !== undefined) {
            outcomes[index] = { status: 'rejected', error: refusal };
            continue;
          }
        }
        drafts.push(candidate.draft);
        draftIndexes.push(index);
      }
      if (drafts.length > 0) {
        const stored = await commit(auth, drafts, receivedAt, accept.source ?? API_SOURCE);
        for (let i = 0; i < stored.length; i++) outcomes[draftIndexes[i]!] = stored[i]!;
      }
      // Counted per (format, outcome) first: one metrics update per distinct pair, not one per item.
      const tally = new Map<string, { format: NameFormat | 'unknown'; outcome: ItemOutcome['status']; count: number }>();
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
          entries.push({ index, messageId: record.messageId(index), code: outcome.error.code, detail: outcome.error.message, severity: 'rejected', item: record.item(index) });
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
