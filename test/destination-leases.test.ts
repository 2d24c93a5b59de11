// Destination leases between two instances on one PostgreSQL schema (events-out §6; docs/destinations.md, "Several
// instances"): two storages opened on the same schema stand for two instances. A holder stopped inside its state
// write's transaction (its COMMIT held back at the driver, as SIGSTOP would) keeps the destination's row locked;
// the other instance must still take the lease over within a bound, and the stopped holder, once resumed, must
// commit nothing. A lease pass that meets a locked row waits only briefly.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { openStorage, type OpenedStorage } from '../src/storage/connect.js';
import { dialect, postgresUrl, storedWebhookDestination, testDatabase, type TestDatabase } from './helpers.js';

const LEASE_MS = 1000;
/** The two instances' lease holder names, unique to this run (the driver's wrapper picks its statements by them). */
const tag = Math.random().toString(36).slice(2, 8);
const A = `a-${tag}`;
const B = `b-${tag}`;
const postgresOnly = dialect !== 'postgres' && 'PostgreSQL only: SQLite serves one process (docs/scaling-out.md)';

/**
 * Holds back the COMMIT that follows an UPDATE of `destinations` for `holder` on the same connection until
 * `resume()`, as if the process that sent it were stopped just before: `reached` resolves once it is held. The
 * driver is wrapped, not the storage; other connections of the process (other test files run alongside) pass.
 */
function holdCommitAfterUpdateBy(holder: string) {
  const query = pg.Client.prototype.query;
  let resume!: () => void;
  const resumed = new Promise<void>((resolve) => (resume = resolve));
  let reached!: () => void;
  const held = new Promise<void>((resolve) => (reached = resolve));
  const updated = new WeakSet<pg.Client>();
  let armed = true;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- pg's overloaded signatures
  pg.Client.prototype.query = function (this: pg.Client, ...args: any[]): any {
    const text = typeof args[0] === 'string' ? args[0].trim() : '';
    if (/^update "destinations"/i.test(text) && Array.isArray(args[1]) && args[1].includes(holder)) updated.add(this);
    else if (armed && updated.has(this) && /^commit$/i.test(text)) {
      armed = false;
      reached();
      return resumed.then(() => (query as (...a: unknown[]) => unknown).apply(this, args));
    }
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return {
    reached: held,
    resume(): void {
      pg.Client.prototype.query = query;
      resume();
    },
  };
}

/** `taker` tries to take the lease every 50 ms, for 6 s at most: whether it did, and after how long. */
async function takeOver(taker: OpenedStorage, name: string, id: string) {
  const started = Date.now();
  const outcomes = new Map<string, number>();
  let taken: boolean | undefined = false;
  while (taken !== true && Date.now() - started < 6_000) {
    const t = Date.now();
    taken = await taker.destinations.acquireLease(id, name, LEASE_MS);
    const waited = Date.now() - t;
    assert.ok(waited < LEASE_MS, `one attempt waited ${waited} ms for the row`);
    outcomes.set(String(taken), (outcomes.get(String(taken)) ?? 0) + 1);
    if (taken !== true) await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { taken, after: Date.now() - started, outcomes: JSON.stringify([...outcomes]) };
}

describe(`destination leases between two instances (${dialect})`, { skip: postgresOnly }, () => {
  let database: TestDatabase;
  let a: OpenedStorage;
  let b: OpenedStorage;
  let productId: string;
  let id: string;
  const cleanups: Array<() => Promise<void>> = [];

  before(async () => {
    database = testDatabase();
    cleanups.push(() => database.drop());
    ({ productId, id } = await storedWebhookDestination(database, 'leases'));
    const open = () =>
      openStorage(database.databaseUrl, {
        postgresSchema: database.postgresSchema!,
        migrate: false,
        destinationLeaseMs: LEASE_MS,
      });
    a = await open();
    b = await open();
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  it('takes over from a holder stopped inside its state write within the lease, and the holder commits nothing', async () => {
    assert.equal(await a.destinations.acquireLease(id, A, LEASE_MS), true);
    const stored = (await b.destinations.getById(id))!;

    // The holder's state write stops between its UPDATE of the row and its COMMIT.
    const commit = holdCommitAfterUpdateBy(A);
    let writing: Promise<boolean>;
    try {
      writing = a.destinations.writeState(
        id,
        A,
        { deliveredAdd: 7, lastError: 'written by the stopped holder' },
        new Date().toISOString(),
        [
          {
            productId,
            destinationId: id,
            attemptedAt: new Date().toISOString(),
            attempt: 1,
            webhookId: 'msg_stopped_holder',
            messageIds: ['evt_1'],
            outcome: 'success',
            status: 200,
            error: null,
            durationMs: 1,
          },
        ],
      );
      await commit.reached;
    } catch (error) {
      commit.resume();
      throw error;
    }

    // The other instance tries every 50 ms, as its passes would (each waits for the row's lock only briefly).
    const { taken, after, outcomes } = await takeOver(b, B, id);
    commit.resume();
    assert.equal(taken, true, `taken over while the holder is stopped (attempts: ${outcomes})`);
    // The lease runs out at most LEASE_MS after the stop, and the stopped session is ended LEASE_MS after it went idle.
    assert.ok(after < 2 * LEASE_MS + 1000, `taken over ${after} ms after the stop`);

    // Resumed, the holder finds its session gone: nothing of its write is committed.
    await assert.rejects(writing!);
    const now2 = (await b.destinations.getById(id))!;
    assert.equal(now2.leaseHolder, B);
    assert.equal(now2.delivered, stored.delivered);
    assert.equal(now2.lastError, stored.lastError);
    const log = await b.destinations.listDeliveries(productId, id, 10);
    assert.equal(log.filter((d) => d.webhookId === 'msg_stopped_holder').length, 0, 'no attempt of its in the log');
    // The holder's storage goes on working on a new session; its write is refused by the fence.
    assert.equal(await a.destinations.writeState(id, A, { deliveredAdd: 1 }, new Date().toISOString()), false);
  });

  it('a lease pass that finds the row locked waits only briefly and learns nothing', async () => {
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    try {
      await client.query(`SET search_path = ${database.postgresSchema!}`);
      await client.query('BEGIN');
      await client.query('UPDATE destinations SET updated_at = updated_at WHERE id = $1', [id]);
      const t = Date.now();
      const attempt = b.destinations.acquireLease(id, B, LEASE_MS);
      const outcome = await Promise.race([
        attempt,
        new Promise<string>((resolve) => setTimeout(() => resolve('still waiting'), 2_000)),
      ]);
      assert.equal(outcome, undefined, 'the row stayed locked: nothing known');
      assert.ok(Date.now() - t < LEASE_MS, `waited ${Date.now() - t} ms`);
      await client.query('ROLLBACK');
      await attempt;
      assert.equal(await b.destinations.acquireLease(id, B, LEASE_MS), true);
    } finally {
      await client.end();
    }
  });

  it('takes over from a holder stopped inside its lease renewal', async () => {
    const renewal = holdCommitAfterUpdateBy(B);
    const renewing = b.destinations.acquireLease(id, B, LEASE_MS);
    await renewal.reached;
    const { taken, after, outcomes } = await takeOver(a, A, id);
    renewal.resume();
    assert.equal(taken, true, `taken over while the holder is stopped (attempts: ${outcomes})`);
    assert.ok(after < 2 * LEASE_MS + 1000, `taken over ${after} ms after the stop`);
    await assert.rejects(renewing);
    assert.equal((await a.destinations.getById(id))!.leaseHolder, A);
  });
});
