// Stage: the write. The items still standing go into one group commit shared with concurrent requests; each
// gets its outcome (created, or a duplicate of the event stored under its external id: idempotency lives in
// the store's unique key, so a retry is a duplicate whatever the stages before did).
import type { EventDraft } from '../../domain/events.js';
import { uuidv7 } from '../../domain/ids.js';
import type { EventInsert, InsertOutcome, Storage } from '../../storage/types.js';
import { GroupCommitWriter } from '../group-commit.js';
import type { AuthContext } from '../key-service.js';
import type { Metrics } from '../metrics.js';
import { API_SOURCE, type Stage } from './types.js';

export type EventWriter = GroupCommitWriter<EventInsert, InsertOutcome>;

/** The group-commit writer of the events: how many a commit takes and how many run at once is the backend's policy. */
export function createEventWriter(storage: Storage, metrics: Metrics): EventWriter {
  return new GroupCommitWriter<EventInsert, InsertOutcome>(
    (rows) => storage.events.insertMany(rows),
    storage.capabilities.commits,
    (items, seconds) => {
      metrics.commitDuration.observe(seconds);
      metrics.commitSize.observe(items);
    },
    (error) => storage.isUnavailable(error),
  );
}

function rowOf(auth: AuthContext, draft: EventDraft, receivedAt: string, source: string, id?: string): EventInsert {
  return {
    id: id ?? uuidv7(),
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
    propertiesJson: draft.propertiesJson ?? JSON.stringify(draft.properties),
    apiKeyId: auth.keyId,
    context: draft.context ?? null,
    original: draft.original ?? null,
    contextJson: draft.context == null ? null : (draft.contextJson ?? JSON.stringify(draft.context)),
    originalJson: draft.original == null ? null : JSON.stringify(draft.original),
  };
}

export function writeStage(writer: EventWriter): Stage {
  return async function write(run) {
    if (run.items.length === 0) return;
    const { auth, options } = run;
    const source = options.source ?? API_SOURCE;
    const stored = await writer.submit(
      run.items.map((item) => rowOf(auth, item.draft, options.receivedAt, source, item.eventId)),
    );
    for (let i = 0; i < stored.length; i++) run.outcomes[run.items[i]!.index] = stored[i]!;
  };
}
