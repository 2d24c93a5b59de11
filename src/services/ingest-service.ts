// The ingest path: drafts → rows → group-commit writer → outcomes. Also counts legacy-format use.
import type { EventDraft } from '../domain/events.js';
import { uuidv7 } from '../domain/ids.js';
import type { EventInsert, InsertOutcome, LegacyUsageIncrement, Storage } from '../storage/types.js';
import { GroupCommitWriter } from './group-commit.js';
import type { AuthContext } from './key-service.js';
import type { Metrics } from './metrics.js';

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

export function createIngestService(storage: Storage, metrics: Metrics) {
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

  async function flushLegacyUsage(): Promise<void> {
    if (legacyTimer !== undefined) clearTimeout(legacyTimer);
    legacyTimer = undefined;
    const increments = [...legacy.values()];
    legacy.clear();
    if (increments.length === 0) return;
    try {
      await storage.legacyUsage.record(increments);
    } catch (error) {
      // Storage away (a failover): keep the counts and try again, so none are lost.
      for (const increment of increments) addLegacyUse(`${increment.apiKeyId}\u0000${increment.eventName}`, increment);
      throw error;
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

  return {
    /** Stores the drafts (one commit shared with concurrent requests); outcomes in draft order. */
    async ingest(auth: AuthContext, drafts: EventDraft[], receivedAt: string): Promise<InsertOutcome[]> {
      const rows: EventInsert[] = drafts.map((draft) => ({
        id: uuidv7(),
        productId: auth.productId,
        source: API_SOURCE,
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
      }));
      return writer.submit(rows);
    },

    /** Counts one request's use of a legacy flat name (accepted or refused). */
    noteLegacyUse(auth: AuthContext, eventName: string, at: string): void {
      addLegacyUse(`${auth.keyId}\u0000${eventName}`, { productId: auth.productId, apiKeyId: auth.keyId, eventName, count: 1, lastSeenAt: at });
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
