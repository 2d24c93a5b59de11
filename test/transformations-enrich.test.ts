// Transformations with the sandbox and the enrichment modules, through the HTTP API (transformations.md §3–5, §8):
// user_agent, bot and geoip (a MaxMind-format test database written here) on native and Segment items, function
// steps on single, batch and Segment routes, compile errors answered with the line, and the sandbox's limits end to
// end: an endless loop or an allocation bomb costs its own item only; the rest of the batch, the next request and
// another product's function go on.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearer, createTestApp, problemOf, type TestContext } from './helpers.js';
import { transformedProduct } from './support/transformations.js';
import { cityRecord, writeMmdb } from './support/mmdb-writer.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers, read field by field
type Row = Record<string, any>;

const basic = (k: string) => ({ authorization: `Basic ${Buffer.from(`${k}:`).toString('base64')}` });
const FIREFOX = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:120.0) Gecko/20100101 Firefox/120.0';
const GOOGLEBOT = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';

let ctx: TestContext;
let dir: string;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'inlet-tf-geo-'));
  const database = join(dir, 'city.mmdb');
  writeMmdb(database, [
    {
      network: '203.0.113.0/24',
      record: cityRecord({
        country: 'FR',
        region: 'Île-de-France',
        city: 'Paris',
        latitude: 48.8566,
        longitude: 2.3522,
      }),
    },
  ]);
  ctx = await createTestApp({ geoipDatabase: database });
});
after(async () => {
  await ctx.close();
  rmSync(dir, { recursive: true, force: true });
});

const newProduct = (name: string) => transformedProduct(ctx, name);

const event = (extra: Record<string, unknown> = {}) => ({
  event: 'page.viewed',
  subject_type: 'user',
  subject_id: 'u1',
  ...extra,
});

describe('enrichment steps', () => {
  it('user_agent, bot and geoip on native events with a context', async () => {
    const p = await newProduct('tf-enrich');
    await p.put([{ kind: 'user_agent' }, { kind: 'bot' }, { kind: 'geoip' }]);
    const res = await p.batch([
      event({ context: { userAgent: FIREFOX, ip: '203.0.113.9' } }),
      event({ context: { userAgent: GOOGLEBOT, ip: '192.0.2.1' } }),
    ]);
    assert.equal(res.statusCode, 200, res.body);
    const [human, bot] = res.json().data.map((r: Row) => r.event.context);
    assert.equal(human.user_agent.browser.name, 'Firefox');
    assert.equal(human.user_agent.os.name, 'Windows');
    assert.equal(human.bot, false);
    assert.deepEqual(human.geo, {
      country: 'FR',
      region: 'Île-de-France',
      city: 'Paris',
      latitude: 48.8566,
      longitude: 2.3522,
    });
    assert.equal(bot.bot, true);
    assert.equal(bot.geo, undefined, 'an address not in the database adds nothing');
  });

  it('steps after user_agent that change its answer change this event only, in the answer and as stored', async () => {
    // One answer per user agent is shared by every event that carries it (frozen, its text made once): a product
    // that masks and removes inside it must store its own copy, and the next product gets the answer unchanged.
    const masked = await newProduct('tf-ua-masked');
    await masked.put([
      { kind: 'user_agent' },
      { kind: 'mask', paths: ['context.user_agent.os.name'], with: 'redact' },
      { kind: 'remove', paths: ['context.user_agent.browser.version'] },
    ]);
    const plain = await newProduct('tf-ua-plain');
    await plain.put([{ kind: 'user_agent' }]);
    const sent = event({ context: { userAgent: FIREFOX } });
    const first = await masked.batch([sent, sent]);
    assert.equal(first.statusCode, 200, first.body);
    const second = await plain.batch([sent]);
    assert.equal(second.statusCode, 200, second.body);
    const maskedAnswer = { browser: { name: 'Firefox' }, os: { name: '[redacted]', version: '10' }, device: {} };
    for (const row of first.json().data as Row[]) assert.deepEqual(row.event.context.user_agent, maskedAnswer);
    const stored = await masked.events();
    assert.equal(stored.length, 2);
    for (const row of stored) assert.deepEqual(row.context.user_agent, maskedAnswer);
    assert.ok(!JSON.stringify(stored).includes('"name":"Windows"'), JSON.stringify(stored));
    const full = { browser: { name: 'Firefox', version: '120.0' }, os: { name: 'Windows', version: '10' }, device: {} };
    assert.deepEqual((second.json().data as Row[])[0]!.event.context.user_agent, full);
    assert.deepEqual((await plain.events())[0]!.context.user_agent, full);
  });

  it('bot drop on the Segment routes: the bot item counts as accepted and is not stored', async () => {
    const p = await newProduct('tf-bot-drop');
    await p.put([{ kind: 'bot', action: 'drop' }]);
    const res = await p.segment([
      { type: 'page', name: 'Home', userId: 'u1', messageId: 'b-1', context: { userAgent: GOOGLEBOT } },
      { type: 'page', name: 'Home', userId: 'u1', messageId: 'b-2', context: { userAgent: FIREFOX } },
    ]);
    assert.equal(res.json().accepted, 2);
    const events = (await p.admin('GET', '/events')).json().data;
    assert.deepEqual(
      events.map((e: Row) => e.external_id),
      ['b-2'],
    );
  });
});

describe('function steps', () => {
  it('refuses code that does not compile with the message and line, storing nothing', async () => {
    const p = await newProduct('tf-fn-compile');
    const res = await p.admin('PUT', '/transformation', {
      steps: [{ kind: 'drop' }, { kind: 'function', code: 'function transform(event) {\n  return event +;\n}' }],
    });
    assert.equal(res.statusCode, 400);
    const problem = problemOf(res);
    assert.equal(problem.errors![0]!.pointer, '/steps/1/code');
    assert.match(problem.errors![0]!.message, /line 2/);
    assert.deepEqual((await p.admin('GET', '/transformation')).json(), { data: null });
  });

  it('changes items on single, batch and Segment routes; null drops', async () => {
    const p = await newProduct('tf-fn');
    await p.put([
      {
        kind: 'function',
        code: `function transform(event, meta) {
          if (event.properties.skip) return null;
          event.properties.route = meta.route;
          event.properties.n = (event.properties.n || 0) * 2;
          return event;
        }`,
      },
    ]);
    const single = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(p.eventsKey),
      payload: event({ properties: { n: 2 } }),
    });
    assert.equal(single.statusCode, 201, single.body);
    assert.deepEqual(single.json().data.properties, { n: 4, route: 'v2' });
    const batch = await p.batch([event({ properties: { n: 1 } }), event({ properties: { skip: true } })]);
    assert.equal(batch.json().data[0].event.properties.n, 2);
    assert.equal(batch.json().data[1].status, 'dropped');
    const segment = await ctx.app.inject({
      method: 'POST',
      url: '/v1/track',
      headers: basic(p.eventsKey),
      payload: { event: 'Clicked', userId: 'u1', messageId: 'f-1', properties: { n: 5 } },
    });
    assert.equal(segment.statusCode, 200);
    const stored = (await p.admin('GET', '/events')).json().data.find((e: Row) => e.external_id === 'f-1');
    assert.deepEqual(stored.properties, { n: 10, route: 'segment' });
  });

  it('an endless loop or an allocation bomb costs its own item; the batch, the next request and other products go on', async () => {
    const p = await newProduct('tf-fn-limits');
    const other = await newProduct('tf-fn-limits-other');
    await other.put([{ kind: 'function', code: 'function transform(e) { e.properties.other = true; return e; }' }]);
    await p.put([
      {
        kind: 'function',
        code: `function transform(event) {
          if (event.properties.loop) { for (;;) {} }
          if (event.properties.bomb) { const a = []; for (;;) a.push(new ArrayBuffer(1024 * 1024)); }
          event.properties.ok = true;
          return event;
        }`,
      },
    ]);
    const res = await p.batch([
      event({ properties: { loop: true } }),
      event({ properties: { n: 1 } }),
      event({ properties: { bomb: true } }),
    ]);
    assert.equal(res.statusCode, 207, res.body);
    const [loop, fine, bomb] = res.json().data;
    assert.equal(loop.error.code, 'transformation_error');
    assert.equal(loop.error.step, 0);
    assert.equal(fine.status, 'created');
    assert.equal(fine.event.properties.ok, true);
    assert.equal(bomb.error.code, 'transformation_error');
    const next = await p.batch([event({ properties: { n: 2 } })]);
    assert.equal(next.json().data[0].event.properties.ok, true);
    const theirs = await other.batch([event()]);
    assert.equal(theirs.json().data[0].event.properties.other, true);
  });

  it('the test endpoint runs a function without storing anything', async () => {
    const p = await newProduct('tf-fn-test');
    const res = await p.admin('POST', '/transformation/test', {
      steps: [
        { kind: 'function', code: 'function transform(e) { e.properties.t = 1; return e; }' },
        { kind: 'user_agent' },
      ],
      items: [event({ context: { userAgent: FIREFOX } })],
    });
    assert.equal(res.statusCode, 200, res.body);
    const [result] = res.json().data;
    assert.equal(result.output.properties.t, 1);
    assert.equal(result.output.context.user_agent.browser.name, 'Firefox');
    assert.deepEqual(result.trace[0], { step: 0, changed: ['properties.t'] });
    assert.deepEqual((await p.admin('GET', '/events')).json().data, []);
  });
});
