// The export formats (events-out §5): NDJSON lines of the event resource, and CSV with a header row
// whose nested objects are JSON in their cell.
import { boundedMemo } from '../domain/bounded-memo.js';
import { stringText } from '../domain/shared-json.js';
import type { EventInsert, EventRecord } from '../storage/types.js';
import { eventResource, type EventResource } from './events.js';

export type ExportFormat = 'ndjson' | 'csv';

export const EXPORT_CONTENT_TYPES: Record<ExportFormat, string> = {
  ndjson: 'application/x-ndjson; charset=utf-8',
  csv: 'text/csv; charset=utf-8',
};

export const CSV_COLUMNS: Array<keyof EventResource> = [
  'uuid',
  'event_type',
  'action',
  'canonical_name',
  'source',
  'subject_type',
  'subject_id',
  'occurred_at',
  'received_at',
  'external_id',
  'key_id',
  'properties',
  'context',
  'original',
];

/** RFC 4180: quoted when it holds a comma, quote, CR or LF; quotes doubled. null is an empty cell. */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function csvHeader(): string {
  return `${CSV_COLUMNS.join(',')}\r\n`;
}

// The values' JSON texts, made the cheapest way that gives JSON.stringify's bytes: the export and the deliverers write
// a dozen per event, and JSON.stringify's call cost more than the rest of the message (stringText skips it for the
// strings that need no escape, most). Names, types, sources and keys are few different values: each text is made
// once (bounded). Times: events read together mostly share theirs, so the last one's text is kept (one for each
// of the two times, which mostly differ from each other).
const text = (value: string | null): string => (value === null ? 'null' : stringText(value));
const fewText = boundedMemo(1_000, text);

function lastTextKept(): (value: string) => string {
  let last = '';
  let lastText = '""';
  return (value) => (value === last ? lastText : (lastText = stringText((last = value))));
}
const occurredText = lastTextKept();
const receivedText = lastTextKept();

/** The JSON texts of an event's uuid and received_at, which a destination message also carries (messages.ts). */
export interface EventTexts {
  uuid: string;
  receivedAt: string;
}

export const eventTexts = (event: EventRecord): EventTexts => ({
  uuid: stringText(event.id),
  receivedAt: receivedText(event.receivedAt),
});

/**
 * The event resource's JSON written out by hand from a record read with `jsonText`: the stored JSON of
 * properties, context and original goes in as it is, instead of a parse and a stringify each. The same
 * fields in the same order as `JSON.stringify(eventResource(event))` (test/event-export-format.test.ts).
 */
export function eventJsonFromText(
  event: EventRecord,
  json: NonNullable<EventRecord['jsonText']>,
  texts: EventTexts = eventTexts(event),
): string {
  return (
    `{"uuid":${texts.uuid},"event_type":${fewText(event.eventType)},"action":${fewText(event.action)},"canonical_name":${fewText(event.canonicalName)}` +
    `,"source":${fewText(event.source)},"subject_type":${fewText(event.subjectType)},"subject_id":${text(event.subjectId)}` +
    `,"occurred_at":${occurredText(event.occurredAt)},"received_at":${texts.receivedAt},"external_id":${text(event.externalId)}` +
    `,"properties":${json.properties},"key_id":${fewText(event.apiKeyId)}` +
    (json.context === null ? '' : `,"context":${json.context}`) +
    (json.original === null ? '' : `,"original":${json.original}`) +
    '}'
  );
}

/**
 * The event resource's JSON from any record: the JSON text it already carries (a read with `jsonText`, or a row the
 * ingest path serialised for storage: `propertiesJson`, `contextJson`, `originalJson`) goes in as it is, the rest is
 * serialised here. The ingest answers use it: their events were serialised once for the row.
 */
export function eventJson(event: EventRecord): string {
  if (event.jsonText !== undefined) return eventJsonFromText(event, event.jsonText);
  const serialised = event as Partial<EventInsert>;
  const context = event.context ?? null;
  const original = event.original ?? null;
  return eventJsonFromText(event, {
    properties: serialised.propertiesJson ?? JSON.stringify(event.properties),
    context: context === null ? null : (serialised.contextJson ?? JSON.stringify(context)),
    original: original === null ? null : (serialised.originalJson ?? JSON.stringify(original)),
  });
}

function csvFromText(event: EventRecord, json: NonNullable<EventRecord['jsonText']>): string {
  const cells = [
    event.id,
    event.eventType,
    event.action,
    event.canonicalName,
    event.source,
    event.subjectType,
    event.subjectId,
    event.occurredAt,
    event.receivedAt,
    event.externalId,
    event.apiKeyId,
    json.properties,
    json.context,
    json.original,
  ];
  let line = '';
  for (let i = 0; i < cells.length; i++) line += (i === 0 ? '' : ',') + csvCell(cells[i]);
  return `${line}\r\n`;
}

export function exportLine(format: ExportFormat, event: EventRecord): string {
  if (event.jsonText !== undefined)
    return format === 'ndjson' ? `${eventJsonFromText(event, event.jsonText)}\n` : csvFromText(event, event.jsonText);
  const resource = eventResource(event);
  if (format === 'ndjson') return `${JSON.stringify(resource)}\n`;
  let line = '';
  for (let i = 0; i < CSV_COLUMNS.length; i++) line += (i === 0 ? '' : ',') + csvCell(resource[CSV_COLUMNS[i]!]);
  return `${line}\r\n`;
}

/** The export as text: the CSV header row (csv), then one chunk per page of events, pulled one at a time. */
export async function* exportText(pages: AsyncIterable<EventRecord[]>, format: ExportFormat): AsyncGenerator<string> {
  if (format === 'csv') yield csvHeader();
  for await (const events of pages) {
    let chunk = '';
    for (const event of events) chunk += exportLine(format, event);
    yield chunk;
  }
}
