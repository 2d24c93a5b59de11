// Screenshots of every console page for docs/console/ (README), and the console's own figures: bundle size
// gzipped and the first screen's time on loopback. Starts an app on a temp SQLite database, seeds a product
// (keys, events, a user with a merge, a rejection, a synced traffic source from the local Plausible fake, a
// webhook destination to a local receiver), then drives Debian's Chromium through each page.
//   node --import tsx scripts/console-screenshots.ts [outDir=docs/console]
import { readdirSync, readFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import type { AddressInfo } from 'node:net';
import { chromium } from 'playwright-core';
import { ADMIN_TOKEN, adminHeaders, bearer, createTestApp } from '../test/helpers.js';
import { startPlausibleFake, type PlausibleFakeRow } from '../test/fakes/plausible-fake.js';
import { startWebhookReceiver } from '../test/fakes/webhook-receiver.js';
import { CHROMIUM, CHROMIUM_ARGS, ensureConsoleBuilt } from '../test/support/console-browser.js';

const outDir = process.argv[2] ?? 'docs/console';
mkdirSync(outDir, { recursive: true });
ensureConsoleBuilt();

const assets = join('dist', 'console', 'assets');
let gzipped = 0;
for (const name of readdirSync(assets)) {
  const size = gzipSync(readFileSync(join(assets, name)), { level: 9 }).length;
  gzipped += size;
  console.log(`bundle ${name}: ${readFileSync(join(assets, name)).length} bytes, ${size} gzipped`);
}
console.log(`bundle total gzipped: ${(gzipped / 1024).toFixed(1)} KiB`);

const ctx = await createTestApp({
  browserRateLimitPerIp: 0,
  catalogFlushMs: 100,
  erasurePollMs: 50,
  suppressionRefreshMs: 50,
});
await ctx.app.listen({ port: 0, host: '127.0.0.1' });
const port = (ctx.app.server.address() as AddressInfo).port;
const base = `http://127.0.0.1:${port}`;
const day = (n: number) => new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
const sources: Array<[string, string, string, string]> = [
  ['Google', 'organic', '(not set)', '/'],
  ['Newsletter', 'email', 'autumn', '/pricing'],
  ['(direct)', '(none)', '(not set)', '/'],
  ['github.com', 'referral', '(not set)', '/docs'],
];
const rows: PlausibleFakeRow[] = [];
for (let d = 27; d >= 1; d--) {
  for (const [i, [source, medium, campaign, page]] of sources.entries()) {
    const visits = Math.round((40 - i * 9) * (1 + 0.3 * Math.sin(d / 3)) + (d % 7 === 0 ? -10 : 0));
    rows.push({
      date: day(d),
      source,
      utm_medium: medium,
      utm_campaign: campaign,
      entry_page: page,
      visitors: Math.round(visits * 0.8),
      visits,
      pageviews: visits * 3,
      bounce_rate: 35 + i * 5,
      visit_duration: 90 - i * 10,
    });
  }
}
const plausible = await startPlausibleFake({ siteId: 'shop.example', apiKey: 'plausible-key', rows });
const receiver = await startWebhookReceiver();

const admin = async (method: 'GET' | 'POST' | 'PUT' | 'PATCH', url: string, payload?: object) => {
  const res = await ctx.app.inject({
    method,
    url: `/admin/v1${url}`,
    headers: adminHeaders(),
    ...(payload === undefined ? {} : { payload }),
  });
  if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
  return res.json().data;
};
// The deliverers run in the server process (src/main.ts); the test app leaves them to the caller.
ctx.services.destinations.start();
const product = await admin('POST', '/products', { name: 'Shop' });
await admin('POST', '/products', { name: 'Docs site' });
const eventsKey = (await admin('POST', `/products/${product.id}/keys`, { kind: 'events', name: 'backend' }))
  .key as string;
await admin('POST', `/products/${product.id}/keys`, {
  kind: 'browser',
  name: 'web',
  allowed_origins: ['https://shop.example', 'https://*.shop.example'],
});
await admin('POST', `/products/${product.id}/keys`, { kind: 'reports', name: 'dashboard' });
await admin('PUT', `/products/${product.id}/traffic_source`, {
  provider: 'plausible',
  site_id: 'shop.example',
  api_key: 'plausible-key',
  base_url: plausible.url,
});
await admin('POST', `/products/${product.id}/traffic_source/sync`, {});
await admin('POST', `/products/${product.id}/destinations`, {
  type: 'webhook',
  name: 'warehouse loader',
  url: `${receiver.url}/hooks`,
  batch: { max_messages: 50 },
});

const send = (url: string, payload: object) =>
  ctx.app.inject({ method: 'POST', url, headers: bearer(eventsKey), payload });
await send('/api/v2/events', {
  event_type: 'page',
  action: 'viewed',
  subject_type: 'user',
  subject_id: 'anon_7f3a',
  properties: { path: '/pricing' },
});
await send('/api/v2/identify', {
  external_id: 'user_42',
  identifiers: { email: 'ada@example.com', stripe_customer: 'cus_Q1w2' },
  traits: { name: 'Ada Lovelace', plan: 'pro' },
});
await send('/api/v2/alias', { from_external_id: 'anon_7f3a', to_external_id: 'user_42' });
await send('/api/v2/events', {
  event_type: 'project',
  action: 'created',
  subject_type: 'user',
  subject_id: 'user_42',
  properties: { project_id: 'prj_9', template: 'blank' },
});
await send('/api/v2/events/batch', {
  events: [
    {
      event_type: 'order',
      action: 'completed',
      subject_type: 'user',
      subject_id: 'user_42',
      occurred_at: 'last tuesday',
    },
  ],
});
// Governance: a catalogue of a few shapes, a plan in warn mode with violations, an erasure, retention.
for (let i = 0; i < 12; i++) {
  await send('/api/v2/events', {
    event_type: 'order',
    action: 'completed',
    subject_type: 'user',
    subject_id: `user_${i}`,
    properties: {
      total: i % 4 === 0 ? String(10 * i) : 10 * i,
      currency: 'EUR',
      items: [{ sku: 'a' }],
      meta: { source: i % 2 ? 'web' : 'ios' },
    },
  });
  await send('/api/v2/events', {
    event_type: 'signup',
    action: 'started',
    subject_type: 'user',
    subject_id: `anon_${i}`,
    properties: { plan: 'free', referrer: i % 3 ? null : 'ad' },
  });
}
await admin('PUT', `/products/${product.id}/tracking_plan`, {
  mode: 'warn',
  unplanned: 'warn',
  events: {
    order_completed: {
      properties: {
        type: 'object',
        required: ['total', 'currency'],
        properties: { total: { type: 'number' }, currency: { type: 'string', enum: ['EUR', 'USD'] } },
      },
    },
  },
});
await send('/api/v2/events', {
  event_type: 'order',
  action: 'completed',
  subject_type: 'user',
  subject_id: 'user_3',
  properties: { total: '12.50', currency: 'GBP' },
});
await send('/api/v2/events', { event_type: 'cart', action: 'abandoned', subject_type: 'user', subject_id: 'user_3' });
ctx.services.erasure.start();
await send('/api/v2/identify', { external_id: 'user_77', identifiers: { email: 'grace@example.com' } });
await send('/api/v2/events', { event_type: 'page', action: 'viewed', subject_type: 'user', subject_id: 'user_77' });
const erasure = await admin('POST', `/products/${product.id}/erasures`, {
  external_id: 'user_77',
  reason: 'GDPR request #1042',
});
for (
  let i = 0;
  i < 100 && (await admin('GET', `/products/${product.id}/erasures/${erasure.id}`)).status !== 'done';
  i++
)
  await new Promise((r) => setTimeout(r, 100));
await ctx.app.inject({
  method: 'PATCH',
  url: `/admin/v1/products/${product.id}`,
  headers: adminHeaders(),
  payload: { retention: { events_days: 395 } },
});
await ctx.services.governance.catalog.flush();

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: [...CHROMIUM_ARGS, '--proxy-server=http://127.0.0.1:9', `--proxy-bypass-list=127.0.0.1:${port}`],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
const page = await context.newPage();

const started = Date.now();
await page.goto(`${base}/console/`);
await page.getByLabel('Admin token').waitFor();
type PagePerformance = {
  performance: {
    getEntriesByName(name: string): Array<{ startTime: number }>;
    getEntriesByType(type: string): Array<{ loadEventEnd?: number }>;
  };
};
const rendered = await page.evaluate(
  () =>
    (globalThis as unknown as PagePerformance).performance.getEntriesByName('inlet:first-render')[0]?.startTime ?? NaN,
);
const loaded = await page.evaluate(
  () => (globalThis as unknown as PagePerformance).performance.getEntriesByType('navigation')[0]?.loadEventEnd ?? NaN,
);
console.log(
  `first screen (sign-in form): rendered ${Math.round(rendered)} ms after navigation start (page clock), load event ${Math.round(loaded)} ms; seen by the script after ${Date.now() - started} ms (cold cache)`,
);
await page.screenshot({ path: join(outDir, 'sign-in.png') });
await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
await page.getByRole('button', { name: 'Sign in' }).click();
await page.getByRole('heading', { name: 'Products', exact: true }).waitFor();
const warm = Date.now();
await page.reload();
await page.getByRole('heading', { name: 'Products', exact: true }).waitFor();
console.log(`products page after reload (signed in, warm cache): ${Date.now() - warm} ms`);
await page.screenshot({ path: join(outDir, 'products.png'), fullPage: true });

const shot = async (route: string, name: string, ready: () => Promise<unknown>) => {
  await page.goto(`${base}/console/#/p/${product.id}/${route}`);
  await ready();
  await page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });
};

await shot('events', 'live-events', async () => {
  await page.locator('.stream-state').getByText('live').waitFor();
  for (let i = 0; i < 6; i++) {
    await send('/api/v2/events', {
      event_type: i % 2 ? 'order' : 'page',
      action: i % 2 ? 'completed' : 'viewed',
      subject_type: 'user',
      subject_id: `user_${40 + i}`,
      properties: { total: 10 * i, currency: 'EUR' },
    });
  }
  await page.locator('[data-uuid]').nth(5).waitFor();
  await page.locator('[data-uuid]').first().click();
  await page.getByRole('region', { name: 'Recent rejections' }).getByRole('button').first().waitFor();
});
await shot('keys', 'keys', async () => {
  await page.getByRole('cell', { name: 'https://shop.example' }).waitFor();
  await page.getByLabel('browser', { exact: false }).first().check();
  await page.getByLabel('Allowed origins, one a line').fill('https://shop.example');
  await page.getByRole('button', { name: 'Create browser key' }).click();
  await page.getByTestId('new-secret').waitFor();
});
await shot('users/identifier/email%3Aada%40example.com', 'users', () =>
  page.getByRole('region', { name: 'Merge history' }).getByText('anon_7f3a').waitFor(),
);
await shot('traffic', 'traffic', () =>
  page.getByRole('region', { name: 'Breakdown' }).getByRole('cell', { name: 'Google' }).waitFor(),
);
await shot('destinations', 'destinations', async () => {
  await page.getByText('warehouse loader').waitFor();
  await page.getByRole('button', { name: 'Show delivery log' }).click();
  await page
    .getByRole('cell', { name: /success/ })
    .first()
    .waitFor();
});
await shot('catalog/order_completed', 'catalogue', () =>
  page.getByRole('table', { name: 'Properties of order_completed' }).getByText('meta.source').waitFor(),
);
await shot('plan', 'tracking-plan', () =>
  page.getByRole('table', { name: 'Violations, newest first' }).getByText('/properties/currency').first().waitFor(),
);
await shot('privacy', 'privacy', () =>
  page.getByRole('table', { name: 'Erasures, newest first' }).getByText('done').waitFor(),
);
await shot('legacy', 'legacy-usage', () => page.getByRole('heading', { name: /Legacy usage/ }).waitFor());
await page.goto(`${base}/console/#/health`);
await page.getByText('Ingest rate', { exact: true }).waitFor();
await page.screenshot({ path: join(outDir, 'health.png'), fullPage: true });

// A phone (390 px wide).
await page.setViewportSize({ width: 390, height: 844 });
await shot('events', 'phone-live-events', () => page.locator('[data-uuid]').first().waitFor());
await shot('privacy', 'phone-privacy', () =>
  page.getByRole('table', { name: 'Erasures, newest first' }).getByText('done').waitFor(),
);
await shot('users/id/user_42', 'phone-users', () =>
  page.getByRole('region', { name: 'Merge history' }).getByText('anon_7f3a').waitFor(),
);

await browser.close();
await plausible.close();
await receiver.close();
await ctx.close();
console.log(`screenshots in ${outDir}`);
