// The public shape of an event record (contract §4, "Record", plus key_id of events-out §2): the same in
// ingest answers, admin reads, the live stream and exports.
import type { EventRecord } from '../storage/types.js';

export interface EventResource {
  uuid: string;
  event_type: string;
  action: string;
  canonical_name: string;
  source: string;
  subject_type: string;
  subject_id: string;
  occurred_at: string;
  received_at: string;
  external_id: string | null;
  properties: Record<string, unknown>;
  key_id: string | null;
  /** Events of the Segment routes only (events-out §2): the item's context, and what else it carried. */
  context?: Record<string, unknown>;
  original?: Record<string, unknown>;
}

export function eventResource(event: EventRecord): EventResource {
  const resource: EventResource = {
    uuid: event.id,
    event_type: event.eventType,
    action: event.action,
    canonical_name: event.canonicalName,
    source: event.source,
    subject_type: event.subjectType,
    subject_id: event.subjectId,
    occurred_at: event.occurredAt,
    received_at: event.receivedAt,
    external_id: event.externalId,
    properties: event.properties,
    key_id: event.apiKeyId,
  };
  if (event.context != null) resource.context = event.context;
  if (event.original != null) resource.original = event.original;
  return resource;
}
