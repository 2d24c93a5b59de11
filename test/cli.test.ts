// Contract §1 "CLI": products and keys managed directly on the configured database, --json output,
// usage errors (exit 2), and keys created by the CLI working against the HTTP app.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearer, createTestServices } from './helpers.js';
import { buildApp } from '../src/http/app.js';
import { cliTestDatabase, inlet } from './support/cli.js';

const { cli, database } = cliTestDatabase();

describe('inlet CLI', () => {
  let productId: string;

  it('products create prints the new product; --json prints { data: product }', async () => {
    const human = await cli('products', 'create', 'Acme', 'Corp');
    assert.equal(human.code, 0, human.err);
    assert.match(human.out, /created product prd_\w+ \(Acme Corp\)/);
    const json = await cli('products', 'create', 'Json Co', '--json');
    assert.equal(json.code, 0, json.err);
    const { data } = JSON.parse(json.out);
    assert.equal(data.name, 'Json Co');
    assert.match(data.id, /^prd_/);
    assert.ok(data.created_at);
    productId = data.id;
  });

  it('products list shows them (table and --json)', async () => {
    const human = await cli('products', 'list');
    assert.equal(human.code, 0);
    assert.match(human.out, /Acme Corp/);
    assert.match(human.out, new RegExp(productId));
    const json = await cli('products', 'list', '--json');
    const names = (JSON.parse(json.out).data as Array<{ name: string }>).map((p) => p.name);
    assert.ok(names.includes('Acme Corp') && names.includes('Json Co'));
  });

  it('keys create prints the secret once; keys list never shows it; revoke marks it revoked', async () => {
    const human = await cli('keys', 'create', '--product', productId, '--kind', 'events', '--name', 'ci');
    assert.equal(human.code, 0, human.err);
    const secret = /inlet_ev_[0-9A-Za-z]{32,}/.exec(human.out)?.[0];
    assert.ok(secret, human.out);
    assert.equal(human.out.split(secret).length - 1, 1, 'printed exactly once');

    const json = await cli('keys', 'create', '--product', productId, '--kind', 'reports', '--json');
    assert.equal(json.code, 0, json.err);
    const created = JSON.parse(json.out).data;
    assert.match(created.key, /^inlet_rp_[0-9A-Za-z]{32,}$/);
    assert.equal(created.kind, 'reports');
    assert.ok(created.key.startsWith(created.prefix));

    const list = await cli('keys', 'list', '--product', productId);
    assert.equal(list.code, 0);
    assert.equal(list.out.includes(secret), false);
    assert.equal(list.out.includes(created.key), false);
    assert.match(list.out, new RegExp(created.id));
    const listJson = await cli('keys', 'list', '--product', productId, '--json');
    const keys = JSON.parse(listJson.out).data as Array<Record<string, unknown>>;
    assert.equal(keys.length, 2);
    assert.ok(keys.every((k) => !('key' in k)));
    assert.equal(listJson.out.includes(created.key), false);

    const revoke = await cli('keys', 'revoke', created.id, '--json');
    assert.equal(revoke.code, 0, revoke.err);
    assert.ok(JSON.parse(revoke.out).data.revoked_at);
    const after = JSON.parse((await cli('keys', 'list', '--product', productId, '--json')).out).data as Array<{
      id: string;
      revoked_at: string | null;
    }>;
    assert.ok(after.find((k) => k.id === created.id)?.revoked_at);
  });

  it('a key created by the CLI works against an app on the same database; a CLI-revoked key does not', async () => {
    const live = JSON.parse(
      (await cli('keys', 'create', '--product', productId, '--kind', 'events', '--json')).out,
    ).data;
    const dead = JSON.parse(
      (await cli('keys', 'create', '--product', productId, '--kind', 'events', '--json')).out,
    ).data;
    assert.equal((await cli('keys', 'revoke', dead.id)).code, 0);
    const { services, close } = await createTestServices({}, { ...database(), drop: async () => {} });
    const app = await buildApp(services, { logger: false });
    try {
      const event = { subject_type: 'user', subject_id: 'u', event_type: 'cli', action: 'tested' };
      const ok = await app.inject({ method: 'POST', url: '/api/v2/events', headers: bearer(live.key), payload: event });
      assert.equal(ok.statusCode, 201, ok.body);
      assert.equal(await services.storage.events.count(productId), 1);
      const refused = await app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(dead.key),
        payload: event,
      });
      assert.equal(refused.statusCode, 401);
    } finally {
      await app.close();
      await close();
    }
  });

  it('keys create with --expires-at stores the expiry', async () => {
    const res = await cli(
      'keys',
      'create',
      '--product',
      productId,
      '--kind',
      'events',
      '--expires-at',
      '2099-01-01T00:00:00Z',
      '--json',
    );
    assert.equal(res.code, 0, res.err);
    assert.equal(JSON.parse(res.out).data.expires_at, '2099-01-01T00:00:00.000Z');
  });

  const usage: Array<[string, string[], RegExp]> = [
    ['no command', [], /Usage/],
    ['unknown command', ['frobnicate'], /unknown command/],
    ['unknown subcommand', ['products', 'delete'], /unknown command/],
    ['products create without a name', ['products', 'create'], /name is required/],
    ['keys create without --product', ['keys', 'create', '--kind', 'events'], /--product is required/],
    ['keys create without --kind', ['keys', 'create', '--product', 'prd_x'], /--kind is required/],
    [
      'keys create with a bad --kind',
      ['keys', 'create', '--product', 'prd_x', '--kind', 'admin'],
      /--kind must be events, reports or browser/,
    ],
    [
      'keys create with a bad --expires-at',
      ['keys', 'create', '--product', 'prd_x', '--kind', 'events', '--expires-at', 'soon'],
      /--expires-at/,
    ],
    [
      'keys create with a past --expires-at',
      ['keys', 'create', '--product', 'prd_x', '--kind', 'events', '--expires-at', '2001-01-01T00:00:00Z'],
      /future/,
    ],
    ['keys list without --product', ['keys', 'list'], /--product is required/],
    ['keys revoke without an id', ['keys', 'revoke'], /key id is required/],
    ['an unknown option', ['products', 'list', '--verbose'], /verbose/],
  ];
  for (const [why, argv, message] of usage) {
    it(`exit 2 with a clear message for ${why}`, async () => {
      const res = await cli(...argv);
      assert.equal(res.code, 2, `${res.out}\n${res.err}`);
      assert.match(`${res.err}\n${res.out}`, message);
      if (argv.length > 0) assert.match(res.err, /usage|Run "inlet help"/i);
    });
  }

  it('exit 1 with the reason for an unknown product or key', async () => {
    const product = await cli('keys', 'create', '--product', 'prd_missing', '--kind', 'events');
    assert.equal(product.code, 1);
    assert.match(product.err, /prd_missing/);
    const key = await cli('keys', 'revoke', 'key_missing');
    assert.equal(key.code, 1);
    assert.match(key.err, /key_missing/);
  });

  it('exit 2 naming the variable for a bad configuration', async () => {
    const { code, err } = await inlet({ INLET_DATABASE_URL: 'mysql://nope' }, 'products', 'list');
    assert.equal(code, 2);
    assert.match(err, /INLET_DATABASE_URL/);
  });

  it('help exits 0', async () => {
    const res = await cli('help');
    assert.equal(res.code, 0);
    assert.match(res.out, /keys create/);
  });
});
