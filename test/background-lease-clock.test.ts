// The leases that keep background work to one instance (retention's named leases, erasure jobs) are taken for a
// span of the database's clock and judged by it (storage/database-clock.ts), like the destinations' leases
// (test/destination-lease-clock.test.ts): no instance's own clock takes part, so one whose clock is off can
// neither take over a live lease nor hold on to a dead one.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createTestServices, dialect, testDatabase, type TestDatabase } from './helpers.js';
import type { Services } from '../src/services.js';

const LEASE_MS = 2000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe(`background leases on the database's clock (${dialect})`, () => {
  let database: TestDatabase;
  let services: Services;

  before(async () => {
    database = testDatabase();
    ({ services } = await createTestServices({}, database));
  });
  after(async () => {
    await services?.close();
    await database?.drop();
  });

  it('a live lease is kept from another holder; one that ran out is taken over, ending on the database clock', async () => {
    const store = services.storage.erasure;
    assert.equal(await store.takeLease('clock-test', 'a', LEASE_MS), true);
    assert.equal(await store.takeLease('clock-test', 'b', LEASE_MS), false, 'live: a holds it');
    assert.equal(await store.takeLease('clock-test', 'a', LEASE_MS), true, 'its holder renews it');
    await sleep(LEASE_MS + 100);
    assert.equal(await store.takeLease('clock-test', 'b', LEASE_MS), true, 'ran out: b takes it over');
    assert.equal(await store.takeLease('clock-test', 'a', LEASE_MS), false);
    await sleep(LEASE_MS / 2);
    assert.equal(await store.takeLease('clock-test', 'a', LEASE_MS), false, "half of b's lease is left");
    await sleep(LEASE_MS / 2 + 100);
    assert.equal(
      await store.takeLease('clock-test', 'a', LEASE_MS),
      true,
      "b's lease ran out, a span after it took it",
    );
  });
});
