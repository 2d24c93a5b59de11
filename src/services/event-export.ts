// Export (events-out §5): the product's events of a range, in position order, one page at a time.
// Memory stays constant whatever the size: one page is read, written, and only then the next one is
// read (the consumer's pull drives it, so a slow client slows the export, not the heap). The export
// ends at the product's end when it started, so it terminates under a live write load and holds every
// event of the range exactly once. The text (NDJSON, CSV) is made from these pages by `exportText`
// in resources/event-export.ts: the public shape of an event belongs to the resources, not a service.
import type { EventFilter, EventRecord, Storage } from '../storage/types.js';

export const EXPORT_PAGE_SIZE = 5000;

/** The events of the export, page by page; `onProgress` gets the running count after each page is consumed. */
export async function* exportPages(storage: Storage, productId: string, filter: EventFilter, onProgress?: (events: number) => void): AsyncGenerator<EventRecord[]> {
  const end = await storage.events.endPosition(productId);
  if (end === null) return;
  let after: string | undefined;
  let written = 0;
  for (;;) {
    const page = await storage.events.page({ productId, filter, order: 'asc', upTo: end, limit: EXPORT_PAGE_SIZE, jsonText: true, ...(after === undefined ? {} : { after }) });
    if (page.events.length > 0) {
      written += page.events.length;
      yield page.events;
      onProgress?.(written);
    }
    if (page.next === null) return;
    after = page.next;
  }
}
