// Admin reads of events (events-out §3, §5): every filter in both orders, cursors, the user filter
// through identity, product isolation, 400s, one event by uuid, exports; on the dialect under test.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { gunzipSync } from 'node:zlib';
import type { LightMyRequestResponse } from 'fastify';
import type { EventResource } from '../src/resources/events.js';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

type Product = Awaited<ReturnType<TestContext['product']>>;
/** The public event shape, imported so the test cannot drift from what the API promises. */
type Event = EventResource;

let ctx: TestContext;
let a: Product;
let b: Product;
let keyIdA: string;
/** Product A's events in the order they were stored (= position order: each batch awaited). */
const stored: Event[] = [];

const NAMES = ['project.created', 'project.deleted', 'invoice.paid', 'user.signed_up'];
const canonical = (name: string) => name.replace('.', '_');

function list(productId: string, query: Record<string, string>): Promise<LightMyRequestResponse> {
  return ctx.app.inject({
    method: 'GET',
    url: `/admin/v1/products/${productId}/events`,
    query,
    headers: adminHeaders(),
  });
}

async function listAll(productId: string, query: Record<string, string>): Promise<Event[]> {
  const seen: Event[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 1000; pages++) {
    const res = await list(productId, { ...query, ...(cursor === null ? {} : { cursor }) });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { data: Event[]; meta: { next_cursor: string | null } };
    seen.push(...body.data);
    cursor = body.meta.next_cursor;
    if (cursor === null) return seen;
  }
  throw new Error('too many pages');
}

async function send(product: Product, events: object[]): Promise<Event[]> {
  const res = await ctx.app.inject({
    method: 'POST',
    url: '/api/v2/events/batch',
    headers: bearer(product.eventsKey),
    payload: { events },
  });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json().data as Array<{ event: Event }>).map((item) => item.event);
}

before(async () => {
  ctx = await createTestApp();
  a = await ctx.product('A');
  b = await ctx.product('B');
  for (let round = 0; round < 6; round++) {
    const events = Array.from({ length: 10 }, (_, i) => {
      const n = round * 10 + i;
      const [eventType, action] = NAMES[n % NAMES.length]!.split('.') as [string, string];
      return {
        event_type: eventType,
        action,
        subject_type: n % 5 === 0 ? 'account' : 'user',
        subject_id: `u${n % 7}`,
        properties: { n, note: 'a, "quoted"\nline' },
      };
    });
    stored.push(...(await send(a, events)));
    await send(b, [{ event_type: 'project', action: 'created', subject_type: 'user', subject_id: 'u1' }]);
  }
  const keys = await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${a.id}/keys`, headers: adminHeaders() });
  keyIdA = (keys.json().data as Array<{ id: string; kind: string }>).find((k) => k.kind === 'events')!.id;
});
after(() => ctx.close());

describe('GET /admin/v1/products/{id}/events', () => {
  it('lists newest first by default, with key_id in the event shape', async () => {
    const res = await list(a.id, { limit: '5' });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(
      body.data.map((e: Event) => e.uuid),
      stored
        .slice(-5)
        .reverse()
        .map((e) => e.uuid),
    );
    assert.equal(body.data[0].key_id, keyIdA);
    assert.deepEqual(Object.keys(body.data[0]).sort(), Object.keys(stored[0]!).sort());
    assert.equal(typeof body.meta.next_cursor, 'string');
  });

  const cases: Array<[string, Record<string, string>, (e: Event) => boolean]> = [
    ['no filter', {}, () => true],
    ['canonical_name', { canonical_name: 'invoice_paid' }, (e) => e.canonical_name === 'invoice_paid'],
    [
      'canonical_name list',
      { canonical_name: 'invoice_paid,project_deleted' },
      (e) => ['invoice_paid', 'project_deleted'].includes(e.canonical_name),
    ],
    ['event_type', { event_type: 'project' }, (e) => e.event_type === 'project'],
    ['action', { action: 'created' }, (e) => e.action === 'created'],
    ['source', { source: 'api' }, (e) => e.source === 'api'],
    ['source (none match)', { source: 'segment' }, () => false],
    ['key_id', { key_id: 'key_unknown' }, () => false],
    ['subject', { subject_type: 'user', subject_id: 'u3' }, (e) => e.subject_type === 'user' && e.subject_id === 'u3'],
    [
      'name and subject',
      { canonical_name: 'project_created', subject_type: 'user', subject_id: 'u1' },
      (e) => e.canonical_name === canonical('project.created') && e.subject_type === 'user' && e.subject_id === 'u1',
    ],
  ];
  for (const [name, query, match] of cases) {
    for (const order of ['desc', 'asc'] as const) {
      it(`filter ${name}, ${order}: every match exactly once, in position order, across pages`, async () => {
        const got = await listAll(a.id, { ...query, order, limit: '7' });
        const expected = stored.filter(match).map((e) => e.uuid);
        assert.deepEqual(
          got.map((e) => e.uuid),
          order === 'asc' ? expected : [...expected].reverse(),
        );
      });
    }
  }

  it('filters by key_id', async () => {
    const got = await listAll(a.id, { key_id: keyIdA, limit: '1000' });
    assert.equal(got.length, stored.length);
  });

  it('filters by received time (from inclusive, to exclusive)', async () => {
    const from = stored[20]!.received_at;
    const to = stored[45]!.received_at;
    for (const order of ['asc', 'desc']) {
      const got = await listAll(a.id, { received_from: from, received_to: to, order, limit: '9' });
      const expected = stored.filter((e) => e.received_at >= from && e.received_at < to).map((e) => e.uuid);
      assert.deepEqual(
        got.map((e) => e.uuid),
        order === 'asc' ? expected : [...expected].reverse(),
      );
    }
    const none = await listAll(a.id, { received_to: '2000-01-01T00:00:00Z' });
    assert.equal(none.length, 0);
  });

  it('never shows another product’s events', async () => {
    const got = await listAll(b.id, { limit: '1000' });
    assert.equal(got.length, 6);
    const aIds = new Set(stored.map((e) => e.uuid));
    assert.ok(got.every((e) => !aIds.has(e.uuid)));
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${b.id}/events/${stored[0]!.uuid}`,
      headers: adminHeaders(),
    });
    assert.equal(res.statusCode, 404);
  });

  it('400 for unknown or bad parameters, with a pointer', async () => {
    const bad: Array<[Record<string, string>, string]> = [
      [{ colour: 'red' }, '/colour'],
      [{ limit: '0' }, '/limit'],
      [{ limit: '1001' }, '/limit'],
      [{ limit: 'ten' }, '/limit'],
      [{ order: 'up' }, '/order'],
      [{ cursor: 'nonsense' }, '/cursor'],
      [{ cursor: 'c1.AAAA' }, '/cursor'],
      [{ canonical_name: 'Project_Created' }, '/canonical_name'],
      [{ subject_type: 'user' }, '/subject_id'],
      [{ subject_type: 'robot', subject_id: 'x' }, '/subject_type'],
      [{ user: 'u1', subject_type: 'user', subject_id: 'u1' }, '/user'],
      [{ received_from: 'yesterday' }, '/received_from'],
      [{ source: 'a\u0000b' }, '/source'],
    ];
    for (const [query, pointer] of bad) {
      const res = await list(a.id, query);
      assert.equal(res.statusCode, 400, `${JSON.stringify(query)}: ${res.body}`);
      const problem = problemOf(res);
      assert.equal(problem.code, 'validation_error');
      assert.ok(
        problem.errors?.some((e) => e.pointer.includes(pointer.slice(1))),
        `${JSON.stringify(query)}: ${JSON.stringify(problem.errors)}`,
      );
    }
  });

  it('400 for a NUL in a percent-encoded query value', async () => {
    for (const raw of ['user=x%00y', 'event_type=%00']) {
      const res = await ctx.app.inject({
        method: 'GET',
        url: `/admin/v1/products/${a.id}/events?${raw}`,
        headers: adminHeaders(),
      });
      assert.equal(res.statusCode, 400, `${raw}: ${res.body}`);
    }
  });

  it('401 without the admin token, 404 for an unknown product', async () => {
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${a.id}/events`,
      headers: bearer(a.eventsKey),
    });
    assert.equal(res.statusCode, 401);
    assert.equal((await list('prod_nope', {})).statusCode, 404);
  });

  it('paging through a concurrent write load yields each event exactly once', async () => {
    const product = await ctx.product('concurrent');
    const initial = await send(
      product,
      Array.from({ length: 50 }, (_, i) => ({
        event_type: 'load',
        action: 'tested',
        subject_type: 'user',
        subject_id: `s${i}`,
      })),
    );
    let writing = true;
    const written: Event[] = [...initial];
    const writer = (async () => {
      while (writing)
        written.push(
          ...(await send(
            product,
            Array.from({ length: 5 }, () => ({
              event_type: 'load',
              action: 'tested',
              subject_type: 'user',
              subject_id: 'w',
            })),
          )),
        );
    })();
    const asc: Event[] = [];
    const desc: Event[] = [];
    let ascCursor: string | null | undefined;
    let descCursor: string | null | undefined;
    while (ascCursor !== null || descCursor !== null) {
      if (ascCursor !== null) {
        const res = (
          await list(product.id, {
            order: 'asc',
            limit: '3',
            ...(ascCursor === undefined ? {} : { cursor: ascCursor }),
          })
        ).json();
        asc.push(...res.data);
        ascCursor = res.meta.next_cursor;
        if (asc.length > 120) ascCursor = null;
      }
      if (descCursor !== null) {
        const res = (
          await list(product.id, {
            order: 'desc',
            limit: '3',
            ...(descCursor === undefined ? {} : { cursor: descCursor }),
          })
        ).json();
        desc.push(...res.data);
        descCursor = res.meta.next_cursor;
      }
    }
    writing = false;
    await writer;
    for (const seen of [asc, desc]) {
      const ids = seen.map((e) => e.uuid);
      assert.equal(new Set(ids).size, ids.length, 'no event twice');
    }
    const descIds = new Set(desc.map((e) => e.uuid));
    for (const event of initial)
      assert.ok(descIds.has(event.uuid), 'every event stored before the listing began is listed');
    const writtenOrder = new Map(written.map((e, i) => [e.uuid, i]));
    const ascOrder = asc.map((e) => writtenOrder.get(e.uuid)!);
    assert.deepEqual(
      ascOrder,
      ascOrder.map((_, i) => i),
      'asc paging is a prefix of the stored order, without gaps',
    );
  });
});

describe('the user filter', () => {
  it('follows aliases and anonymous links', async () => {
    const product = await ctx.product('identity');
    const event = (subjectId: string) => ({
      event_type: 'page',
      action: 'viewed',
      subject_type: 'user',
      subject_id: subjectId,
    });
    const [anon] = await send(product, [event('anon_123')]);
    const identify = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: bearer(product.eventsKey),
      payload: { external_id: 'user_1', traits: { plan: 'pro' } },
    });
    assert.ok(identify.statusCode < 300, identify.body);
    const [own] = await send(product, [event('user_1')]);
    await send(product, [event('user_2')]);
    // Before the link, the anonymous id's events are not the user's.
    assert.deepEqual(
      (await listAll(product.id, { user: 'user_1' })).map((e) => e.uuid),
      [own!.uuid],
    );
    const link = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(product.eventsKey),
      payload: { from_external_id: 'anon_123', to_external_id: 'user_1' },
    });
    assert.ok(link.statusCode < 300, link.body);
    const [old] = await send(product, [event('old_id')]);
    const merge = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/alias',
      headers: bearer(product.eventsKey),
      payload: { from_external_id: 'old_id', to_external_id: 'user_1' },
    });
    assert.ok(merge.statusCode < 300, merge.body);
    const expected = [old!.uuid, own!.uuid, anon!.uuid];
    assert.deepEqual(
      (await listAll(product.id, { user: 'user_1' })).map((e) => e.uuid),
      expected,
    );
    assert.deepEqual(
      (await listAll(product.id, { user: 'anon_123' })).map((e) => e.uuid),
      expected,
      'any id of the user finds all of them',
    );
    assert.deepEqual(
      (await listAll(product.id, { user: 'user_1', order: 'asc', limit: '1' })).map((e) => e.uuid),
      [...expected].reverse(),
    );
    assert.deepEqual((await listAll(product.id, { user: 'nobody' })).length, 0);
  });
});

describe('GET /admin/v1/products/{id}/events/{uuid}', () => {
  it('answers the event, 404 for unknown or malformed uuids', async () => {
    const res = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${a.id}/events/${stored[3]!.uuid}`,
      headers: adminHeaders(),
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().data, stored[3]);
    for (const uuid of ['0190a0a0-0000-7000-8000-000000000000', 'not-a-uuid']) {
      const missing = await ctx.app.inject({
        method: 'GET',
        url: `/admin/v1/products/${a.id}/events/${uuid}`,
        headers: adminHeaders(),
      });
      assert.equal(missing.statusCode, 404, missing.body);
      assert.equal(problemOf(missing).code, 'not_found');
    }
  });

  it('gives properties back as sent: keys in their order, on every read (PostgreSQL stores json, not jsonb)', async () => {
    // jsonb orders keys by length, then bytes ({"a", "mm", "zeta"}); the text as sent keeps the sender's order.
    const c = await ctx.product('C-order');
    const properties = '{"zeta":1,"a":{"y":2,"b":[3,{"d":4,"c":5}]},"mm":"x"}';
    const body = `{"event_type":"project","action":"created","subject_type":"user","subject_id":"u1","properties":${properties}}`;
    const sent = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: { ...bearer(c.eventsKey), 'content-type': 'application/json' },
      payload: body,
    });
    assert.equal(sent.statusCode, 201, sent.body);
    const uuid = (sent.json() as { data: Event }).data.uuid;
    const one = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${c.id}/events/${uuid}`,
      headers: adminHeaders(),
    });
    const listed = await list(c.id, {});
    const exported = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${c.id}/events/export`,
      headers: adminHeaders(),
    });
    for (const [read, res] of [
      ['one event', one],
      ['list', listed],
      ['export', exported],
    ] as const) {
      assert.equal(res.statusCode, 200, `${read}: ${res.body}`);
      assert.ok(res.body.includes(`"properties":${properties}`), `${read}: ${res.body}`);
    }
  });
});

describe('GET /admin/v1/products/{id}/events/export', () => {
  function exportOf(productId: string, query: Record<string, string>, headers: Record<string, string> = {}) {
    return ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${productId}/events/export`,
      query,
      headers: { ...adminHeaders(), ...headers },
    });
  }

  it('NDJSON: every event once, oldest first, the same shape as the list', async () => {
    const res = await exportOf(a.id, {});
    assert.equal(res.statusCode, 200, res.body);
    assert.match(String(res.headers['content-type']), /^application\/x-ndjson/);
    const lines = res.body
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as Event);
    assert.deepEqual(lines, stored);
  });

  it('gzip when accepted; filters apply', async () => {
    const res = await exportOf(a.id, { canonical_name: 'invoice_paid' }, { 'accept-encoding': 'br, gzip' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-encoding'], 'gzip');
    const lines = gunzipSync(res.rawPayload)
      .toString('utf8')
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as Event);
    assert.deepEqual(
      lines.map((e) => e.uuid),
      stored.filter((e) => e.canonical_name === 'invoice_paid').map((e) => e.uuid),
    );
  });

  it('CSV: a header row, quoted cells, nested objects as JSON', async () => {
    const res = await exportOf(a.id, { format: 'csv', subject_type: 'user', subject_id: 'u2' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/csv/);
    const expected = stored.filter((e) => e.subject_type === 'user' && e.subject_id === 'u2');
    const rows = parseCsv(res.body);
    assert.deepEqual(rows[0], [
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
    ]);
    assert.equal(rows.length, expected.length + 1);
    for (const [i, event] of expected.entries()) {
      const row = rows[i + 1]!;
      assert.equal(row[0], event.uuid);
      assert.equal(row[9], '');
      assert.deepEqual(JSON.parse(row[11]!), event.properties);
    }
  });

  it('isolation and 400s', async () => {
    const res = await exportOf(b.id, {});
    assert.equal(res.body.trimEnd().split('\n').length, 6);
    assert.equal((await exportOf(a.id, { format: 'xml' })).statusCode, 400);
    assert.equal((await exportOf(a.id, { limit: '5' })).statusCode, 400);
  });
});

/** A small RFC 4180 parser for the test. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(cell);
      cell = '';
    } else if (c === '\r' && text[i + 1] === '\n') {
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
      i++;
    } else cell += c;
  }
  return rows;
}
