// The export's pages (events-out §5) are bounded in bytes as well as in events: each page is read and
// formatted without a break on the event loop, so a page of large events must not hold up every other
// request (services/event-export.ts). Every event still comes exactly once, in position order.
import { strict as assert } from 'node:assert';
import { after, before, it } from 'node:test';
import { EXPORT_PAGE_MAX_EVENTS, EXPORT_PAGE_TARGET_BYTES } from '../src/services/event-export.js';
import type { Services } from '../src/services.js';
import type { EventInsert } from '../src/storage/types.js';
import { createTestServices } from './helpers.js';
import { eventRow } from './event-rows.js';

let services: Services;
let close: () => Promise<void>;
let productId: string;
const LARGE = 600;
const SMALL = 6000;

function rows(count: number, propertyBytes: number, tag: string): EventInsert[] {
  const properties = { text: 'x'.repeat(propertyBytes) };
  const propertiesJson = JSON.stringify(properties);
  return Array.from({ length: count }, (_, i) =>
    eventRow(productId, `${tag}-${i}`, {
      eventType: tag,
      action: 'loaded',
      canonicalName: `${tag}_loaded`,
      subjectId: `u-${i % 10}`,
      properties,
      propertiesJson,
    }),
  );
}

before(async () => {
  const created = await createTestServices();
  services = created.services;
  close = created.close;
  productId = 'prd_exportpages';
  await services.storage.products.create({
    id: productId,
    name: 'export pages',
    createdAt: new Date().toISOString(),
    retentionEventsDays: null,
  });
  // 600 events of ~10 KB (6 MB), then 6,000 small ones.
  await services.storage.events.insertMany(rows(LARGE, 10_000, 'large'));
  for (let i = 0; i < SMALL; i += 1000)
    await services.storage.events.insertMany(
      rows(1000, 20, 'small').map((r, j) => ({ ...r, externalId: `small-${i + j}` })),
    );
});
after(() => close());

it('pages hold about 1 MiB of JSON text at most (or 5,000 events), and every event comes once, in position order', async () => {
  const pages: Array<{ events: number; bytes: number }> = [];
  const ids: string[] = [];
  for await (const page of services.events.reads.exportPages(productId, {})) {
    let bytes = 0;
    for (const event of page) {
      bytes += event.jsonText!.properties.length;
      ids.push(event.externalId!);
    }
    pages.push({ events: page.length, bytes });
  }
  // Stored one insert after the other, so position order is the order of insertion.
  const expected = [
    ...Array.from({ length: LARGE }, (_, i) => `large-${i}`),
    ...Array.from({ length: SMALL }, (_, i) => `small-${i}`),
  ];
  assert.deepEqual(ids, expected);
  for (const page of pages) {
    assert.ok(page.events <= EXPORT_PAGE_MAX_EVENTS, `a page of ${page.events} events`);
    // The first page (100 events) is sized before any event was seen, the others from the bytes seen.
    assert.ok(page.bytes <= EXPORT_PAGE_TARGET_BYTES * 1.1, `a page of ${page.bytes} bytes`);
  }
  // The large events come in pages of ~100, the small ones in pages of thousands.
  assert.ok(pages.length >= 6 && pages.length <= 20, `${pages.length} pages: ${JSON.stringify(pages)}`);
});
