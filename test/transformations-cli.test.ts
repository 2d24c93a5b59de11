// `inlet transformation set|get|versions|test` against the database a running app uses: a version set through the
// CLI applies to the app's next events within INLET_TRACKING_PLAN_REFRESH_MS; an invalid file prints each problem
// with its pointer and exits 1; test prints results and stores nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { adminHeaders, bearer } from './helpers.js';
import { cliBesideApp } from './support/cli.js';

const beside = cliBesideApp({ trackingPlanRefreshMs: 50 });
const cli = beside.cli;

describe('inlet transformation', () => {
  it('set → the app applies it; get, versions; an invalid file exits 1 with pointers; test stores nothing', async () => {
    const productId = (
      await beside
        .app()
        .inject({ method: 'POST', url: '/admin/v1/products', headers: adminHeaders(), payload: { name: 'cli' } })
    ).json().data.id as string;
    const key = (
      await beside.app().inject({
        method: 'POST',
        url: `/admin/v1/products/${productId}/keys`,
        headers: adminHeaders(),
        payload: { kind: 'events' },
      })
    ).json().data.key as string;
    const send = () =>
      beside.app().inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(key),
        payload: { event: 'a.b', subject_type: 'user', subject_id: 'u1', properties: { email: 'x@example.com' } },
      });
    // The app has seen the product (no transformation) before the CLI sets one.
    assert.deepEqual((await send()).json().data.properties, { email: 'x@example.com' });

    const file = join(beside.dir(), 'steps.json');
    writeFileSync(file, JSON.stringify({ steps: [{ kind: 'mask', paths: ['properties.email'], with: 'redact' }] }));
    const set = await cli('transformation', 'set', '--product', productId, file);
    assert.equal(set.code, 0, set.err);
    assert.match(set.out, /stored transformation version 1/);
    await new Promise((resolve) => setTimeout(resolve, 120));
    await send(); // starts the refresh of the stale cache entry
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual((await send()).json().data.properties, { email: '[redacted]' });

    const get = await cli('transformation', 'get', '--product', productId);
    assert.equal(JSON.parse(get.out).steps[0].kind, 'mask');
    const versions = await cli('transformation', 'versions', '--product', productId, '--json');
    assert.deepEqual(
      JSON.parse(versions.out).data.map((v: { version: number }) => v.version),
      [1],
    );

    writeFileSync(file, JSON.stringify({ steps: [{ kind: 'remove', paths: ['source'] }] }));
    const invalid = await cli('transformation', 'set', '--product', productId, file);
    assert.equal(invalid.code, 1);
    assert.match(invalid.err, /\/steps\/0\/paths\/0: "source" may not be changed/);

    const testFile = join(beside.dir(), 'test.json');
    writeFileSync(
      testFile,
      JSON.stringify({ items: [{ event: 'c.d', subject_type: 'user', subject_id: 'u2', properties: { email: 'y' } }] }),
    );
    const tested = await cli('transformation', 'test', '--product', productId, testFile);
    assert.equal(tested.code, 0, tested.err);
    const [result] = JSON.parse(tested.out);
    assert.equal(result.output.properties.email, '[redacted]');
    const stored = (
      await beside
        .app()
        .inject({ method: 'GET', url: `/admin/v1/products/${productId}/events`, headers: adminHeaders() })
    ).json().data;
    assert.equal(stored.length, 3, 'the three events sent; the test stored nothing');
  });
});
