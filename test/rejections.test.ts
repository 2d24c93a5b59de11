// Rejections are recorded (segment-compat "Bodies"; clarifications §13, §20): Segment and native batch
// rejections with reason and the item as received, warnings beside them, metrics, the admin list
// (filters, paging), the hourly cap, retention, and `inlet rejections list`.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { cliEnv, inlet } from './support/cli.js';
import { adminHeaders, bearer, createTestApp, type TestContext } from './helpers.js';

let ctx: TestContext;
let productId: string;
let key: string;
before(async () => {
  ctx = await createTestApp({ rejectionsMaxPerHour: 5 });
  const product = await ctx.product('rejections');
  productId = product.id;
  key = product.eventsKey;
});
after(async () => ctx.close());

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });
const list = (query = '') =>
  ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${productId}/rejections${query}`, headers: adminHeaders() });

describe('rejections', () => {
  it('records a Segment item refusal with its reason and the item as received (NUL included), and a native batch one', async () => {
    const nul = { type: 'track', event: 'Bad\u0000Name', userId: 'u\u0000', messageId: 'nul-1' };
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: { ...basic(key), 'content-type': 'application/json' },
      payload: JSON.stringify({
        batch: [
          { type: 'track', event: 'No One', messageId: 'm-anon' },
          nul,
          { type: 'track', event: 'Fine', userId: 'u', messageId: 'ok-1' },
        ],
      }),
    });
    assert.equal(segment.json().rejected.length, 2);
    const native = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      payload: { events: [{ subject_type: 'user', subject_id: 'u', event: 'nosep', external_id: 'ext-1' }] },
    });
    assert.equal(native.statusCode, 207);

    const res = await list();
    assert.equal(res.statusCode, 200, res.body);
    const rows = res.json().data as Array<Record<string, unknown>>;
    assert.deepEqual(
      rows.map((r) => [r.route, r.code, r.message_id, r.severity]),
      [
        ['/api/v2/events/batch', 'validation_error', 'ext-1', 'rejected'],
        ['/v1/batch', 'validation_error', 'nul-1', 'rejected'],
        ['/v1/batch', 'missing_identity', 'm-anon', 'rejected'],
      ],
    );
    assert.deepEqual(rows[1]!.item, nul);
    assert.equal(rows[1]!.index, 1);
    const metrics = await ctx.services.metrics.rejections.get();
    assert.ok(metrics.values.some((v) => v.labels.code === 'missing_identity' && v.value >= 1));
  });

  it('filters by code and severity, pages with a cursor; a warning is listed beside the rejections', async () => {
    await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: {
        batch: [
          { type: 'identify', userId: 'owner', anonymousId: 'anon-w', messageId: 'w1' },
          { type: 'identify', userId: 'other', messageId: 'w2' },
        ],
      },
    });
    const conflict = await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: { batch: [{ type: 'track', event: 'X', userId: 'other', anonymousId: 'anon-w', messageId: 'w3' }] },
    });
    assert.equal(conflict.json().warnings.length, 1);
    const warnings = (await list('?severity=warning')).json().data;
    assert.deepEqual(
      warnings.map((w: { code: string }) => w.code),
      ['identity_conflict'],
    );
    assert.deepEqual(
      (await list('?code=missing_identity')).json().data.map((r: { message_id: string }) => r.message_id),
      ['m-anon'],
    );
    const first = (await list('?limit=2')).json();
    assert.equal(first.data.length, 2);
    assert.ok(first.meta.next_cursor);
    const second = (await list(`?limit=2&cursor=${first.meta.next_cursor}`)).json();
    assert.equal(second.data.length, 2);
    assert.equal(second.meta.next_cursor, null);
    assert.equal((await list('?limit=0')).statusCode, 400);
  });

  it("an identity-conflict warning records the item as the product's transformation left it: a masked value never appears", async () => {
    const masked = await ctx.product('rejections-masked');
    const put = await ctx.app.inject({
      method: 'PUT',
      url: `/admin/v1/products/${masked.id}/transformation`,
      headers: adminHeaders(),
      payload: {
        // A function returns new objects (a mask step changes the parsed item in place, which hid the raw item).
        steps: [
          {
            kind: 'function',
            code: `function transform(e) {
              for (const o of [e.properties, e.traits, e.context]) if (o && o.email) o.email = '[redacted]';
              return e;
            }`,
          },
        ],
      },
    });
    assert.equal(put.statusCode, 200, put.body);
    const marker = 'secret-marker@example.com';
    const send = (batch: unknown[]) =>
      ctx.app.inject({ method: 'POST', url: '/v1/batch', headers: basic(masked.eventsKey), payload: { batch } });
    await send([
      { type: 'identify', userId: 'owner', anonymousId: 'anon-m', messageId: 'mw1' },
      { type: 'identify', userId: 'owner', anonymousId: 'anon-m2', messageId: 'mw1b' },
      { type: 'identify', userId: 'other', messageId: 'mw2' },
    ]);
    const conflict = await send([
      {
        type: 'track',
        event: 'X',
        userId: 'other',
        anonymousId: 'anon-m',
        messageId: 'mw3',
        properties: { email: marker },
        context: { email: marker },
      },
      { type: 'identify', userId: 'other', anonymousId: 'anon-m2', messageId: 'mw4', traits: { email: marker } },
    ]);
    assert.equal(conflict.json().warnings.length, 2, conflict.body);
    const rows = (
      await ctx.app.inject({
        method: 'GET',
        url: `/admin/v1/products/${masked.id}/rejections?severity=warning`,
        headers: adminHeaders(),
      })
    ).json().data;
    assert.deepEqual(rows.map((r: { code: string; message_id: string }) => [r.code, r.message_id]).sort(), [
      ['identity_conflict', 'mw3'],
      ['identity_conflict', 'mw4'],
    ]);
    assert.equal(JSON.stringify(rows).includes(marker), false, JSON.stringify(rows));
    const track = rows.find((r: { message_id: string }) => r.message_id === 'mw3').item;
    assert.deepEqual(
      [track.properties.email, track.context.email, track.userId],
      ['[redacted]', '[redacted]', 'other'],
    );
    const identify = rows.find((r: { message_id: string }) => r.message_id === 'mw4').item;
    assert.equal(identify.traits.email, '[redacted]');
  });

  it('past the hourly cap rejections are only counted', async () => {
    await ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: basic(key),
      payload: { batch: Array.from({ length: 4 }, (_, i) => ({ type: 'track', event: 'x', messageId: `cap-${i}` })) },
    });
    const rows = (await list('?limit=100')).json().data;
    assert.equal(rows.length, 5, 'the cap of 5 per product and hour');
    const metric = await ctx.services.metrics.rejections.get();
    const unrecorded = metric.values.filter((v) => v.labels.recorded === 'false').reduce((sum, v) => sum + v.value, 0);
    assert.ok(unrecorded >= 3);
    const hours = await ctx.services.storage.db
      .selectFrom('rejection_hours')
      .selectAll()
      .where('product_id', '=', productId)
      .execute();
    assert.ok(hours.length === 1 && hours[0]!.unrecorded >= 3);
  });

  it('the per-hour counts of unrecorded rejections and plan violations add up across flushes (instances), never overwrite', async () => {
    const { id } = await ctx.product('hour-counts');
    const { storage } = ctx.services;
    for (const [add, table] of [
      [
        (counts: Array<{ productId: string; hour: string; count: number }>) => storage.rejections.addUnrecorded(counts),
        'rejection_hours',
      ],
      [
        (counts: Array<{ productId: string; hour: string; count: number }>) =>
          storage.governance.addUnrecordedViolations(counts),
        'plan_violation_hours',
      ],
    ] as const) {
      await add([{ productId: id, hour: '2026-01-01T10', count: 2 }]);
      await add([
        { productId: id, hour: '2026-01-01T10', count: 5 },
        { productId: id, hour: '2026-01-01T11', count: 1 },
      ]);
      const rows = await sql<{
        hour: string;
        unrecorded: number;
      }>`SELECT hour, unrecorded FROM ${sql.table(table)} WHERE product_id = ${id} ORDER BY hour`.execute(storage.db);
      assert.deepEqual(
        rows.rows.map((r) => [r.hour, Number(r.unrecorded)]),
        [
          ['2026-01-01T10', 7],
          ['2026-01-01T11', 1],
        ],
        table,
      );
    }
  });

  it('a flush that fails (storage unreachable) keeps the rejections; the next flush records them', async () => {
    const other = await ctx.product('rejections-outage');
    const store = ctx.services.storage.rejections;
    const insertMany = store.insertMany;
    let failures = 0;
    // A fault injected into the real store: its next write fails as an unreachable database would.
    store.insertMany = async () => {
      failures++;
      throw new Error('connection refused');
    };
    try {
      await ctx.app.inject({
        method: 'POST',
        url: '/v1/batch',
        headers: basic(other.eventsKey),
        payload: {
          batch: [
            { type: 'track', event: 'x', messageId: 'outage-1' },
            { type: 'track', event: 'x', messageId: 'outage-2' },
          ],
        },
      });
      await assert.rejects(ctx.services.rejections.flush(), /connection refused/);
      assert.equal(failures, 1);
    } finally {
      store.insertMany = insertMany;
    }
    const rows = (
      await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${other.id}/rejections`, headers: adminHeaders() })
    ).json().data;
    assert.deepEqual(rows.map((r: { message_id: string }) => r.message_id).sort(), ['outage-1', 'outage-2']);
  });

  it('a whole Segment request refused for its body is recorded too (not JSON, no batch array, over the limit); not for an unknown key or a secret key from a page', async () => {
    const other = await ctx.product('rejections-whole');
    const auth = basic(other.eventsKey);
    const send = (url: string, payload: string, headers: Record<string, string> = auth) =>
      ctx.app.inject({ method: 'POST', url, headers: { 'content-type': 'text/plain', ...headers }, payload });
    assert.equal((await send('/v1/track', 'not json{')).statusCode, 400);
    assert.equal((await send('/v1/batch', JSON.stringify({ batch: 'nope', messageId: 'whole-1' }))).statusCode, 400);
    assert.equal(
      (
        await send(
          '/v1/track',
          JSON.stringify({ event: 'Big', userId: 'u', properties: { text: 'x'.repeat(600 * 1024) } }),
        )
      ).statusCode,
      400,
    );
    // Not recorded: no product to record for, or a secret key used from a web page.
    assert.equal((await send('/v1/track', 'not json{', basic('inlet_ek_unknownunknownunknown'))).statusCode, 400);
    assert.equal((await send('/v1/track', 'not json{', { ...auth, origin: 'https://shop.example' })).statusCode, 400);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await ctx.services.rejections.flush();
    const rows = (
      await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${other.id}/rejections`, headers: adminHeaders() })
    ).json().data as Array<Record<string, unknown>>;
    assert.deepEqual(rows.map((r) => [r.route, r.code, r.message_id]).reverse(), [
      ['/v1/track', 'invalid_json', null],
      ['/v1/batch', 'validation_error', 'whole-1'],
      ['/v1/track', 'payload_too_large', null],
    ]);
    const [tooLarge, noBatch, notJson] = rows;
    assert.equal(notJson!.item, 'not json{', 'the body as received');
    assert.deepEqual(noBatch!.item, { batch: 'nope', messageId: 'whole-1' });
    assert.match(String(tooLarge!.item), /not kept: the body was over the \d+-byte limit/);
    assert.match(String(notJson!.detail), /^The whole request was refused/);
  });

  it('a batch element nested 20,000 arrays deep is refused and recorded, cut to 64 levels (fuzz seed 1211015263 case 4660: a 500)', async () => {
    const other = await ctx.product('rejections-deep');
    let deep = '1';
    for (let i = 0; i < 20_000; i++) deep = `[${deep}]`;
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: { ...bearer(other.eventsKey), 'content-type': 'application/json' },
      payload: `{"events":[{"event":"deep_checked","subject_type":"user","subject_id":"u"},${deep}]}`,
    });
    assert.equal(res.statusCode, 207, res.body);
    assert.deepEqual(
      res.json().data.map((item: { status: string }) => item.status),
      ['created', 'rejected'],
    );
    await ctx.services.rejections.flush();
    const rows = (
      await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${other.id}/rejections`, headers: adminHeaders() })
    ).json().data as Array<{ item: unknown }>;
    assert.equal(rows.length, 1);
    let level = rows[0]!.item;
    let depth = 0;
    while (Array.isArray(level)) {
      level = level[0];
      depth++;
    }
    assert.equal(depth, 64, 'the recorded item keeps 64 levels');
    assert.equal(level, '… nested more than 64 levels deep');
  });

  it('retention deletes what is older than the setting', async () => {
    await ctx.services.storage.rejections.deleteOlderThan(new Date(Date.now() + 1000).toISOString());
    assert.equal((await list()).json().data.length, 0);
  });

  it('inlet rejections list --product shows them', async () => {
    const env = cliEnv(ctx.database);
    const other = await ctx.product('rejections-cli');
    await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(other.eventsKey),
      payload: { events: [{ subject_type: 'user', subject_id: 'u', event: 'nosep', external_id: 'cli-1' }] },
    });
    await ctx.services.rejections.flush();
    const { code, out } = await inlet(env, 'rejections', 'list', '--product', other.id, '--json');
    assert.equal(code, 0);
    const data = JSON.parse(out).data;
    assert.deepEqual(
      data.map((r: { message_id: string; code: string }) => [r.message_id, r.code]),
      [['cli-1', 'validation_error']],
    );
    const human = await inlet(env, 'rejections', 'list', '--product', other.id);
    assert.match(human.out, /validation_error/);
  });
});
