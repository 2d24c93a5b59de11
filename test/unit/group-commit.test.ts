// The group-commit writer behind every event write (contract §4: nothing answered created or
// duplicate is lost; concurrent requests share commits but never each other's results or failures).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GroupCommitWriter } from '../../src/services/group-commit.js';

/** A fake store: records every commit; fails a commit that holds a "bad" item. */
function fakeStore() {
  const commits: string[][] = [];
  const stored: string[] = [];
  const write = async (items: string[]) => {
    await new Promise((resolve) => setImmediate(resolve));
    commits.push([...items]);
    if (items.some((item) => item.startsWith('bad'))) throw new Error('row rejected by the database');
    stored.push(...items);
    return items.map((item) => `ok:${item}`);
  };
  return { commits, stored, write };
}

describe('GroupCommitWriter', () => {
  it('answers each request with its own results, in order, and groups concurrent requests into few commits', async () => {
    const store = fakeStore();
    const reported: number[] = [];
    const writer = new GroupCommitWriter(store.write, { maxItems: 1000, maxInFlight: 1 }, (items) =>
      reported.push(items),
    );
    const requests = Array.from({ length: 20 }, (_, r) => Array.from({ length: (r % 3) + 1 }, (_, i) => `r${r}i${i}`));
    const results = await Promise.all(requests.map((items) => writer.submit(items)));
    results.forEach((result, r) =>
      assert.deepEqual(
        result,
        requests[r]!.map((item) => `ok:${item}`),
      ),
    );
    assert.ok(
      store.commits.length < requests.length,
      `${store.commits.length} commits for ${requests.length} requests`,
    );
    assert.equal(store.stored.length, requests.flat().length);
    // Every commit is reported (the commit-size and commit-duration metrics), with its size.
    assert.deepEqual(
      reported,
      store.commits.map((c) => c.length),
    );
  });

  it('never splits one request across commits, even over maxItems', async () => {
    const store = fakeStore();
    const writer = new GroupCommitWriter(store.write, { maxItems: 5, maxInFlight: 1 });
    const big = Array.from({ length: 12 }, (_, i) => `big${i}`);
    await Promise.all([writer.submit(['a']), writer.submit(big), writer.submit(['b', 'c'])]);
    const withBig = store.commits.filter((c) => c.some((item) => item.startsWith('big')));
    assert.equal(withBig.length, 1);
    assert.deepEqual(
      withBig[0]!.filter((item) => item.startsWith('big')),
      big,
    );
  });

  it('respects maxInFlight', async () => {
    let inFlight = 0;
    let peak = 0;
    const writer = new GroupCommitWriter(
      async (items: number[]) => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        await new Promise((resolve) => setTimeout(resolve, 2));
        inFlight--;
        return items;
      },
      { maxItems: 2, maxInFlight: 2 },
    );
    await Promise.all(Array.from({ length: 30 }, (_, i) => writer.submit([i])));
    assert.ok(peak <= 2, `peak ${peak}`);
  });

  it('starts a second commit beside the one in flight only once minItemsToOverlap items wait', async () => {
    const commits: Array<{ items: number; overlapped: boolean }> = [];
    let inFlight = 0;
    const writer = new GroupCommitWriter(
      async (items: number[]) => {
        commits.push({ items: items.length, overlapped: inFlight > 0 });
        inFlight++;
        await new Promise((resolve) => setTimeout(resolve, 5));
        inFlight--;
        return items;
      },
      { maxItems: 100, maxInFlight: 2, minItemsToOverlap: 10 },
    );
    // Small requests trickling in while a commit is in flight: they wait for it, then go in one commit.
    const first = writer.submit([0]);
    await new Promise((resolve) => setImmediate(resolve));
    const small = Array.from({ length: 5 }, (_, i) => writer.submit([i]));
    await Promise.all([first, ...small]);
    assert.deepEqual(commits, [
      { items: 1, overlapped: false },
      { items: 5, overlapped: false },
    ]);
    // Enough waiting items: the second commit starts beside the first.
    commits.length = 0;
    const lead = writer.submit([0]);
    await new Promise((resolve) => setImmediate(resolve));
    const big = writer.submit(Array.from({ length: 12 }, (_, i) => i));
    await Promise.all([lead, big]);
    assert.deepEqual(commits, [
      { items: 1, overlapped: false },
      { items: 12, overlapped: true },
    ]);
  });

  it('a request whose rows fail does not fail the other requests that shared its commit', async () => {
    const store = fakeStore();
    const writer = new GroupCommitWriter(store.write, { maxItems: 1000, maxInFlight: 1 });
    const outcomes = await Promise.allSettled([
      writer.submit(['good1']),
      writer.submit(['bad']),
      writer.submit(['good2', 'good3']),
    ]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.deepEqual((outcomes[2] as PromiseFulfilledResult<string[]>).value, ['ok:good2', 'ok:good3']);
    assert.deepEqual(store.stored.sort(), ['good1', 'good2', 'good3']);
    assert.match(String((outcomes[1] as PromiseRejectedResult).reason), /row rejected/);
  });

  it('a lone failing request is rejected with the error of its commit', async () => {
    const store = fakeStore();
    const writer = new GroupCommitWriter(store.write, { maxItems: 1000, maxInFlight: 1 });
    await assert.rejects(writer.submit(['bad-alone']), /row rejected/);
    assert.deepEqual(await writer.submit(['after']), ['ok:after']);
  });

  it('drain() waits for everything queued and in flight', async () => {
    const store = fakeStore();
    const writer = new GroupCommitWriter(store.write, { maxItems: 3, maxInFlight: 1 });
    const pending = Array.from({ length: 10 }, (_, i) => writer.submit([`d${i}`]));
    await writer.drain();
    assert.equal(store.stored.length, 10);
    await Promise.all(pending);
    await writer.drain(); // idle: resolves at once
  });

  it('a commit whose outcome is unknown (connection lost) fails every request of the group at once, without writing them again', async () => {
    const commits: string[][] = [];
    const lost = Object.assign(new Error('Connection terminated unexpectedly'), { code: '08006' });
    let blockFirst: (() => void) | undefined;
    const write = async (items: string[]) => {
      commits.push([...items]);
      // The first commit holds so the next requests gather into one group; that group then loses its connection.
      if (commits.length === 1) await new Promise<void>((resolve) => (blockFirst = resolve));
      else throw lost;
      return items.map((item) => `ok:${item}`);
    };
    const writer = new GroupCommitWriter(
      write,
      { maxItems: 1000, maxInFlight: 1 },
      undefined,
      (error) => (error as { code?: string }).code === '08006',
    );
    const first = writer.submit(['x']);
    await new Promise((resolve) => setImmediate(resolve));
    const group = [writer.submit(['a']), writer.submit(['b']), writer.submit(['c'])];
    blockFirst!();
    assert.deepEqual(await first, ['ok:x']);
    for (const request of group) await assert.rejects(request, /Connection terminated/);
    assert.deepEqual(
      commits,
      [['x'], ['a', 'b', 'c']],
      'no one-by-one retry: an event without external_id could be stored twice',
    );
  });
});
