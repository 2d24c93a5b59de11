// The console's files at /console (src/http/console.ts): index.html revalidated, hashed assets cached for a
// year, compressed, ETags, security headers; the page that explains an admin API that is off or a console
// that was not built; INLET_CONSOLE=off. Uses its own small build in a temp dir (the real one is exercised
// in Chromium by test/system/console.test.ts).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, brotliDecompressSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { buildApp } from '../src/http/app.js';
import { createTestServices, type TestDatabase } from './helpers.js';
import type { Services } from '../src/services.js';
import type { FastifyInstance } from 'fastify';

const INDEX =
  '<!doctype html><html><head><script type="module" src="/console/assets/index-AbCd1234.js"></script></head><body><div id="app"></div></body></html>';
const SCRIPT = `console.log(${JSON.stringify('x'.repeat(4000))});`;

describe('the console at /console', () => {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-console-'));
  const opened: Array<{ app: FastifyInstance; close(): Promise<void> }> = [];

  async function appWith(
    overrides: Parameters<typeof createTestServices>[0],
    assetsDir = dir,
  ): Promise<FastifyInstance> {
    const made: { services: Services; database: TestDatabase; close(): Promise<void> } =
      await createTestServices(overrides);
    const app = await buildApp(made.services, { logger: false, consoleAssetsDir: assetsDir });
    await app.ready();
    opened.push({ app, close: made.close });
    return app;
  }

  before(() => {
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), INDEX);
    writeFileSync(join(dir, 'assets', 'index-AbCd1234.js'), SCRIPT);
  });
  after(async () => {
    for (const { app, close } of opened) {
      await app.close();
      await close();
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves index.html at /console and /console/ (no-cache, ETag, CSP), and any other app path', async () => {
    const app = await appWith({});
    for (const url of ['/console', '/console/', '/console/p/prd_1/events']) {
      const res = await app.inject({ method: 'GET', url });
      assert.equal(res.statusCode, 200, url);
      assert.equal(res.body, INDEX, url);
      assert.equal(res.headers['content-type'], 'text/html; charset=utf-8');
      assert.equal(res.headers['cache-control'], 'no-cache');
      assert.match(String(res.headers['content-security-policy']), /default-src 'none'; script-src 'self'/);
      assert.match(String(res.headers['content-security-policy']), /connect-src 'self'/);
      assert.equal(res.headers['x-content-type-options'], 'nosniff');
      assert.equal(res.headers['set-cookie'], undefined);
    }
    const first = await app.inject({ method: 'GET', url: '/console/' });
    const again = await app.inject({
      method: 'GET',
      url: '/console/',
      headers: { 'if-none-match': String(first.headers.etag) },
    });
    assert.equal(again.statusCode, 304);
    assert.equal(again.body, '');
  });

  it('serves hashed assets immutable for a year, brotli or gzip when accepted; an unknown asset is 404', async () => {
    const app = await appWith({});
    const url = '/console/assets/index-AbCd1234.js';
    const plain = await app.inject({ method: 'GET', url });
    assert.equal(plain.statusCode, 200);
    assert.equal(plain.body, SCRIPT);
    assert.equal(plain.headers['content-type'], 'text/javascript; charset=utf-8');
    assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
    assert.equal(plain.headers['content-encoding'], undefined);
    const gzip = await app.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip' } });
    assert.equal(gzip.headers['content-encoding'], 'gzip');
    assert.equal(gunzipSync(gzip.rawPayload).toString(), SCRIPT);
    const br = await app.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip, deflate, br' } });
    assert.equal(br.headers['content-encoding'], 'br');
    assert.equal(brotliDecompressSync(br.rawPayload).toString(), SCRIPT);
    assert.ok(br.rawPayload.length < SCRIPT.length / 10);
    const refused = await app.inject({ method: 'GET', url, headers: { 'accept-encoding': 'br;q=0, gzip' } });
    assert.equal(refused.headers['content-encoding'], 'gzip');
    const missing = await app.inject({ method: 'GET', url: '/console/assets/nope-123.js' });
    assert.equal(missing.statusCode, 404);
  });

  it('without INLET_ADMIN_TOKEN: a page that says the admin API is off and how to turn it on', async () => {
    const app = await appWith({ adminToken: undefined });
    for (const url of ['/console', '/console/', '/console/assets/index-AbCd1234.js']) {
      const res = await app.inject({ method: 'GET', url });
      assert.equal(res.statusCode, 404, url);
      assert.equal(res.headers['content-type'], 'text/html; charset=utf-8');
      assert.match(res.body, /admin API is off/);
      assert.match(res.body, /INLET_ADMIN_TOKEN/);
    }
  });

  it('a checkout whose console was not built says how to build it; INLET_CONSOLE=off makes /console unknown', async () => {
    const unbuilt = await appWith({}, join(dir, 'missing'));
    const res = await unbuilt.inject({ method: 'GET', url: '/console' });
    assert.equal(res.statusCode, 404);
    assert.match(res.body, /npm run build/);
    const off = await appWith({ consoleEnabled: false });
    const gone = await off.inject({ method: 'GET', url: '/console/' });
    assert.equal(gone.statusCode, 404);
    assert.match(String(gone.headers['content-type']), /^application\/problem\+json/);
  });
});
