// Segment's own snippet and analytics.js (the standalone build of @segment/analytics-next, served by
// Inlet, clarifications §25) in real Chromium (Debian's /usr/bin/chromium, driven by playwright-core),
// on a page of another origin than Inlet, so CORS and the browser key's origins are exercised for real.
// Every request that is not for a loopback port in use goes to a counting proxy that refuses it: the
// test asserts that nothing tried to leave (no Segment host, no anything).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { adminHeaders, createTestApp, dialect, eventCode, storedEvents, type TestContext } from '../helpers.js';
import { CHROMIUM, CHROMIUM_ARGS } from '../support/console-browser.js';
import { snippet } from '../support/segment-snippet.js';

const skip = !existsSync(CHROMIUM)
  ? `${CHROMIUM} is missing (apt-get install -y chromium)`
  : dialect === 'sqlite'
    ? false
    : 'the browser path is dialect-free: the SQLite pass runs it';

/**
 * Chromium's own background services (component and extension updates, account sign-in) still try
 * Google hosts despite the flags above; they are refused like everything else, and kept apart from
 * what the page tried, which must be nothing.
 */
const BROWSER_SERVICE_HOSTS =
  /^(CONNECT |[A-Z]+ http:\/\/)(update\.googleapis\.com|accounts\.google\.com|clients\d*\.google\.com|optimizationguide-pa\.googleapis\.com|safebrowsing\.googleapis\.com|content-autofill\.googleapis\.com|android\.clients\.google\.com|www\.google\.com)[:/]/;

function fromThePage(attempts: string[]): string[] {
  return attempts.filter((line) => !BROWSER_SERVICE_HOSTS.test(line));
}

/** A proxy that answers every request with 403 and remembers where it was meant to go. */
async function countingProxy() {
  const attempts: string[] = [];
  const server = net.createServer((socket) => {
    socket.once('data', (chunk) => {
      attempts.push(chunk.toString('latin1').split('\r\n')[0] ?? '?');
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    attempts,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** RudderStack's browser SDK, its bundled build (plugins inside, nothing loaded from a CDN), from npm. */
const RUDDER_SDK = readFileSync(
  new URL('../../node_modules/@rudderstack/analytics-js/dist/npm/modern/bundled/umd/index.js', import.meta.url),
);

async function pageServer(html: () => string) {
  const server = http.createServer((request, response) => {
    if (request.url === '/rudder-analytics.js') {
      response.writeHead(200, { 'content-type': 'text/javascript' });
      response.end(RUDDER_SDK);
      return;
    }
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    response.end(html());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('analytics.js in Chromium', { skip }, () => {
  let ctx: TestContext;
  let browser: Browser;
  let proxy: Awaited<ReturnType<typeof countingProxy>>;
  let inlet: string;
  let inletPort: number;
  let productId: string;
  let key: string;
  const servers: Array<{ close(): Promise<void> }> = [];
  let pageHtml = '';
  let page: Awaited<ReturnType<typeof pageServer>>;

  before(async () => {
    ctx = await createTestApp({ browserRateLimitPerIp: 0 });
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    inletPort = (ctx.app.server.address() as AddressInfo).port;
    inlet = `http://127.0.0.1:${inletPort}`;
    page = await pageServer(() => pageHtml);
    servers.push(page);
    const product = await ctx.product('browser');
    productId = product.id;
    const created = await ctx.app.inject({
      method: 'POST',
      url: `/admin/v1/products/${productId}/keys`,
      headers: adminHeaders(),
      payload: { kind: 'browser', allowed_origins: [`http://127.0.0.1:${page.port}`] },
    });
    key = created.json().data.key;
    proxy = await countingProxy();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        ...CHROMIUM_ARGS,
        `--proxy-server=http://127.0.0.1:${proxy.port}`,
        `--proxy-bypass-list=127.0.0.1:${inletPort};127.0.0.1:${page.port};localhost:${page.port}`,
      ],
    });
  });

  after(async () => {
    await browser?.close();
    await proxy?.close();
    for (const server of servers) await server.close();
    await ctx?.close();
  });

  async function eventsOf(predicate: (rows: Array<Record<string, unknown>>) => boolean, timeoutMs = 20_000) {
    const started = Date.now();
    for (;;) {
      const rows = (await storedEvents(ctx.services.storage.db, productId)
        .where('source', '=', eventCode('source', 'segment'))
        .execute()) as Array<Record<string, unknown>>;
      if (predicate(rows) || Date.now() - started > timeoutMs) return rows;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  it('the snippet loads analytics.js from Inlet; page, identify, track, group and alias arrive once; nothing leaves loopback', async () => {
    pageHtml = `<!doctype html><html><head><title>Shop</title>${snippet(inlet, key)}</head><body>shop</body></html>`;
    const context = await browser.newContext();
    const tab = await context.newPage();
    const errors: string[] = [];
    tab.on('pageerror', (error) => errors.push(String(error)));
    await tab.goto(`http://127.0.0.1:${page.port}/`);
    await tab.waitForFunction(
      () => (globalThis as unknown as { analytics?: { initialized?: boolean } }).analytics?.initialized === true,
      undefined,
      { timeout: 20_000 },
    );
    await tab.evaluate(async () => {
      const analytics = (
        globalThis as unknown as { analytics: Record<string, (...args: unknown[]) => Promise<unknown>> }
      ).analytics;
      await analytics.identify!({ plan: 'trial' });
      await analytics.track!('Signup Clicked', { button: 'hero' });
      await analytics.identify!('user-b', { name: 'Bea' });
      await analytics.group!('acct-b', { name: 'Acme' });
      await analytics.alias!('user-b-crm', 'user-b');
    });
    const rows = await eventsOf((r) => r.length >= 6);
    await context.close();
    // The identity side effects run right after an item is stored: wait for the link.
    const started = Date.now();
    while (Date.now() - started < 10_000) {
      const resolved = await ctx.services.storage.identity.getUser(productId, 'user-b');
      if (resolved !== undefined && resolved.user.aliases.length >= 1) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.deepEqual(errors, []);
    const names = rows.map((r) => r.canonical_name).sort();
    assert.deepEqual(names, [
      'group_identified',
      'page_viewed',
      'signup_clicked',
      'user_aliased',
      'user_identified',
      'user_identified',
    ]);
    for (const row of rows) assert.match(String(row.external_id), /^ajs-next-\d+-/);
    const anonymousId = String(rows.find((r) => r.canonical_name === 'page_viewed')!.subject_id);
    const user = await ctx.services.identity.getUser(productId, 'user-b', 20);
    assert.ok(user.user.aliases.includes(anonymousId), 'the anonymous visit is linked to the user after identify');
    assert.equal(user.user.traits.name, 'Bea');
    // analytics-next 1.84.3 sends alias(to, from) with userId = the current user (seen on the wire:
    // userId "user-b", previousId "user-b"); Inlet stores it as user/aliased and links nothing.
    const alias = rows.find((r) => r.canonical_name === 'user_aliased')!;
    assert.equal(alias.subject_id, 'user-b');
    assert.ok(user.events.some((e) => e.eventType === 'page'));
    assert.deepEqual(fromThePage(proxy.attempts), [], 'no request of the page tried to leave loopback');
    assert.ok(
      !proxy.attempts.some((line) => /segment|rudder/i.test(line)),
      'nothing for a Segment or RudderStack host',
    );
  });

  it('a page reload re-sends a persisted event; it is stored once', async () => {
    pageHtml = `<!doctype html><html><head><title>Shop</title>${snippet(inlet, key)}</head><body>shop</body></html>`;
    const context = await browser.newContext();
    const tab = await context.newPage();
    // The first delivery reaches Inlet (and is stored) but the browser sees the connection reset, so
    // analytics.js keeps the event, persists its queue when the page goes away, and sends it again
    // after the reload: Inlet must answer that as a duplicate of its messageId.
    let failing = true;
    const posts: string[] = [];
    await tab.route(`${inlet}/v1/**`, async (route) => {
      const request = route.request();
      if (request.method() !== 'POST' || !(request.postData() ?? '').includes('Reload Checked'))
        return route.continue();
      posts.push(failing ? 'reset' : 'answered');
      if (!failing) return route.continue();
      await route.fetch();
      await route.abort('connectionreset');
    });
    await tab.goto(`http://127.0.0.1:${page.port}/`);
    await tab.waitForFunction(
      () => (globalThis as unknown as { analytics?: { initialized?: boolean } }).analytics?.initialized === true,
      undefined,
      { timeout: 20_000 },
    );
    await tab.evaluate(() => {
      void (
        globalThis as unknown as { analytics: { track(name: string, properties: object): Promise<unknown> } }
      ).analytics.track('Reload Checked', { attempt: 'first' });
    });
    for (const started = Date.now(); posts.length === 0 && Date.now() - started < 20_000;)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(posts.slice(0, 1), ['reset'], 'the first delivery reached Inlet and then failed for the browser');
    const stored = await eventsOf((rows) => rows.some((r) => r.canonical_name === 'reload_checked'));
    assert.equal(stored.filter((r) => r.canonical_name === 'reload_checked').length, 1, 'stored by the first delivery');
    failing = false;
    await tab.reload();
    for (const started = Date.now(); !posts.includes('answered') && Date.now() - started < 30_000;)
      await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(posts.includes('answered'), `the persisted event was sent again after the reload (${posts.join(', ')})`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const rows = await eventsOf(() => true);
    const reloads = rows.filter((r) => r.canonical_name === 'reload_checked');
    assert.equal(reloads.length, 1, 'stored once: the re-sent messageId is a duplicate');
    await context.close();
  });

  it('RudderStack analytics-js (bundled build): source config from Inlet, page, identify and track arrive; nothing leaves loopback', async () => {
    pageHtml = `<!doctype html><html><head><title>Rudder</title><script src="/rudder-analytics.js"></script></head><body>shop</body></html>`;
    const context = await browser.newContext();
    const tab = await context.newPage();
    const errors: string[] = [];
    tab.on('pageerror', (error) => errors.push(String(error)));
    await tab.goto(`http://127.0.0.1:${page.port}/`);
    // A string, not a function: tsx's helpers (__name) do not exist in the page.
    await tab.evaluate(`new Promise((resolve) => {
      const analytics = new window.rudderanalytics.RudderAnalytics();
      analytics.load(${JSON.stringify(key)}, ${JSON.stringify(inlet)}, {
        configUrl: ${JSON.stringify(inlet)},
        onLoaded: () => {
          analytics.page();
          analytics.identify('rudder-user', { plan: 'pro' });
          analytics.track('Rudder Checked', { from: 'browser' });
          resolve();
        },
      });
    })`);
    const rows = await eventsOf((r) =>
      ['rudder_checked', 'user_identified'].every((name) =>
        r.some((row) => row.canonical_name === name && row.subject_id === 'rudder-user'),
      ),
    );
    await context.close();
    assert.deepEqual(errors, []);
    const checked = rows.filter((r) => r.canonical_name === 'rudder_checked');
    assert.equal(checked.length, 1, 'the track call is stored once');
    assert.equal(checked[0]!.subject_id, 'rudder-user');
    assert.deepEqual(JSON.parse(String(checked[0]!.properties)), { from: 'browser' });
    const user = await ctx.services.identity.getUser(productId, 'rudder-user', 20);
    assert.equal(user.user.traits.plan, 'pro');
    assert.deepEqual(fromThePage(proxy.attempts), [], 'no request of the page tried to leave loopback');
  });

  it("a page on an origin not on the key's list is refused (the browser sees a CORS failure, nothing is stored)", async () => {
    const before = (await eventsOf(() => true)).length;
    pageHtml = '<!doctype html><title>Other</title>';
    const context = await browser.newContext();
    const tab = await context.newPage();
    await tab.goto(`http://localhost:${page.port}/`);
    const outcome = await tab.evaluate(
      async ([url, writeKey]) => {
        try {
          const res = await fetch(`${url}/v1/t`, {
            method: 'POST',
            headers: { 'content-type': 'text/plain', authorization: `Basic ${btoa(`${writeKey}:`)}` },
            body: JSON.stringify({ event: 'Stolen', anonymousId: 'x', writeKey }),
          });
          return `status ${res.status}`;
        } catch (error) {
          return `blocked: ${String(error)}`;
        }
      },
      [inlet, key] as const,
    );
    await context.close();
    assert.match(outcome, /^blocked/);
    assert.equal((await eventsOf(() => true)).length, before);
    assert.deepEqual(fromThePage(proxy.attempts), []);
  });
});
