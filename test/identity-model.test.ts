// Random identify/alias sequences through the HTTP API, checked step by step against a small
// reference model of contract §6, then against the admin lookup of every external id used:
// every external id resolves to exactly one user, no identifier is held twice, nothing is lost
// except by an explicit null, and alias is idempotent.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { adminHeaders, bearer, createTestApp, type TestContext } from './helpers.js';

interface ModelUser {
  /** The id the server gave the user when it created it. */
  serverId?: string;
  externalId: string;
  identifiers: Record<string, string>;
  traits: Record<string, unknown>;
  aliases: Set<string>;
}

type Expected = { status: number; user?: ModelUser; body?: Record<string, unknown> };

/** Contract §6, as plainly as it can be written. */
class Model {
  readonly resolve = new Map<string, ModelUser>();

  private holder(kind: string, value: string): ModelUser | undefined {
    for (const user of new Set(this.resolve.values())) if (user.identifiers[kind] === value) return user;
    return undefined;
  }

  identify(externalId: string, identifiers: Record<string, string | null>, traits: Record<string, unknown>): Expected {
    const normalized = Object.fromEntries(
      Object.entries(identifiers).map(([k, v]) => [k, v === null ? null : k === 'email' ? v.trim().toLowerCase() : v]),
    );
    const user = this.resolve.get(externalId);
    const conflicts = Object.entries(normalized)
      .filter((entry): entry is [string, string] => entry[1] !== null)
      .flatMap(([kind, value]) => {
        const holder = this.holder(kind, value);
        return holder !== undefined && holder !== user ? [{ kind, value, external_id: holder.externalId }] : [];
      })
      .sort((a, b) => (a.kind < b.kind ? -1 : 1));
    if (conflicts.length > 0) return { status: 409, body: { code: 'identifier_conflict', conflicts } };
    const target = user ?? { externalId, identifiers: {}, traits: {}, aliases: new Set<string>() };
    for (const [kind, value] of Object.entries(normalized)) {
      if (value === null) delete target.identifiers[kind];
      else target.identifiers[kind] = value;
    }
    for (const [key, value] of Object.entries(traits)) {
      if (value === null) delete target.traits[key];
      else target.traits[key] = value;
    }
    if (user === undefined) this.resolve.set(externalId, target);
    return { status: user === undefined ? 201 : 200, user: target };
  }

  alias(from: string, to: string): Expected {
    if (from === to) return { status: 400, body: { code: 'validation_error' } };
    const f = this.resolve.get(from);
    const t = this.resolve.get(to);
    if (f !== undefined && f === t) return { status: 200, user: t };
    if (f !== undefined && f.externalId !== from) {
      return {
        status: 409,
        body: { code: 'alias_conflict', from_external_id: from, merged_into: f.externalId, to_external_id: to },
      };
    }
    if (f !== undefined && t !== undefined) {
      const conflicts = Object.keys(f.identifiers)
        .sort()
        .filter((kind) => t.identifiers[kind] !== undefined && t.identifiers[kind] !== f.identifiers[kind])
        .flatMap((kind) => [
          { kind, value: f.identifiers[kind], external_id: f.externalId },
          { kind, value: t.identifiers[kind], external_id: t.externalId },
        ]);
      if (conflicts.length > 0) return { status: 409, body: { code: 'identifier_conflict', conflicts } };
    }
    const target = t ?? { externalId: to, identifiers: {}, traits: {}, aliases: new Set<string>() };
    this.resolve.set(to, target);
    target.aliases.add(from);
    this.resolve.set(from, target);
    if (f !== undefined) {
      target.identifiers = { ...f.identifiers, ...target.identifiers };
      target.traits = { ...f.traits, ...target.traits };
      for (const a of f.aliases) {
        target.aliases.add(a);
        this.resolve.set(a, target);
      }
    }
    return { status: 200, user: target };
  }
}

const externalIds = ['ann', 'bob', 'cat', 'dan', 'eve'];
const identifyCommand = fc.record({
  op: fc.constant('identify' as const),
  externalId: fc.constantFrom(...externalIds),
  identifiers: fc.dictionary(
    fc.constantFrom('email', 'crm'),
    fc.constantFrom<string | null>('a@x.io', ' A@X.IO', 'b@x.io', 'c1', 'C1', null),
    { maxKeys: 2 },
  ),
  traits: fc.dictionary(
    fc.constantFrom('plan', 'seats', 'beta'),
    fc.constantFrom<unknown>('free', 'pro', 1, 2, true, null),
    { maxKeys: 3 },
  ),
});
const aliasCommand = fc.record({
  op: fc.constant('alias' as const),
  from: fc.constantFrom(...externalIds),
  to: fc.constantFrom(...externalIds),
});
const commands = fc.array(fc.oneof(identifyCommand, identifyCommand, aliasCommand), { minLength: 1, maxLength: 25 });

// Sequences per run: 25 in `npm test` (the 90 s tier); test/system/identity-model-long.test.ts runs 300 on
// each backend in the system tier. INLET_MODEL_RUNS=<n> overrides.
const modelRuns = Number(process.env.INLET_MODEL_RUNS ?? 25);

let ctx: TestContext;
before(async () => {
  ctx = await createTestApp();
});
after(() => ctx.close());

function sortedUser(user: ModelUser) {
  return {
    external_id: user.externalId,
    identifiers: user.identifiers,
    traits: user.traits,
    aliases: [...user.aliases].sort(),
  };
}

describe('identity against a reference model of the contract', () => {
  it('random identify/alias sequences answer and end exactly as the model says', async () => {
    await fc.assert(
      fc.asyncProperty(commands, async (steps) => {
        const product = await ctx.product('model');
        const model = new Model();
        for (const step of steps) {
          const response =
            step.op === 'identify'
              ? await ctx.app.inject({
                  method: 'POST',
                  url: '/api/v2/identify',
                  headers: bearer(product.eventsKey),
                  payload: { external_id: step.externalId, identifiers: step.identifiers, traits: step.traits },
                })
              : await ctx.app.inject({
                  method: 'POST',
                  url: '/api/v2/alias',
                  headers: bearer(product.eventsKey),
                  payload: { from_external_id: step.from, to_external_id: step.to },
                });
          const expected =
            step.op === 'identify'
              ? model.identify(step.externalId, step.identifiers, step.traits)
              : model.alias(step.from, step.to);
          const body = response.json();
          assert.equal(response.statusCode, expected.status, `${JSON.stringify(step)} → ${response.body}`);
          if (expected.user !== undefined) {
            const { id, created_at: _c, updated_at: _u, ...rest } = body.data;
            assert.deepEqual(rest, sortedUser(expected.user), JSON.stringify(step));
            // The user keeps its id for life; a merged-away user's id never comes back.
            expected.user.serverId ??= id;
            assert.equal(id, expected.user.serverId);
          } else {
            for (const [key, value] of Object.entries(expected.body ?? {}))
              assert.deepEqual(body[key], value, `${key} of ${JSON.stringify(step)} → ${response.body}`);
          }
          if (step.op === 'alias' && response.statusCode === 200) {
            // Idempotent: the same alias again answers the same user and changes nothing.
            const again = await ctx.app.inject({
              method: 'POST',
              url: '/api/v2/alias',
              headers: bearer(product.eventsKey),
              payload: { from_external_id: step.from, to_external_id: step.to },
            });
            assert.equal(again.statusCode, 200);
            assert.deepEqual(again.json(), body);
          }
        }
        // Every external id resolves to exactly the model's user; distinct model users are distinct
        // server users; no identifier has two holders.
        const holders = new Map<string, string>();
        const idsByModelUser = new Map<ModelUser, string>();
        for (const externalId of externalIds) {
          const res = await ctx.app.inject({
            method: 'GET',
            url: `/admin/v1/products/${product.id}/users/${externalId}`,
            headers: adminHeaders(),
          });
          const user = model.resolve.get(externalId);
          if (user === undefined) {
            assert.equal(res.statusCode, 404, `${externalId} should be unknown: ${res.body}`);
            continue;
          }
          assert.equal(res.statusCode, 200, res.body);
          const data = res.json().data;
          assert.deepEqual(
            {
              external_id: data.external_id,
              identifiers: data.identifiers,
              traits: data.traits,
              aliases: data.aliases,
            },
            sortedUser(user),
          );
          assert.equal(data.id, user.serverId);
          for (const [kind, value] of Object.entries(data.identifiers as Record<string, string>)) {
            const holder = holders.get(`${kind}=${value}`);
            assert.ok(holder === undefined || holder === data.id, `${kind}=${value} held by ${holder} and ${data.id}`);
            holders.set(`${kind}=${value}`, data.id);
          }
          const seen = idsByModelUser.get(user);
          assert.ok(seen === undefined || seen === data.id);
          idsByModelUser.set(user, data.id);
        }
        assert.equal(new Set(idsByModelUser.values()).size, idsByModelUser.size);
      }),
      { numRuns: modelRuns },
    );
  });
});
