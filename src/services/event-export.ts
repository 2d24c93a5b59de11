// Export (events-out §5): the product's events of a range, in position order, one page at a time.
// Memory stays constant whatever the size: one page is read, written, and only then the next one is
// read (the consumer's pull drives it, so a slow client slows the export, not the heap). The export
// ends at the product's end when it started, so it terminates under a live write load and holds every
// event of the range exactly once. The text (NDJSON, CSV) is made from these pages by `exportText`
// in resources/event-export.ts: the public shape of an event belongs to the resources, not a service.
import type { EventFilter, EventRecord, Storage } from '../storage/types.js';

/** At most this many events a page. */
export const EXPORT_PAGE_MAX_EVENTS = 5000;
/**
 * About this much JSON text a page. A page is read (SQLite) and formatted without a break on the event
 * loop, so its size bounds how long an export holds up every other request: 5,000 events of 3 KB each
 * (15 MB) held the loop for 0.6 s on a loaded machine, long enough for Node to drop a connection whose
 * request it had not read yet (test/system/http-timeouts.test.ts). 1 MiB is ~1,700 events of the bench's
 * 300-byte properties, ~15 ms of formatting on this machine.
 */
export const EXPORT_PAGE_TARGET_BYTES = 1 << 20;
const FIRST_PAGE_EVENTS = 100;
const MIN_PAGE_EVENTS = 50;
/** The fixed fields of an exported event (ids, names, times) beside its JSON columns. */
const FIXED_BYTES = 250;

function textBytes(event: EventRecord): number {
  const json = event.jsonText;
  return (
    FIXED_BYTES +
    (json === undefined ? 0 : json.properties.length + (json.context?.length ?? 0) + (json.original?.length ?? 0))
  );
}

/** The events of the export, page by page; `onProgress` gets the running count after each page is consumed. */
export async function* exportPages(
  storage: Storage,
  productId: string,
  filter: EventFilter,
  onProgress?: (events: number) => void,
): AsyncGenerator<EventRecord[]> {
  const end = await storage.events.endPosition(productId);
  if (end === null) return;
  let after: string | undefined;
  let written = 0;
  let limit = FIRST_PAGE_EVENTS;
  for (;;) {
    const page = await storage.events.page({
      productId,
      filter,
      order: 'asc',
      upTo: end,
      limit,
      jsonText: true,
      ...(after === undefined ? {} : { after }),
    });
    if (page.events.length > 0) {
      // The next page is sized from this one's bytes per event.
      let bytes = 0;
      for (const event of page.events) bytes += textBytes(event);
      limit = Math.max(
        MIN_PAGE_EVENTS,
        Math.min(EXPORT_PAGE_MAX_EVENTS, Math.floor(EXPORT_PAGE_TARGET_BYTES / (bytes / page.events.length))),
      );
      written += page.events.length;
      yield page.events;
      onProgress?.(written);
    }
    if (page.next === null) return;
    after = page.next;
  }
}
