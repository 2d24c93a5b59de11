// Export (events-out §5): the product's events of a range, in position order, as text chunks of one
// page each. Memory stays constant whatever the size: one page is read, written, and only then the
// next one is read (the consumer's pull drives it, so a slow client slows the export, not the heap).
// The export ends at the product's end when it started, so it terminates under a live write load and
// holds every event of the range exactly once.
import { csvHeader, exportLine, type ExportFormat } from '../resources/event-export.js';
import type { EventFilter, Storage } from '../storage/types.js';

export const EXPORT_PAGE_SIZE = 5000;

export async function* exportChunks(
  storage: Storage,
  productId: string,
  filter: EventFilter,
  format: ExportFormat,
  onProgress?: (events: number) => void,
): AsyncGenerator<string> {
  if (format === 'csv') yield csvHeader();
  const end = await storage.events.endPosition(productId);
  if (end === null) return;
  let after: string | undefined;
  let written = 0;
  for (;;) {
    const page = await storage.events.page({ productId, filter, order: 'asc', upTo: end, limit: EXPORT_PAGE_SIZE, ...(after === undefined ? {} : { after }) });
    if (page.events.length > 0) {
      let chunk = '';
      for (const event of page.events) chunk += exportLine(format, event);
      written += page.events.length;
      yield chunk;
      onProgress?.(written);
    }
    if (page.next === null) return;
    after = page.next;
  }
}
