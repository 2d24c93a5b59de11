// The export writes each line by hand from the stored JSON text (resources/event-export.ts), to skip a
// parse and a stringify per value. This checks that shortcut against the event resource it stands for:
// the same fields, values and order as JSON.stringify(eventResource(event)) for NDJSON, and the same
// cells as the generic CSV writer, for native and Segment events with awkward text (quotes, commas,
// newlines, unicode, nested values, nulls), on both backends.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { exportLine } from '../src/resources/event-export.js';
import type { EventRecord } from '../src/storage/types.js';
import { bearer, createTestApp, dialect, type TestContext } from './helpers.js';

let ctx: TestContext;
let productId: string;
before(async () => {
  ctx = await createTestApp();
  const product = await ctx.product('export-format');
  productId = product.id;
  const awkward = {
    quote: 'say "hi", then\nleave',
    emoji: 'café ☕ 𝄞',
    nested: { list: [1, 2.5, null, true, { deep: 'x,y' }] },
    empty: {},
    n: -0.000123,
  };
  const native = await ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events/batch',
    headers: bearer(product.eventsKey),
    payload: {
      events: [
        {
          event_type: 'order',
          action: 'completed',
          subject_type: 'user',
          subject_id: 'u,1',
          external_id: 'e "1"',
          properties: awkward,
        },
        { event_type: 'page', action: 'viewed', subject_type: 'user', subject_id: 'u2' },
        // Times that PostgreSQL's reads make from milliseconds since 1970 (event-columns.ts): before 1970, with an
        // offset, and in the first century.
        {
          event_type: 'page',
          action: 'viewed',
          subject_type: 'user',
          subject_id: 'u3',
          occurred_at: '1969-12-31T23:59:59.999-01:30',
        },
        {
          event_type: 'page',
          action: 'viewed',
          subject_type: 'user',
          subject_id: 'u4',
          occurred_at: '0099-02-03T04:05:06.007Z',
        },
      ],
    },
  });
  assert.equal(native.statusCode, 200, native.body);
  const basic = `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}`;
  const segment = await ctx.app.inject({
    method: 'POST',
    url: '/v1/batch',
    headers: { authorization: basic },
    payload: {
      batch: [
        {
          type: 'track',
          event: 'Signed Up',
          userId: 'seg,"user"',
          messageId: 'm-1',
          properties: awkward,
          context: { page: { url: 'https://x.test/?a=1,2' }, locale: 'de-DE' },
          integrations: { All: true },
        },
      ],
    },
  });
  assert.equal(segment.json().accepted, 1, segment.body);
});
after(async () => ctx.close());

/** One CSV record (RFC 4180) split into its cells. */
function csvCells(line: string): string[] {
  const cells: string[] = [];
  let i = 0;
  const body = line.replace(/\r\n$/, '');
  while (i <= body.length) {
    if (body[i] === '"') {
      let cell = '';
      i++;
      for (;;) {
        const quote = body.indexOf('"', i);
        if (body[quote + 1] === '"') {
          cell += body.slice(i, quote + 1);
          i = quote + 2;
        } else {
          cell += body.slice(i, quote);
          i = quote + 2;
          break;
        }
      }
      cells.push(cell);
    } else {
      const comma = body.indexOf(',', i);
      const end = comma === -1 ? body.length : comma;
      cells.push(body.slice(i, end));
      i = end + 1;
    }
  }
  return cells;
}

describe('export lines written from the stored JSON text', () => {
  async function both(): Promise<Array<[EventRecord, EventRecord]>> {
    const query = { productId, filter: {}, order: 'asc' as const, limit: 100 };
    const parsed = await ctx.services.storage.events.page(query);
    // As the export reads: up to the end position it started at (on SQLite, the prepared range statement).
    const upTo = (await ctx.services.storage.events.endPosition(productId))!;
    const text = await ctx.services.storage.events.page({ ...query, jsonText: true, upTo });
    assert.equal(parsed.events.length, 5);
    assert.deepEqual(
      text.events.map((e) => e.position),
      parsed.events.map((e) => e.position),
      'the same events in the same order',
    );
    const paged = await ctx.services.storage.events.page({ ...query, jsonText: true, upTo, limit: 2 });
    assert.equal(paged.events.length, 2);
    const rest = await ctx.services.storage.events.page({
      ...query,
      jsonText: true,
      upTo,
      limit: 3,
      after: paged.next!,
    });
    assert.deepEqual(
      [...paged.events, ...rest.events].map((e) => e.id),
      parsed.events.map((e) => e.id),
      'paging by the next position',
    );
    assert.equal(rest.next, null);
    assert.ok(
      text.events.every((e) => e.jsonText !== undefined),
      'the export read returns the stored text',
    );
    return parsed.events.map((event, i) => [event, text.events[i]!]);
  }

  it('NDJSON: the same fields, values and order as the event resource', async () => {
    for (const [parsed, text] of await both()) {
      const generic = exportLine('ndjson', parsed);
      const fast = exportLine('ndjson', text);
      assert.ok(fast.endsWith('}\n') && !fast.slice(0, -1).includes('\n'), 'one line');
      assert.deepEqual(Object.keys(JSON.parse(fast)), Object.keys(JSON.parse(generic)), 'field order');
      assert.deepEqual(JSON.parse(fast), JSON.parse(generic));
      // SQLite keeps the text Inlet wrote (JSON.stringify's), so the lines are the same bytes there.
      if (dialect === 'sqlite') assert.equal(fast, generic);
    }
  });

  it('times read back in UTC to the millisecond, as sent (contract: YYYY-MM-DDTHH:mm:ss.sssZ), on both reads', async () => {
    const sent = {
      u3: '1970-01-01T01:29:59.999Z', // 1969-12-31T23:59:59.999-01:30
      u4: '0099-02-03T04:05:06.007Z',
    };
    for (const [parsed, text] of await both()) {
      const expected = sent[parsed.subjectId as keyof typeof sent];
      if (expected === undefined) continue;
      assert.equal(parsed.occurredAt, expected, `the list's ${parsed.subjectId}`);
      assert.equal(text.occurredAt, expected, `the export's ${parsed.subjectId}`);
      assert.match(parsed.receivedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      assert.equal(text.receivedAt, parsed.receivedAt);
    }
  });

  it('CSV: the same cells as the generic writer (JSON cells equal as JSON)', async () => {
    for (const [parsed, text] of await both()) {
      const generic = csvCells(exportLine('csv', parsed));
      const fast = csvCells(exportLine('csv', text));
      assert.equal(fast.length, generic.length);
      for (let i = 0; i < generic.length; i++) {
        if (generic[i]!.startsWith('{')) assert.deepEqual(JSON.parse(fast[i]!), JSON.parse(generic[i]!), `cell ${i}`);
        else assert.equal(fast[i], generic[i], `cell ${i}`);
      }
      if (dialect === 'sqlite') assert.equal(exportLine('csv', text), exportLine('csv', parsed));
    }
  });
});
