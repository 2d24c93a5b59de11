// POST /api/v2/identify, POST /api/v2/alias and the admin user lookup through the real app
// (contract §3 and §6): happy, error and security cases, one rule at a time.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

type Product = Awaited<ReturnType<TestContext['product']>>;

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp();
});
after(() => ctx.close());

function identify(product: Product, payload: unknown, key = product.eventsKey): Promise<LightMyRequestResponse> {
  return ctx.app.inject({ method: 'POST', url: '/api/v2/identify', headers: bearer(key), payload: payload as object });
}

function alias(product: Product, payload: unknown, key = product.eventsKey): Promise<LightMyRequestResponse> {
  return ctx.app.inject({ method: 'POST', url: '/api/v2/alias', headers: bearer(key), payload: payload as object });
}

function lookup(productId: string, externalId: string, query = ''): Promise<LightMyRequestResponse> {
  return ctx.app.inject({
    method: 'GET',
    url: `/admin/v1/products/${productId}/users/${encodeURIComponent(externalId)}${query}`,
    headers: adminHeaders(),
  });
}

/** The user_customer without the server-assigned fields. */
function userOf(response: LightMyRequestResponse) {
  const { id, created_at: createdAt, updated_at: updatedAt, ...rest } = response.json().data as Record<string, unknown>;
  assert.match(String(id), /^usr_/);
  assert.match(String(createdAt), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.match(String(updatedAt), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  return rest;
}

function expectValidation(response: LightMyRequestResponse, pointer: string, message?: RegExp): void {
  assert.equal(response.statusCode, 400, response.body);
  const problem = problemOf(response);
  assert.equal(problem.code, 'validation_error');
  const error = problem.errors?.find((e) => e.pointer === pointer);
  assert.ok(error, `expected an error at ${pointer}: ${response.body}`);
  if (message) assert.match(error.message, message);
}

describe('POST /api/v2/identify', () => {
  let p: Product;
  before(async () => {
    p = await ctx.product('identify');
  });

  it('creates a user: 201 with the user_customer record', async () => {
    const res = await identify(p, {
      external_id: 'create-1',
      identifiers: { email: ' Ada@Example.COM ', stripe: 'Cus_1' },
      traits: { plan: 'pro', seats: 3 },
    });
    assert.equal(res.statusCode, 201);
    const body = res.json();
    assert.deepEqual(Object.keys(body.data).sort(), [
      'aliases',
      'created_at',
      'external_id',
      'id',
      'identifiers',
      'traits',
      'updated_at',
    ]);
    assert.equal(body.data.created_at, body.data.updated_at);
    assert.deepEqual(userOf(res), {
      external_id: 'create-1',
      identifiers: { email: 'ada@example.com', stripe: 'Cus_1' },
      traits: { plan: 'pro', seats: 3 },
      aliases: [],
    });
    assert.ok(res.headers['x-request-id']);
  });

  it('creates with only external_id', async () => {
    const res = await identify(p, { external_id: 'bare-1' });
    assert.equal(res.statusCode, 201);
    assert.deepEqual(userOf(res), { external_id: 'bare-1', identifiers: {}, traits: {}, aliases: [] });
  });

  it('updates: 200, same id, traits shallow-merged, null removes a trait or an identifier kind', async () => {
    const created = await identify(p, {
      external_id: 'update-1',
      identifiers: { email: 'u1@x.io', crm: 'c1' },
      traits: { plan: 'free', name: 'Ada', address: { city: 'Paris', zip: '75001' } },
    });
    const updated = await identify(p, {
      external_id: 'update-1',
      identifiers: { crm: null, phone: '+33' },
      traits: { plan: 'pro', name: null, address: { city: 'Lyon' } },
    });
    assert.equal(updated.statusCode, 200);
    assert.equal(updated.json().data.id, created.json().data.id);
    assert.equal(updated.json().data.created_at, created.json().data.created_at);
    assert.deepEqual(userOf(updated), {
      external_id: 'update-1',
      identifiers: { email: 'u1@x.io', phone: '+33' },
      traits: { plan: 'pro', address: { city: 'Lyon' } },
      aliases: [],
    });
  });

  it('one value per kind: a new value replaces the old one, which becomes free', async () => {
    await identify(p, { external_id: 'kind-1', identifiers: { email: 'old@x.io' } });
    const res = await identify(p, { external_id: 'kind-1', identifiers: { email: 'new@x.io' } });
    assert.deepEqual(res.json().data.identifiers, { email: 'new@x.io' });
    assert.equal((await identify(p, { external_id: 'kind-2', identifiers: { email: 'old@x.io' } })).statusCode, 201);
  });

  it('email compares trimmed and lower-cased; other kinds compare exactly', async () => {
    await identify(p, { external_id: 'cmp-1', identifiers: { email: 'same@x.io', crm: 'ABC' } });
    const sameEmail = await identify(p, { external_id: 'cmp-2', identifiers: { email: '  SAME@X.IO' } });
    assert.equal(sameEmail.statusCode, 409);
    assert.deepEqual(problemOf(sameEmail).conflicts, [{ kind: 'email', value: 'same@x.io', external_id: 'cmp-1' }]);
    const otherCase = await identify(p, { external_id: 'cmp-3', identifiers: { crm: 'abc' } });
    assert.equal(otherCase.statusCode, 201);
    assert.deepEqual(otherCase.json().data.identifiers, { crm: 'abc' });
  });

  it('409 identifier_conflict names every identifier held by another user, and changes nothing', async () => {
    await identify(p, { external_id: 'holder-1', identifiers: { email: 'taken@x.io' } });
    await identify(p, { external_id: 'holder-2', identifiers: { crm: 'taken' } });
    await identify(p, { external_id: 'claimer', traits: { plan: 'free' } });
    const before = (await lookup(p.id, 'claimer')).json().data;
    const res = await identify(p, {
      external_id: 'claimer',
      identifiers: { email: 'taken@x.io', crm: 'taken', phone: 'free' },
      traits: { plan: 'pro' },
    });
    assert.equal(res.statusCode, 409);
    const problem = problemOf(res);
    assert.equal(problem.code, 'identifier_conflict');
    assert.equal(problem.type, 'urn:inlet:problem:identifier_conflict');
    assert.deepEqual(problem.conflicts, [
      { kind: 'crm', value: 'taken', external_id: 'holder-2' },
      { kind: 'email', value: 'taken@x.io', external_id: 'holder-1' },
    ]);
    assert.deepEqual((await lookup(p.id, 'claimer')).json().data, before);
    // A user that would be created by a conflicting identify is not created.
    assert.equal(
      (await identify(p, { external_id: 'never-created', identifiers: { email: 'taken@x.io' } })).statusCode,
      409,
    );
    assert.equal((await lookup(p.id, 'never-created')).statusCode, 404);
  });

  it('an external id merged away by alias resolves to the user it was merged into', async () => {
    await identify(p, { external_id: 'anon-r', traits: { first_touch: 'ad' } });
    await identify(p, { external_id: 'known-r', identifiers: { email: 'r@x.io' } });
    assert.equal((await alias(p, { from_external_id: 'anon-r', to_external_id: 'known-r' })).statusCode, 200);
    const res = await identify(p, { external_id: 'anon-r', traits: { plan: 'pro' } });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(userOf(res), {
      external_id: 'known-r',
      identifiers: { email: 'r@x.io' },
      traits: { first_touch: 'ad', plan: 'pro' },
      aliases: ['anon-r'],
    });
  });

  describe('400 validation_error', () => {
    it('requires external_id', async () =>
      expectValidation(await identify(p, { traits: {} }), '/external_id', /required/));

    for (const placeholder of [
      'null',
      'undefined',
      'Anonymous',
      'GUEST',
      'none',
      'nil',
      '0',
      '-1',
      '00000000-0000-0000-0000-000000000000',
      '  ',
      ' null ',
    ]) {
      it(`refuses the placeholder external_id ${JSON.stringify(placeholder)}`, async () =>
        expectValidation(await identify(p, { external_id: placeholder }), '/external_id', /placeholder/));
    }

    it('refuses an empty and a 256-character external_id, accepts 255', async () => {
      expectValidation(await identify(p, { external_id: '' }), '/external_id');
      expectValidation(await identify(p, { external_id: 'x'.repeat(256) }), '/external_id', /255/);
      assert.equal((await identify(p, { external_id: 'x'.repeat(255) })).statusCode, 201);
    });

    it('refuses a non-string external_id', async () =>
      expectValidation(await identify(p, { external_id: 42 }), '/external_id', /string/));

    it('refuses unknown fields', async () =>
      expectValidation(await identify(p, { external_id: 'v-1', trait: {} }), '/trait', /not a known field/));

    it('refuses identifiers that are not an object', async () =>
      expectValidation(await identify(p, { external_id: 'v-1', identifiers: ['a'] }), '/identifiers'));

    it('refuses identifier kinds that break the pattern or are longer than 64', async () => {
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { Email: 'a@x.io' } }),
        '/identifiers/Email',
        /\^\[a-z\]/,
      );
      expectValidation(await identify(p, { external_id: 'v-1', identifiers: { '9x': 'a' } }), '/identifiers/9x');
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { ['k'.repeat(65)]: 'a' } }),
        `/identifiers/${'k'.repeat(65)}`,
        /64/,
      );
      assert.equal(
        (await identify(p, { external_id: 'v-64', identifiers: { ['k'.repeat(64)]: 'a' } })).statusCode,
        201,
      );
    });

    it('refuses more than 20 kinds, accepts 20', async () => {
      const kinds = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, `v-20-${n}`]));
      expectValidation(await identify(p, { external_id: 'v-21', identifiers: kinds(21) }), '/identifiers', /20/);
      assert.equal((await identify(p, { external_id: 'v-20', identifiers: kinds(20) })).statusCode, 201);
    });

    it('refuses identifier values that are empty, longer than 512 or not strings; accepts 512', async () => {
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { crm: '' } }),
        '/identifiers/crm',
        /empty/,
      );
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { crm: 'x'.repeat(513) } }),
        '/identifiers/crm',
        /512/,
      );
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { crm: 12 } }),
        '/identifiers/crm',
        /string/,
      );
      expectValidation(
        await identify(p, { external_id: 'v-1', identifiers: { email: '   ' } }),
        '/identifiers/email',
        /blank/,
      );
      assert.equal(
        (await identify(p, { external_id: 'v-512', identifiers: { crm: 'y'.repeat(512) } })).statusCode,
        201,
      );
    });

    it('refuses traits that are not an object or larger than 32 KiB', async () => {
      expectValidation(await identify(p, { external_id: 'v-1', traits: 'pro' }), '/traits', /object/);
      expectValidation(
        await identify(p, { external_id: 'v-1', traits: { blob: 'x'.repeat(32 * 1024) } }),
        '/traits',
        /32768 bytes/,
      );
      assert.equal(
        (await identify(p, { external_id: 'v-32k', traits: { blob: 'x'.repeat(32 * 1024 - 20) } })).statusCode,
        201,
      );
    });

    it('refuses trait values that would not be stored as sent (1e400, NUL, deep nesting), on both backends alike', async () => {
      const raw = (body: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/api/v2/identify',
          headers: { ...bearer(p.eventsKey), 'content-type': 'application/json' },
          payload: body,
        });
      expectValidation(await raw('{"external_id":"v-inf","traits":{"big":1e400}}'), '/traits/big', /finite/);
      expectValidation(
        await identify(p, { external_id: 'v-nul', traits: { name: 'a\u0000b' } }),
        '/traits/name',
        /NUL/,
      );
      let deep: unknown = 1;
      for (let i = 0; i < 100; i++) deep = { a: deep };
      const nested = await identify(p, { external_id: 'v-deep', traits: { deep } });
      assert.equal(nested.statusCode, 400, nested.body);
      assert.match(problemOf(nested).errors![0]!.message, /nested more than 64/);
      assert.equal((await lookup(p.id, 'v-inf')).statusCode, 404, 'nothing was created');
    });

    it('a refused request changes nothing', async () => {
      await identify(p, { external_id: 'v-keep', traits: { plan: 'free' } });
      await identify(p, { external_id: 'v-keep', identifiers: { Bad: 'x' }, traits: { plan: 'pro' } });
      assert.deepEqual((await lookup(p.id, 'v-keep')).json().data.traits, { plan: 'free' });
    });
  });

  it('413 payload_too_large for a body over 128 KiB', async () => {
    const res = await identify(p, { external_id: 'big-1', traits: { blob: 'x'.repeat(129 * 1024) } });
    assert.equal(res.statusCode, 413);
    assert.equal(problemOf(res).code, 'payload_too_large');
  });

  it('400 invalid_json and 415 for bodies that are not JSON', async () => {
    const broken = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: { ...bearer(p.eventsKey), 'content-type': 'application/json' },
      payload: '{"external_id":',
    });
    assert.equal(broken.statusCode, 400);
    assert.equal(problemOf(broken).code, 'invalid_json');
    const text = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/identify',
      headers: { ...bearer(p.eventsKey), 'content-type': 'text/plain' },
      payload: 'external_id=u1',
    });
    assert.equal(text.statusCode, 415);
    assert.equal(problemOf(text).code, 'unsupported_media_type');
  });
});

describe('POST /api/v2/alias', () => {
  let p: Product;
  before(async () => {
    p = await ctx.product('alias');
  });

  it('a never-seen from becomes an alias of to; a missing to is created empty', async () => {
    const res = await alias(p, { from_external_id: 'anon-a1', to_external_id: 'user-a1' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(userOf(res), { external_id: 'user-a1', identifiers: {}, traits: {}, aliases: ['anon-a1'] });
    assert.equal((await lookup(p.id, 'anon-a1')).json().data.id, res.json().data.id);
  });

  it('merges F into T: identifiers united, T wins traits, F fills gaps, F and its aliases move, F stops existing', async () => {
    const f = await identify(p, {
      external_id: 'anon-m',
      identifiers: { device: 'dev-m' },
      traits: { plan: 'free', utm_source: 'ad' },
    });
    await alias(p, { from_external_id: 'older-anon-m', to_external_id: 'anon-m' });
    const t = await identify(p, { external_id: 'user-m', identifiers: { email: 'm@x.io' }, traits: { plan: 'pro' } });
    const res = await alias(p, { from_external_id: 'anon-m', to_external_id: 'user-m' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.json().data.id, t.json().data.id);
    assert.deepEqual(userOf(res), {
      external_id: 'user-m',
      identifiers: { device: 'dev-m', email: 'm@x.io' },
      traits: { plan: 'pro', utm_source: 'ad' },
      aliases: ['anon-m', 'older-anon-m'],
    });
    // F is gone as a separate user: both of its ids resolve to T, and its identifier is T's.
    for (const id of ['anon-m', 'older-anon-m'])
      assert.equal((await lookup(p.id, id)).json().data.id, t.json().data.id);
    assert.notEqual(res.json().data.id, f.json().data.id);
    const claim = await identify(p, { external_id: 'someone-m', identifiers: { device: 'dev-m' } });
    assert.deepEqual(problemOf(claim).conflicts, [{ kind: 'device', value: 'dev-m', external_id: 'user-m' }]);
  });

  it('is idempotent: the same alias again (or reversed) answers 200 with the same user and changes nothing', async () => {
    const first = await alias(p, { from_external_id: 'anon-i', to_external_id: 'user-i' });
    const again = await alias(p, { from_external_id: 'anon-i', to_external_id: 'user-i' });
    const reversed = await alias(p, { from_external_id: 'user-i', to_external_id: 'anon-i' });
    assert.equal(again.statusCode, 200);
    assert.equal(reversed.statusCode, 200);
    assert.deepEqual(again.json(), first.json());
    assert.deepEqual(reversed.json(), first.json());
    assert.equal((await lookup(p.id, 'user-i')).json().data.merges.length, 1);
  });

  it('resolves chains transitively: A→B then B→C makes A, B and C one user, C', async () => {
    await identify(p, { external_id: 'chain-a', traits: { a: 1 } });
    await alias(p, { from_external_id: 'chain-a', to_external_id: 'chain-b' });
    const res = await alias(p, { from_external_id: 'chain-b', to_external_id: 'chain-c' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(userOf(res), {
      external_id: 'chain-c',
      identifiers: {},
      traits: { a: 1 },
      aliases: ['chain-a', 'chain-b'],
    });
    for (const id of ['chain-a', 'chain-b', 'chain-c'])
      assert.equal((await lookup(p.id, id)).json().data.id, res.json().data.id);
  });

  it('409 alias_conflict when from is already merged into another user, with from, merged_into and to', async () => {
    await alias(p, { from_external_id: 'anon-c', to_external_id: 'user-c1' });
    await identify(p, { external_id: 'user-c2' });
    const res = await alias(p, { from_external_id: 'anon-c', to_external_id: 'user-c2' });
    assert.equal(res.statusCode, 409);
    const problem = problemOf(res);
    assert.equal(problem.code, 'alias_conflict');
    assert.equal(problem.from_external_id, 'anon-c');
    assert.equal(problem.merged_into, 'user-c1');
    assert.equal(problem.to_external_id, 'user-c2');
    assert.deepEqual((await lookup(p.id, 'user-c2')).json().data.aliases, []);
    assert.deepEqual((await lookup(p.id, 'anon-c')).json().data.external_id, 'user-c1');
  });

  it('409 identifier_conflict when F and T hold different values of one kind; nothing changes', async () => {
    await identify(p, { external_id: 'f-x', identifiers: { email: 'f@x.io' }, traits: { f: 1 } });
    await identify(p, { external_id: 't-x', identifiers: { email: 't@x.io' }, traits: { t: 1 } });
    const res = await alias(p, { from_external_id: 'f-x', to_external_id: 't-x' });
    assert.equal(res.statusCode, 409);
    const problem = problemOf(res);
    assert.equal(problem.code, 'identifier_conflict');
    assert.deepEqual(problem.conflicts, [
      { kind: 'email', value: 'f@x.io', external_id: 'f-x' },
      { kind: 'email', value: 't@x.io', external_id: 't-x' },
    ]);
    assert.deepEqual((await lookup(p.id, 'f-x')).json().data.external_id, 'f-x');
    assert.deepEqual((await lookup(p.id, 't-x')).json().data.traits, { t: 1 });
  });

  describe('400 validation_error', () => {
    it('requires both ids', async () => {
      expectValidation(await alias(p, { to_external_id: 'x-1' }), '/from_external_id', /required/);
      expectValidation(await alias(p, { from_external_id: 'x-1' }), '/to_external_id', /required/);
    });
    it('refuses equal ids', async () =>
      expectValidation(
        await alias(p, { from_external_id: 'same', to_external_id: 'same' }),
        '/to_external_id',
        /differ/,
      ));
    it('refuses placeholders on either side', async () => {
      expectValidation(
        await alias(p, { from_external_id: 'anonymous', to_external_id: 'user-v' }),
        '/from_external_id',
        /placeholder/,
      );
      expectValidation(
        await alias(p, { from_external_id: 'anon-v', to_external_id: ' NULL' }),
        '/to_external_id',
        /placeholder/,
      );
    });
    it('refuses over-long ids and unknown fields', async () => {
      expectValidation(
        await alias(p, { from_external_id: 'x'.repeat(256), to_external_id: 'user-v' }),
        '/from_external_id',
        /255/,
      );
      expectValidation(
        await alias(p, { from_external_id: 'a-v', to_external_id: 'b-v', previous_id: 'c' }),
        '/previous_id',
        /not a known field/,
      );
    });
  });
});

describe('authentication of identify and alias', () => {
  let p: Product;
  before(async () => {
    p = await ctx.product('auth');
  });

  for (const [name, call] of [
    [
      'identify',
      (key?: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/api/v2/identify',
          ...(key === undefined ? {} : { headers: bearer(key) }),
          payload: { external_id: 'auth-u' },
        }),
    ],
    [
      'alias',
      (key?: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/api/v2/alias',
          ...(key === undefined ? {} : { headers: bearer(key) }),
          payload: { from_external_id: 'auth-a', to_external_id: 'auth-u' },
        }),
    ],
  ] as const) {
    it(`${name}: 401 without a key, with WWW-Authenticate: Bearer`, async () => {
      const res = await call();
      assert.equal(res.statusCode, 401);
      assert.equal(problemOf(res).code, 'unauthorized');
      assert.equal(res.headers['www-authenticate'], 'Bearer');
    });
    it(`${name}: 401 with an unknown key`, async () => {
      const res = await call(`inlet_ev_${'A'.repeat(40)}`);
      assert.equal(res.statusCode, 401);
      assert.equal(problemOf(res).code, 'unauthorized');
    });
    it(`${name}: 403 with a reports key`, async () => {
      const res = await call(p.reportsKey);
      assert.equal(res.statusCode, 403);
      assert.equal(problemOf(res).code, 'forbidden');
    });
  }

  it('a refused request writes nothing', async () => {
    assert.equal((await lookup(p.id, 'auth-u')).statusCode, 404);
  });

  it('401 once the key is revoked', async () => {
    const revocable = await ctx.product('auth-revoked');
    assert.equal((await identify(revocable, { external_id: 'rv-1' })).statusCode, 201);
    const keys = (
      await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${revocable.id}/keys`, headers: adminHeaders() })
    ).json().data as Array<{ id: string; kind: string }>;
    const eventsKey = keys.find((k) => k.kind === 'events')!;
    assert.equal(
      (await ctx.app.inject({ method: 'DELETE', url: `/admin/v1/keys/${eventsKey.id}`, headers: adminHeaders() }))
        .statusCode,
      204,
    );
    assert.equal((await identify(revocable, { external_id: 'rv-1' })).statusCode, 401);
    assert.equal((await alias(revocable, { from_external_id: 'rv-0', to_external_id: 'rv-1' })).statusCode, 401);
  });
});

describe('concurrent requests', () => {
  it('parallel identifies of one new external id: exactly one 201, the rest 200, one user', async () => {
    const p = await ctx.product('parallel');
    const responses = await Promise.all(
      Array.from({ length: 25 }, (_, i) => identify(p, { external_id: 'par-1', traits: { [`t${i}`]: i } })),
    );
    assert.deepEqual(responses.map((r) => r.statusCode).sort(), [...Array(24).fill(200), 201]);
    assert.equal(new Set(responses.map((r) => r.json().data.id)).size, 1);
    assert.equal(Object.keys((await lookup(p.id, 'par-1')).json().data.traits).length, 25);
  });

  it('parallel claims of one email by different users: one 201, the rest 409 naming the winner', async () => {
    const p = await ctx.product('parallel-claims');
    const responses = await Promise.all(
      Array.from({ length: 25 }, (_, i) =>
        identify(p, { external_id: `claim-${i}`, identifiers: { email: 'race@x.io' } }),
      ),
    );
    const winners = responses.filter((r) => r.statusCode === 201);
    assert.equal(winners.length, 1);
    const winner = winners[0]!.json().data.external_id;
    for (const r of responses.filter((r) => r.statusCode !== 201)) {
      assert.equal(r.statusCode, 409);
      assert.deepEqual(problemOf(r).conflicts, [{ kind: 'email', value: 'race@x.io', external_id: winner }]);
    }
  });
});

describe('product isolation', () => {
  it("a product never sees or changes another product's users or identifiers", async () => {
    const a = await ctx.product('iso-a');
    const b = await ctx.product('iso-b');
    const inA = await identify(a, {
      external_id: 'iso-user',
      identifiers: { email: 'iso@x.io' },
      traits: { product: 'a' },
    });
    assert.equal(inA.statusCode, 201);
    // The same external id and the same identifier are a new, separate user in B.
    const inB = await identify(b, {
      external_id: 'iso-user',
      identifiers: { email: 'iso@x.io' },
      traits: { product: 'b' },
    });
    assert.equal(inB.statusCode, 201);
    assert.notEqual(inB.json().data.id, inA.json().data.id);
    // An alias in B does not touch A.
    assert.equal((await alias(b, { from_external_id: 'iso-anon', to_external_id: 'iso-user' })).statusCode, 200);
    assert.deepEqual((await lookup(a.id, 'iso-user')).json().data.aliases, []);
    assert.deepEqual((await lookup(a.id, 'iso-user')).json().data.traits, { product: 'a' });
    assert.equal((await lookup(a.id, 'iso-anon')).statusCode, 404);
  });
});

describe('GET /admin/v1/products/{product_id}/users/{external_id}', () => {
  let p: Product;
  let other: Product;
  before(async () => {
    p = await ctx.product('lookup');
    other = await ctx.product('lookup-other');
  });

  async function sendEvent(
    product: Product,
    subjectType: string,
    subjectId: string,
    occurredAt: string,
    action: string,
  ) {
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events',
      headers: bearer(product.eventsKey),
      payload: {
        event_type: 'page',
        action,
        subject_type: subjectType,
        subject_id: subjectId,
        occurred_at: occurredAt,
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    return res.json().data.uuid as string;
  }

  it('shows the resolved user, aliases, merge history and recent events under every id of the user', async () => {
    await identify(p, { external_id: 'anon/1 x', traits: { utm: 'ad' } });
    await identify(p, { external_id: 'lk-user', identifiers: { email: 'lk@x.io' } });
    await alias(p, { from_external_id: 'anon/1 x', to_external_id: 'lk-user' });
    await alias(p, { from_external_id: 'anon-2', to_external_id: 'lk-user' });
    const e1 = await sendEvent(p, 'user', 'anon/1 x', '2026-10-01T10:00:00Z', 'viewed');
    const e2 = await sendEvent(p, 'user', 'lk-user', '2026-10-02T10:00:00Z', 'signed_up');
    const e3 = await sendEvent(p, 'user', 'anon-2', '2026-10-03T10:00:00Z', 'opened');
    await sendEvent(p, 'account', 'lk-user', '2026-10-04T10:00:00Z', 'created'); // another subject type
    await sendEvent(p, 'user', 'someone-else', '2026-10-04T10:00:00Z', 'viewed');
    await sendEvent(other, 'user', 'lk-user', '2026-10-05T10:00:00Z', 'viewed'); // another product

    for (const id of ['anon/1 x', 'lk-user', 'anon-2']) {
      const res = await lookup(p.id, id);
      assert.equal(res.statusCode, 200, res.body);
      const data = res.json().data;
      assert.equal(data.external_id, 'lk-user');
      assert.deepEqual(data.aliases, ['anon-2', 'anon/1 x']);
      assert.deepEqual(data.identifiers, { email: 'lk@x.io' });
      assert.deepEqual(data.traits, { utm: 'ad' });
      assert.deepEqual(
        data.merges.map((m: Record<string, unknown>) => [
          m.from_external_id,
          m.into_external_id,
          m.into_user_id,
          m.from_user_id === null,
        ]),
        [
          ['anon/1 x', 'lk-user', data.id, false],
          ['anon-2', 'lk-user', data.id, true],
        ],
      );
      assert.deepEqual(
        data.events.map((e: { uuid: string }) => e.uuid),
        [e3, e2, e1],
      );
    }
    const limited = await lookup(p.id, 'lk-user', '?events_limit=1');
    assert.deepEqual(
      limited.json().data.events.map((e: { uuid: string }) => e.uuid),
      [e3],
    );
  });

  it('404 for an unknown user and for an unknown product', async () => {
    const unknownUser = await lookup(p.id, 'nobody');
    assert.equal(unknownUser.statusCode, 404);
    assert.equal(problemOf(unknownUser).code, 'not_found');
    const unknownProduct = await lookup('prd_missing', 'lk-user');
    assert.equal(unknownProduct.statusCode, 404);
    assert.equal(problemOf(unknownProduct).code, 'not_found');
  });

  it('400 for a bad events_limit', async () => {
    assert.equal((await lookup(p.id, 'lk-user', '?events_limit=501')).statusCode, 400);
    assert.equal((await lookup(p.id, 'lk-user', '?events_limit=abc')).statusCode, 400);
  });

  it('401 without the admin token, or with an API key', async () => {
    const none = await ctx.app.inject({ method: 'GET', url: `/admin/v1/products/${p.id}/users/lk-user` });
    assert.equal(none.statusCode, 401);
    assert.equal(problemOf(none).code, 'unauthorized');
    const withKey = await ctx.app.inject({
      method: 'GET',
      url: `/admin/v1/products/${p.id}/users/lk-user`,
      headers: bearer(p.eventsKey),
    });
    assert.equal(withKey.statusCode, 401);
  });
});
