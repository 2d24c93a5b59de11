// Destination leases are judged on the database's clock (events-out §6; storage/destinations/rows.ts): an
// instance whose own clock runs ahead must not take over a lease another instance holds and renews, and one
// whose clock lags must still take over a lease that has run out, and keep its own. Two runners on one store
// stand for two instances with skewed clocks.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { createDeliveryRunner } from '../src/services/destinations/runner.js';
import { dialect, storedWebhookDestination, testDatabase, type TestDatabase } from './helpers.js';

const HOUR = 3_600_000;
const LEASE_MS = 1000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe(`destination leases on the database's clock (${dialect})`, () => {
  let database: TestDatabase;
  let storage: OpenedStorage;
  let id: string;

  before(async () => {
    database = testDatabase();
    ({ id } = await storedWebhookDestination(database, 'lease-clock'));
    storage = await openStorage(database.databaseUrl, {
      ...(database.postgresSchema === undefined ? {} : { postgresSchema: database.postgresSchema }),
      migrate: false,
      destinationLeaseMs: LEASE_MS,
    });
  });
  after(async () => {
    await storage?.close();
    await database?.drop();
  });

  /** An instance: a runner whose clock is `skewMs` off, its delivery loops doing nothing. */
  function instance(holder: string, skewMs: number) {
    const run = { stopped: false, abort: new AbortController(), shared: new Set<string>(), clockOffset: 0 };
    const runner = createDeliveryRunner({
      store: storage.destinations,
      run,
      loop: async () => {},
      drivers: [],
      holder,
      now: () => Date.now() + skewMs,
      pollMs: 100,
      leaseMs: LEASE_MS,
      logRetentionMs: 24 * HOUR,
    });
    return { runner, run };
  }
  const holderNow = async () => (await storage.destinations.getById(id))!.leaseHolder;

  it('an instance whose clock runs an hour ahead does not take over a live lease', async () => {
    const a = instance('a', 0);
    const ahead = instance('ahead', HOUR);
    await a.runner.tick();
    assert.equal(await holderNow(), 'a');
    await ahead.runner.tick();
    assert.equal(await holderNow(), 'a', 'the lease is still live on the database clock');
    assert.ok(Math.abs(ahead.run.clockOffset + HOUR) < 60_000, `offset ${ahead.run.clockOffset} ms`);
  });

  it('an instance whose clock lags an hour keeps its lease, and takes over one that ran out', async () => {
    const behind = instance('behind', -HOUR);
    await sleep(LEASE_MS + 100); // a's lease runs out: nobody renewed it
    await behind.runner.tick();
    assert.equal(await holderNow(), 'behind', 'taken over once the lease ran out on the database clock');
    const until = (await storage.destinations.getById(id))!.leaseUntil;
    assert.ok(Math.abs(until - LEASE_MS - Date.now()) < 60_000, 'the lease ends on the database clock');
    await sleep(LEASE_MS / 2);
    await behind.runner.tick(); // renewed: its end is less than two thirds of a lease away by the database's clock
    assert.ok((await storage.destinations.getById(id))!.leaseUntil > until, 'renewed');
    const ahead = instance('ahead', HOUR);
    await ahead.runner.tick();
    assert.equal(await holderNow(), 'behind');
  });
});
