// The identity store against real SQLite and PostgreSQL: every rule of contract §6 that storage
// decides, the database constraints behind them, and concurrent requests.
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import type { IdentityTables } from '../src/storage/identity-store.js';
import type { IdentityStore } from '../src/storage/types.js';
import {
  assertIdentityInvariants,
  createProduct,
  dialect,
  expectStatus,
  openTestStorage,
  type TestStorage,
} from './identity-support.js';

const T0 = '2026-11-01T10:00:00.000Z';
const T1 = '2026-11-01T11:00:00.000Z';
const T2 = '2026-11-01T12:00:00.000Z';

describe(`identity store on ${dialect}`, () => {
  let test: TestStorage;
  let identity: IdentityStore;
  /** A fresh product per test keeps the tests independent inside one database. */
  let product: () => Promise<string>;

  before(async () => {
    test = await openTestStorage();
    identity = test.storage.identity;
    product = () => createProduct(test.storage);
  });
  after(() => test.drop());

  describe('identify', () => {
    it('creates a user with normalized identifiers and traits', async () => {
      const p = await product();
      const outcome = await identity.identify(
        p,
        { externalId: 'u1', identifiers: { email: 'ada@x.io', crm: 'C-1' }, traits: { plan: 'pro', seats: 3 } },
        T0,
      );
      expectStatus(outcome, 'created');
      assert.match(outcome.user.id, /^usr_[0-9A-Za-z]{20}$/);
      assert.deepEqual(
        { ...outcome.user, id: undefined },
        {
          id: undefined,
          externalId: 'u1',
          identifiers: { crm: 'C-1', email: 'ada@x.io' },
          traits: { plan: 'pro', seats: 3 },
          aliases: [],
          createdAt: T0,
          updatedAt: T0,
        },
      );
      await assertIdentityInvariants(test.storage, p);
    });

    it('updates: traits shallow-merged with null removing, identifiers replaced per kind or removed by null', async () => {
      const p = await product();
      const created = await identity.identify(
        p,
        {
          externalId: 'u1',
          identifiers: { email: 'a@x', crm: '1' },
          traits: { plan: 'free', name: 'Ada', nested: { a: 1 } },
        },
        T0,
      );
      expectStatus(created, 'created');
      const updated = await identity.identify(
        p,
        {
          externalId: 'u1',
          identifiers: { email: 'b@x', crm: null, stripe: 's1' },
          traits: { plan: 'pro', name: null, nested: { b: 2 } },
        },
        T1,
      );
      expectStatus(updated, 'updated');
      assert.equal(updated.user.id, created.user.id);
      assert.deepEqual(updated.user.identifiers, { email: 'b@x', stripe: 's1' });
      assert.deepEqual(updated.user.traits, { plan: 'pro', nested: { b: 2 } });
      assert.equal(updated.user.createdAt, T0);
      assert.equal(updated.user.updatedAt, T1);
      // The released identifiers are free for another user now.
      expectStatus(
        await identity.identify(p, { externalId: 'u2', identifiers: { email: 'a@x', crm: '1' }, traits: {} }, T1),
        'created',
      );
      await assertIdentityInvariants(test.storage, p);
    });

    it('answers updated without moving updated_at when nothing changes', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'u1', identifiers: { email: 'a@x' }, traits: { plan: 'pro' } }, T0);
      const again = await identity.identify(
        p,
        { externalId: 'u1', identifiers: { email: 'a@x', crm: null }, traits: { plan: 'pro', gone: null } },
        T1,
      );
      expectStatus(again, 'updated');
      assert.equal(again.user.updatedAt, T0);
    });

    it('refuses an identifier held by another user with the holder, and changes nothing', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'holder', identifiers: { email: 'a@x', crm: '7' }, traits: {} }, T0);
      await identity.identify(p, { externalId: 'u2', identifiers: {}, traits: { plan: 'free' } }, T0);
      const conflict = await identity.identify(
        p,
        { externalId: 'u2', identifiers: { email: 'a@x', crm: '7', phone: '1' }, traits: { plan: 'pro' } },
        T1,
      );
      expectStatus(conflict, 'identifier_conflict');
      assert.deepEqual(conflict.conflicts, [
        { kind: 'crm', value: '7', externalId: 'holder' },
        { kind: 'email', value: 'a@x', externalId: 'holder' },
      ]);
      const u2 = await identity.getUser(p, 'u2');
      assert.deepEqual(u2?.user.traits, { plan: 'free' });
      assert.deepEqual(u2?.user.identifiers, {});
      assert.equal(u2?.user.updatedAt, T0);
      // A new user whose identify conflicts is not created either.
      expectStatus(
        await identity.identify(p, { externalId: 'u3', identifiers: { email: 'a@x' }, traits: {} }, T1),
        'identifier_conflict',
      );
      assert.equal(await identity.getUser(p, 'u3'), undefined);
    });

    it('a kind named like an Object.prototype member (constructor) is stored, replaced, removed and merged like any other', async () => {
      const p = await product();
      const created = await identity.identify(
        p,
        { externalId: 'u1', identifiers: { constructor: 'c1' }, traits: {} },
        T0,
      );
      expectStatus(created, 'created');
      assert.deepEqual(created.user.identifiers, { constructor: 'c1' });
      const replaced = await identity.identify(
        p,
        { externalId: 'u1', identifiers: { constructor: 'c2' }, traits: {} },
        T1,
      );
      expectStatus(replaced, 'updated');
      assert.deepEqual(replaced.user.identifiers, { constructor: 'c2' });
      expectStatus(
        await identity.identify(p, { externalId: 'u2', identifiers: { constructor: 'c9' }, traits: {} }, T1),
        'created',
      );
      const removed = await identity.identify(
        p,
        { externalId: 'u2', identifiers: { constructor: null }, traits: {} },
        T1,
      );
      expectStatus(removed, 'updated');
      assert.deepEqual(removed.user.identifiers, {});
      const merged = await identity.alias(p, 'u1', 'u2', T2);
      expectStatus(merged, 'merged');
      assert.deepEqual(merged.user.identifiers, { constructor: 'c2' });
      await assertIdentityInvariants(test.storage, p);
    });

    it('re-sending identifiers the user already holds is no conflict', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'u1', identifiers: { email: 'a@x' }, traits: {} }, T0);
      expectStatus(
        await identity.identify(p, { externalId: 'u1', identifiers: { email: 'a@x' }, traits: {} }, T1),
        'updated',
      );
    });

    it('resolves an external id merged away by alias to the user it was merged into', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'anon-1', identifiers: {}, traits: { first_seen: 'ad' } }, T0);
      await identity.identify(p, { externalId: 'u1', identifiers: {}, traits: {} }, T0);
      expectStatus(await identity.alias(p, 'anon-1', 'u1', T1), 'merged');
      const viaAlias = await identity.identify(
        p,
        { externalId: 'anon-1', identifiers: {}, traits: { plan: 'pro' } },
        T2,
      );
      expectStatus(viaAlias, 'updated');
      assert.equal(viaAlias.user.externalId, 'u1');
      assert.deepEqual(viaAlias.user.traits, { first_seen: 'ad', plan: 'pro' });
      assert.deepEqual(viaAlias.user.aliases, ['anon-1']);
      await assertIdentityInvariants(test.storage, p);
    });

    it('keeps products apart: same external id and same identifier in two products are two users', async () => {
      const p1 = await product();
      const p2 = await product();
      const a = await identity.identify(p1, { externalId: 'u1', identifiers: { email: 'a@x' }, traits: { p: 1 } }, T0);
      const b = await identity.identify(p2, { externalId: 'u1', identifiers: { email: 'a@x' }, traits: { p: 2 } }, T0);
      expectStatus(a, 'created');
      expectStatus(b, 'created');
      assert.notEqual(a.user.id, b.user.id);
      expectStatus(await identity.identify(p2, { externalId: 'u2', identifiers: {}, traits: {} }, T0), 'created');
      expectStatus(await identity.alias(p1, 'u2', 'u1', T1), 'merged');
      assert.deepEqual((await identity.getUser(p2, 'u1'))?.user.aliases, []);
      assert.deepEqual((await identity.getUser(p2, 'u1'))?.user.traits, { p: 2 });
      assert.equal((await identity.getUser(p2, 'u2'))?.user.externalId, 'u2');
    });
  });

  describe('alias', () => {
    it('makes a never-seen from an alias of to, creating to empty if missing, and records it', async () => {
      const p = await product();
      const merged = await identity.alias(p, 'anon-1', 'u1', T0);
      expectStatus(merged, 'merged');
      assert.equal(merged.user.externalId, 'u1');
      assert.deepEqual(merged.user.aliases, ['anon-1']);
      assert.deepEqual(merged.user.identifiers, {});
      assert.deepEqual(merged.user.traits, {});
      const resolved = await identity.getUser(p, 'anon-1');
      assert.equal(resolved?.user.id, merged.user.id);
      assert.deepEqual(resolved?.merges, [
        { fromExternalId: 'anon-1', fromUserId: null, intoUserId: merged.user.id, intoExternalId: 'u1', mergedAt: T0 },
      ]);
      await assertIdentityInvariants(test.storage, p);
    });

    it('merges F into T: identifiers united, T wins traits, F fills gaps, F and its aliases move, F stops existing', async () => {
      const p = await product();
      const f = await identity.identify(
        p,
        { externalId: 'anon-1', identifiers: { device: 'd1' }, traits: { plan: 'free', utm: 'ad' } },
        T0,
      );
      expectStatus(f, 'created');
      expectStatus(await identity.alias(p, 'anon-0', 'anon-1', T0), 'merged');
      const t = await identity.identify(
        p,
        { externalId: 'u1', identifiers: { email: 'a@x' }, traits: { plan: 'pro' } },
        T0,
      );
      expectStatus(t, 'created');
      const merged = await identity.alias(p, 'anon-1', 'u1', T1);
      expectStatus(merged, 'merged');
      assert.equal(merged.user.id, t.user.id);
      assert.deepEqual(merged.user.identifiers, { device: 'd1', email: 'a@x' });
      assert.deepEqual(merged.user.traits, { plan: 'pro', utm: 'ad' });
      assert.deepEqual(merged.user.aliases, ['anon-0', 'anon-1']);
      assert.equal(merged.user.updatedAt, T1);
      const db = test.storage.db.withTables<IdentityTables>();
      assert.equal(
        (await db.selectFrom('users').select('id').where('product_id', '=', p).where('id', '=', f.user.id).execute())
          .length,
        0,
      );
      const resolved = await identity.getUser(p, 'anon-0');
      assert.equal(resolved?.user.id, t.user.id);
      assert.deepEqual(
        resolved?.merges.map((m) => [m.fromExternalId, m.fromUserId, m.intoUserId, m.intoExternalId, m.mergedAt]),
        [
          ['anon-0', null, f.user.id, 'anon-1', T0],
          ['anon-1', f.user.id, t.user.id, 'u1', T1],
        ],
      );
      // F's identifier is T's now: claiming it for someone else conflicts with T.
      const claim = await identity.identify(p, { externalId: 'u9', identifiers: { device: 'd1' }, traits: {} }, T2);
      expectStatus(claim, 'identifier_conflict');
      assert.deepEqual(claim.conflicts, [{ kind: 'device', value: 'd1', externalId: 'u1' }]);
      await assertIdentityInvariants(test.storage, p);
    });

    it('creates a missing to when merging an existing from', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'anon-1', identifiers: { device: 'd1' }, traits: { a: 1 } }, T0);
      const merged = await identity.alias(p, 'anon-1', 'u1', T1);
      expectStatus(merged, 'merged');
      assert.equal(merged.user.externalId, 'u1');
      assert.equal(merged.user.createdAt, T1);
      assert.deepEqual(merged.user.identifiers, { device: 'd1' });
      assert.deepEqual(merged.user.traits, { a: 1 });
      await assertIdentityInvariants(test.storage, p);
    });

    it('is idempotent: the same alias again, or from and to already one user, changes nothing', async () => {
      const p = await product();
      const first = await identity.alias(p, 'anon-1', 'u1', T0);
      expectStatus(first, 'merged');
      const again = await identity.alias(p, 'anon-1', 'u1', T1);
      expectStatus(again, 'unchanged');
      assert.deepEqual(again.user, first.user);
      const reverse = await identity.alias(p, 'u1', 'anon-1', T1);
      expectStatus(reverse, 'unchanged');
      assert.deepEqual(reverse.user, first.user);
      assert.equal((await identity.getUser(p, 'u1'))?.merges.length, 1);
    });

    it('refuses to move a from already merged into another user (alias_conflict)', async () => {
      const p = await product();
      await identity.alias(p, 'anon-1', 'u1', T0);
      await identity.identify(p, { externalId: 'u2', identifiers: {}, traits: {} }, T0);
      const conflict = await identity.alias(p, 'anon-1', 'u2', T1);
      assert.deepEqual(conflict, { status: 'alias_conflict', mergedInto: 'u1' });
      // Nothing changed, and a missing to was not created.
      expectStatus(await identity.alias(p, 'anon-1', 'u3', T1), 'alias_conflict');
      assert.equal(await identity.getUser(p, 'u3'), undefined);
      assert.deepEqual((await identity.getUser(p, 'u1'))?.user.aliases, ['anon-1']);
      assert.deepEqual((await identity.getUser(p, 'u2'))?.user.aliases, []);
    });

    it('refuses a merge where F and T hold different values of one kind, and changes nothing', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'f', identifiers: { email: 'f@x', crm: '1' }, traits: { a: 1 } }, T0);
      await identity.identify(p, { externalId: 't', identifiers: { email: 't@x', crm: '1x' }, traits: { b: 2 } }, T0);
      const conflict = await identity.alias(p, 'f', 't', T1);
      expectStatus(conflict, 'identifier_conflict');
      assert.deepEqual(conflict.conflicts, [
        { kind: 'crm', value: '1', externalId: 'f' },
        { kind: 'crm', value: '1x', externalId: 't' },
        { kind: 'email', value: 'f@x', externalId: 'f' },
        { kind: 'email', value: 't@x', externalId: 't' },
      ]);
      const f = await identity.getUser(p, 'f');
      const t = await identity.getUser(p, 't');
      assert.equal(f?.user.externalId, 'f');
      assert.deepEqual(f?.user.identifiers, { crm: '1', email: 'f@x' });
      assert.deepEqual(t?.user.traits, { b: 2 });
      assert.equal(t?.user.updatedAt, T0);
      assert.deepEqual(t?.merges, []);
    });

    it('resolves chains transitively: A→B then B→C makes A, B and C one user, C', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'A', identifiers: { a: '1' }, traits: {} }, T0);
      await identity.identify(p, { externalId: 'C', identifiers: { c: '1' }, traits: {} }, T0);
      expectStatus(await identity.alias(p, 'A', 'B', T1), 'merged');
      const final = await identity.alias(p, 'B', 'C', T2);
      expectStatus(final, 'merged');
      assert.equal(final.user.externalId, 'C');
      assert.deepEqual(final.user.aliases, ['A', 'B']);
      assert.deepEqual(final.user.identifiers, { a: '1', c: '1' });
      for (const externalId of ['A', 'B', 'C'])
        assert.equal((await identity.getUser(p, externalId))?.user.id, final.user.id);
      assert.deepEqual(
        (await identity.getUser(p, 'A'))?.merges.map((m) => [m.fromExternalId, m.intoExternalId]),
        [
          ['A', 'B'],
          ['B', 'C'],
        ],
      );
      // A is merged into C now; aliasing it to C again is a no-op.
      expectStatus(await identity.alias(p, 'A', 'C', T2), 'unchanged');
      await assertIdentityInvariants(test.storage, p);
    });
  });

  it('getUser answers undefined for an unknown external id', async () => {
    const p = await product();
    assert.equal(await identity.getUser(p, 'nobody'), undefined);
  });

  describe('database constraints (the guarantee that does not depend on locking)', () => {
    it('refuse a second holder of an identifier, a second value of a kind, and a second mapping of an external id', async () => {
      const p = await product();
      const a = await identity.identify(p, { externalId: 'a', identifiers: { email: 'a@x' }, traits: {} }, T0);
      const b = await identity.identify(p, { externalId: 'b', identifiers: {}, traits: {} }, T0);
      expectStatus(a, 'created');
      expectStatus(b, 'created');
      const db = test.storage.db.withTables<IdentityTables>();
      await assert.rejects(
        db
          .insertInto('user_identifiers')
          .values({ product_id: p, kind: 'email', value: 'a@x', user_id: b.user.id })
          .execute(),
      );
      await assert.rejects(
        db
          .insertInto('user_identifiers')
          .values({ product_id: p, kind: 'email', value: 'other@x', user_id: a.user.id })
          .execute(),
      );
      await assert.rejects(
        db.insertInto('user_ids').values({ product_id: p, external_id: 'a', user_id: b.user.id }).execute(),
      );
      await assert.rejects(
        db.insertInto('user_ids').values({ product_id: p, external_id: 'ghost', user_id: 'usr_missing' }).execute(),
      );
      await assertIdentityInvariants(test.storage, p);
    });
  });

  describe('concurrency', () => {
    it('many parallel identifies of one new external id make one user and lose no trait', async () => {
      const p = await product();
      const outcomes = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          identity.identify(p, { externalId: 'new-user', identifiers: {}, traits: { [`t${i}`]: i } }, T0),
        ),
      );
      assert.equal(outcomes.filter((o) => o.status === 'created').length, 1);
      assert.equal(outcomes.filter((o) => o.status === 'updated').length, 39);
      const ids = new Set(outcomes.map((o) => (o.status === 'identifier_conflict' ? undefined : o.user.id)));
      assert.equal(ids.size, 1);
      const user = await identity.getUser(p, 'new-user');
      assert.deepEqual(user?.user.traits, Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`t${i}`, i])));
      const mapping = await assertIdentityInvariants(test.storage, p);
      assert.equal(mapping.size, 1);
    });

    it('parallel claims of one email by different users: exactly one wins, the rest conflict with it', async () => {
      const p = await product();
      const outcomes = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          identity.identify(p, { externalId: `claimant-${i}`, identifiers: { email: 'shared@x' }, traits: {} }, T0),
        ),
      );
      const winners = outcomes.flatMap((o) => (o.status === 'created' ? [o.user.externalId] : []));
      assert.equal(winners.length, 1);
      for (const o of outcomes) {
        if (o.status === 'created') continue;
        expectStatus(o, 'identifier_conflict');
        assert.deepEqual(o.conflicts, [{ kind: 'email', value: 'shared@x', externalId: winners[0] }]);
      }
      await assertIdentityInvariants(test.storage, p);
    });

    it('parallel claims by existing users: exactly one holder, the losers unchanged', async () => {
      const p = await product();
      for (let i = 0; i < 20; i++)
        await identity.identify(p, { externalId: `u${i}`, identifiers: {}, traits: { i } }, T0);
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          identity.identify(
            p,
            { externalId: `u${i}`, identifiers: { email: 'Shared@X'.toLowerCase() }, traits: { claimed: true } },
            T1,
          ),
        ),
      );
      assert.equal(outcomes.filter((o) => o.status === 'updated').length, 1);
      assert.equal(outcomes.filter((o) => o.status === 'identifier_conflict').length, 19);
      for (let i = 0; i < 20; i++) {
        const user = await identity.getUser(p, `u${i}`);
        const won = outcomes[i]!.status === 'updated';
        assert.deepEqual(user?.user.traits, won ? { i, claimed: true } : { i });
      }
      await assertIdentityInvariants(test.storage, p);
    });

    it('parallel trait updates through the canonical id and aliases of one user lose nothing', async () => {
      const p = await product();
      await identity.identify(p, { externalId: 'u1', identifiers: {}, traits: {} }, T0);
      for (const alias of ['a1', 'a2', 'a3']) await identity.alias(p, alias, 'u1', T0);
      const via = ['u1', 'a1', 'a2', 'a3'];
      await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          identity.identify(p, { externalId: via[i % via.length]!, identifiers: {}, traits: { [`k${i}`]: i } }, T1),
        ),
      );
      const user = await identity.getUser(p, 'u1');
      assert.deepEqual(user?.user.traits, Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, i])));
    });

    it('alias racing identify: no dangling alias, no split identity, no lost trait', async () => {
      for (let round = 0; round < 8; round++) {
        const p = await product();
        await identity.identify(p, { externalId: 'anon', identifiers: { device: 'd' }, traits: { seen: true } }, T0);
        const results = await Promise.all([
          identity.identify(p, { externalId: 'anon', identifiers: {}, traits: { r1: 1 } }, T1),
          identity.alias(p, 'anon', 'user', T1),
          identity.identify(p, { externalId: 'user', identifiers: { email: 'u@x' }, traits: { r2: 2 } }, T1),
          identity.identify(p, { externalId: 'anon', identifiers: {}, traits: { r3: 3 } }, T1),
          identity.alias(p, 'other', 'anon', T1),
        ]);
        for (const r of results) expectStatus(r, 'created', 'updated', 'merged', 'unchanged');
        const mapping = await assertIdentityInvariants(test.storage, p);
        const userId = mapping.get('user');
        assert.ok(userId);
        for (const externalId of ['anon', 'other'])
          assert.equal(mapping.get(externalId), userId, `${externalId} split from user`);
        const user = await identity.getUser(p, 'other');
        assert.equal(user?.user.externalId, 'user');
        assert.deepEqual(user?.user.identifiers, { device: 'd', email: 'u@x' });
        for (const key of ['seen', 'r1', 'r2', 'r3'])
          assert.ok(key in (user?.user.traits ?? {}), `trait ${key} lost in round ${round}`);
      }
    });

    it('crossing alias chains (A→B with B→C, X→Y with Y→X) end as one user each', async () => {
      for (let round = 0; round < 8; round++) {
        const p = await product();
        const results = await Promise.all([
          identity.alias(p, 'A', 'B', T0),
          identity.alias(p, 'B', 'C', T0),
          identity.alias(p, 'X', 'Y', T0),
          identity.alias(p, 'Y', 'X', T0),
        ]);
        for (const r of results) expectStatus(r, 'merged', 'unchanged');
        const mapping = await assertIdentityInvariants(test.storage, p);
        assert.equal(mapping.get('A'), mapping.get('C'));
        assert.equal(mapping.get('B'), mapping.get('C'));
        assert.equal(mapping.get('X'), mapping.get('Y'));
        assert.notEqual(mapping.get('A'), mapping.get('X'));
        assert.equal((await identity.getUser(p, 'A'))?.user.externalId, 'C');
      }
    });
  });
});
