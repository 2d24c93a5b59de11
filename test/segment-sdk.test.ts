// The real SDKs from npm, unmodified, against a real Inlet server over a socket (segment-compat A):
// @segment/analytics-node 3.x (Basic auth + body key) and 2.x (body key only), and
// @rudderstack/rudder-sdk-node (gzip under a form content type, Basic auth). A fault-injecting proxy
// in front answers 503 or 429 (Retry-After) after Inlet stored a batch, so the SDK's retry must be
// deduplicated: every event is stored exactly once. Only loopback is ever reached.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Analytics as AnalyticsNode3 } from '@segment/analytics-node';
import { Analytics as AnalyticsNode2 } from 'segment-analytics-node-2';
import RudderAnalytics from '@rudderstack/rudder-sdk-node';
import { createTestApp, eventCode, storedEvents, type TestContext } from './helpers.js';
import { guardLoopback, type LoopbackGuard } from './support/loopback-guard.js';

type Fault = 'pass' | '503-after-store' | '429-after-store';

interface ProxySeen {
  url: string;
  headers: http.IncomingHttpHeaders;
  status: number;
}

/** A proxy to Inlet that answers the next planned faults instead of Inlet's answer (Inlet still handled the request). */
async function faultProxy(target: string) {
  const plan: Fault[] = [];
  const seen: ProxySeen[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const fault = plan.shift() ?? 'pass';
      const forward = http.request(
        `${target}${request.url}`,
        { method: request.method, headers: request.headers },
        (upstream) => {
          const body: Buffer[] = [];
          upstream.on('data', (chunk: Buffer) => body.push(chunk));
          upstream.on('end', () => {
            const status =
              fault === '503-after-store' ? 503 : fault === '429-after-store' ? 429 : (upstream.statusCode ?? 502);
            seen.push({ url: request.url ?? '', headers: request.headers, status });
            if (fault === 'pass') {
              response.writeHead(status, upstream.headers);
              response.end(Buffer.concat(body));
            } else {
              response.writeHead(status, {
                'content-type': 'application/json',
                ...(fault === '429-after-store' ? { 'retry-after': '1' } : {}),
              });
              response.end('{}');
            }
          });
        },
      );
      forward.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    plan,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let ctx: TestContext;
let inletUrl: string;
let guard: LoopbackGuard;
before(async () => {
  guard = guardLoopback();
  ctx = await createTestApp();
  await ctx.app.listen({ port: 0, host: '127.0.0.1' });
  inletUrl = `http://127.0.0.1:${(ctx.app.server.address() as AddressInfo).port}`;
});
after(async () => {
  await ctx.close();
  guard.restore();
  assert.deepEqual(guard.refused, [], 'a test tried to reach a non-loopback host');
});

async function segmentEvents(productId: string) {
  const rows = await storedEvents(ctx.services.storage.db, productId)
    .where('source', '=', eventCode('source', 'segment'))
    .execute();
  return rows.map((row) => ({ ...row, occurred_at: new Date(row.occurred_at as string).toISOString() }));
}

describe('@segment/analytics-node 3.x', () => {
  it('every call type arrives once and maps to events and identities; closeAndFlush delivers what is queued', async () => {
    const product = await ctx.product('node3');
    const proxy = await faultProxy(inletUrl);
    const analytics = new AnalyticsNode3({
      writeKey: product.eventsKey,
      host: proxy.url,
      flushAt: 50,
      flushInterval: 60_000,
    });
    analytics.identify({ anonymousId: 'anon-n3', traits: { plan: 'free' } });
    analytics.page({
      anonymousId: 'anon-n3',
      name: 'Pricing',
      category: 'Marketing',
      properties: { path: '/pricing' },
    });
    analytics.identify({ userId: 'user-n3', anonymousId: 'anon-n3', traits: { email: 'n3@example.com', plan: 'pro' } });
    analytics.track({ userId: 'user-n3', event: 'Order Completed', properties: { total: 42 } });
    analytics.screen({ userId: 'user-n3', name: 'Home' });
    analytics.group({ userId: 'user-n3', groupId: 'acct-n3', traits: { name: 'Acme' } });
    analytics.alias({ userId: 'user-n3', previousId: 'legacy-n3' });
    analytics.track({ userId: 'user-n3', event: 'Signed Up', timestamp: new Date('2024-02-03T04:05:06.000Z') });
    await analytics.closeAndFlush({ timeout: 10_000 });
    await proxy.close();

    assert.equal(proxy.seen.length, 1, 'one batch request');
    assert.equal(proxy.seen[0]!.url, '/v1/batch');
    assert.match(String(proxy.seen[0]!.headers.authorization), /^Basic /);
    const events = await segmentEvents(product.id);
    assert.equal(events.length, 8);
    const names = events.map((e) => `${e.event_type}/${e.action}`).sort();
    assert.deepEqual(
      names,
      [
        'group/identified',
        'page/viewed',
        'order/completed',
        'screen/viewed',
        'signed/up',
        'user/aliased',
        'user/identified',
        'user/identified',
      ].sort(),
    );
    for (const event of events) assert.match(String(event.external_id), /^node-next-\d+-[0-9a-f-]{36}$/);
    const historical = events.find((e) => e.canonical_name === 'signed_up')!;
    const skew = Math.abs(Date.parse(historical.occurred_at) - Date.parse('2024-02-03T04:05:06.000Z'));
    assert.ok(skew < 5000, `historical timestamp kept (off by ${skew} ms)`);

    const user = await ctx.services.identity.getUser(product.id, 'user-n3', 20);
    assert.deepEqual([...user.user.aliases].sort(), ['anon-n3', 'legacy-n3']);
    assert.equal(user.user.traits.plan, 'pro');
    assert.equal(user.user.identifiers.email, 'n3@example.com');
    assert.ok(
      user.events.some((e) => e.eventType === 'page'),
      'the anonymous page view belongs to the user now',
    );
  });

  for (const fault of ['503-after-store', '429-after-store'] as const) {
    it(`retries after ${fault === '503-after-store' ? '503' : '429 with Retry-After'} and every event is stored once`, async () => {
      const product = await ctx.product(`node3-${fault}`);
      const proxy = await faultProxy(inletUrl);
      proxy.plan.push(fault);
      const analytics = new AnalyticsNode3({
        writeKey: product.eventsKey,
        host: proxy.url,
        flushAt: 3,
        flushInterval: 60_000,
        maxRetries: 3,
      });
      for (let i = 0; i < 3; i++) analytics.track({ userId: 'retry-user', event: 'Button Clicked', properties: { i } });
      await analytics.closeAndFlush({ timeout: 15_000 });
      await proxy.close();
      assert.deepEqual(
        proxy.seen.map((s) => s.status),
        [fault === '503-after-store' ? 503 : 429, 200],
      );
      if (fault === '503-after-store') assert.equal(proxy.seen[1]!.headers['x-retry-count'], '1');
      const events = await segmentEvents(product.id);
      assert.equal(events.length, 3, 'three events, each stored once');
      assert.deepEqual(
        events
          .map((e) => JSON.parse(typeof e.properties === 'string' ? e.properties : JSON.stringify(e.properties)).i)
          .sort(),
        [0, 1, 2],
      );
    });
  }
});

describe('@segment/analytics-node 2.x (write key in the body only)', () => {
  it('stores a track and an identify', async () => {
    const product = await ctx.product('node2');
    const proxy = await faultProxy(inletUrl);
    const analytics = new AnalyticsNode2({
      writeKey: product.eventsKey,
      host: proxy.url,
      flushAt: 10,
      flushInterval: 60_000,
    });
    analytics.track({ userId: 'user-n2', event: 'Report Exported' });
    analytics.identify({ userId: 'user-n2', traits: { plan: 'team' } });
    await analytics.closeAndFlush({ timeout: 10_000 });
    await proxy.close();
    assert.equal(proxy.seen[0]!.headers.authorization, undefined, '2.x sends no Authorization header');
    const events = await segmentEvents(product.id);
    assert.deepEqual(events.map((e) => e.canonical_name).sort(), ['report_exported', 'user_identified']);
    assert.equal((await ctx.services.identity.getUser(product.id, 'user-n2', 1)).user.traits.plan, 'team');
  });
});

describe('@rudderstack/rudder-sdk-node', () => {
  it('gzip under application/x-www-form-urlencoded with Basic auth: the calls are stored', async () => {
    const product = await ctx.product('rudder');
    const proxy = await faultProxy(inletUrl);
    const client = new RudderAnalytics(product.eventsKey, {
      dataPlaneUrl: proxy.url,
      flushAt: 10,
      flushInterval: 60_000,
      logLevel: 'error',
    });
    client.identify({ userId: 'user-r', anonymousId: 'anon-r', traits: { plan: 'pro' } });
    client.track({ userId: 'user-r', event: 'Item Purchased', properties: { sku: 'A1' } });
    client.page({ anonymousId: 'anon-r', name: 'Docs' });
    await client.flush();
    await proxy.close();
    assert.equal(proxy.seen[0]!.headers['content-encoding'], 'gzip');
    assert.match(String(proxy.seen[0]!.headers['content-type']), /x-www-form-urlencoded/);
    assert.equal(proxy.seen[0]!.status, 200);
    const events = await segmentEvents(product.id);
    assert.deepEqual(events.map((e) => e.canonical_name).sort(), ['item_purchased', 'page_viewed', 'user_identified']);
    const user = await ctx.services.identity.getUser(product.id, 'user-r', 10);
    assert.deepEqual(user.user.aliases, ['anon-r']);
  });
});
