// `inlet users show` against the database a running app wrote to.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { bearer, createTestApp, type TestContext } from './helpers.js';
import { cliEnv, inlet } from './support/cli.js';

let ctx: TestContext;
let productId: string;

/** The CLI on the server's machine: the database the app wrote to. */
const cli = (args: string[]) => inlet(cliEnv(ctx.database), ...args);

before(async () => {
  ctx = await createTestApp();
  const product = await ctx.product('cli');
  productId = product.id;
  const post = async (url: string, payload: object) => {
    const res = await ctx.app.inject({ method: 'POST', url, headers: bearer(product.eventsKey), payload });
    assert.ok(res.statusCode < 300, res.body);
  };
  await post('/api/v2/identify', {
    external_id: 'cli-user',
    identifiers: { email: 'cli@x.io' },
    traits: { plan: 'pro' },
  });
  await post('/api/v2/alias', { from_external_id: 'cli anon', to_external_id: 'cli-user' });
  await post('/api/v2/events', {
    event_type: 'page',
    action: 'viewed',
    subject_type: 'user',
    subject_id: 'cli anon',
    occurred_at: '2026-10-01T00:00:00Z',
  });
});
after(() => ctx.close());

describe('inlet users show', () => {
  it('--json prints the resolved user, its merges and events, found through an alias', async () => {
    const result = await cli(['users', 'show', '--product', productId, 'cli anon', '--json']);
    assert.equal(result.code, 0, result.err);
    const { data } = JSON.parse(result.out);
    assert.equal(data.external_id, 'cli-user');
    assert.deepEqual(data.aliases, ['cli anon']);
    assert.deepEqual(data.identifiers, { email: 'cli@x.io' });
    assert.deepEqual(data.traits, { plan: 'pro' });
    assert.deepEqual(
      data.merges.map((m: { from_external_id: string }) => m.from_external_id),
      ['cli anon'],
    );
    assert.deepEqual(
      data.events.map((e: { subject_id: string; canonical_name: string }) => [e.subject_id, e.canonical_name]),
      [['cli anon', 'page_viewed']],
    );
  });

  it('prints a readable summary', async () => {
    const result = await cli(['users', 'show', '--product', productId, 'cli-user']);
    assert.equal(result.code, 0, result.err);
    assert.match(result.out, /external_id cli-user/);
    assert.match(result.out, /aliases\s+cli anon/);
    assert.match(result.out, /email=cli@x\.io/);
    assert.match(result.out, /page_viewed/);
  });

  it('exits 1 for an unknown user or product, 2 for a usage error', async () => {
    const unknown = await cli(['users', 'show', '--product', productId, 'nobody']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.err, /No user with external id "nobody"/);
    assert.equal((await cli(['users', 'show', '--product', 'prd_missing', 'cli-user'])).code, 1);
    assert.equal((await cli(['users', 'show', 'cli-user'])).code, 2);
    assert.equal((await cli(['users', 'show', '--product', productId])).code, 2);
  });
});
