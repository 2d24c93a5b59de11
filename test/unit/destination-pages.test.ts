// The page window shared by a product's destinations (services/destinations/pages.ts): a read from a window
// returns exactly what the store would (the messages after the cursor, in order, as many as asked or all there
// are), the store is read once for destinations at the same place, a message is formatted once, and an
// expired window is not served.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createPageReader, cursorAfter } from '../../src/services/destinations/pages.js';
import type { DestinationCursor, DestinationStore, StoredMessage } from '../../src/storage/types.js';

/** A product's log: events and identity messages interleaved, positions increasing per kind. */
function fakeStore() {
  const log: StoredMessage[] = [];
  let events = 0;
  let identity = 0;
  let reads = 0;
  const after = (cursor: DestinationCursor) =>
    log.filter((m) => (m.kind === 'event' ? m.position > (cursor.event ?? '') : m.position > (cursor.identity ?? '')));
  const pad = (n: number) => String(n).padStart(8, '0'); // string order = number order
  return {
    log,
    get reads() {
      return reads;
    },
    add(n: number, random: () => number = Math.random) {
      for (let i = 0; i < n; i++) {
        if (random() < 0.2)
          log.push({
            kind: 'identity',
            position: pad(++identity),
            id: `idm_${identity}`,
            type: 'user.identified',
            createdAt: '',
            data: {} as never,
          });
        else log.push({ kind: 'event', position: pad(++events), event: { id: `e${events}` } as never });
      }
    },
    after,
    store: {
      async readMessages(_productId: string, cursor: DestinationCursor, limit: number) {
        reads++;
        await new Promise((resolve) => setImmediate(resolve));
        return after(cursor).slice(0, limit);
      },
    } as unknown as DestinationStore,
  };
}

const format = (calls: Map<string, number>) => (m: StoredMessage) => {
  const id = m.kind === 'event' ? m.event.id : m.id;
  calls.set(id, (calls.get(id) ?? 0) + 1);
  return { id, type: 'event.created' as const, timestamp: '', json: '{}' };
};

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('shared page reads', () => {
  it('destinations at the same cursor read the store once; each message is formatted once', async () => {
    const f = fakeStore();
    f.add(300);
    const calls = new Map<string, number>();
    const pages = createPageReader(f.store, format(calls));
    const start = { event: null, identity: null };
    const a = await pages.read('p', start, 100, true);
    const b = await pages.read('p', start, 100, true);
    assert.deepEqual(b, a);
    assert.equal(f.reads, 1);
    for (const m of [...a, ...b]) pages.format(m);
    assert.ok([...calls.values()].every((n) => n === 1));
    // A read past the window's end: the window's part, then only the rest from the store.
    const c = await pages.read('p', start, 250, true);
    assert.deepEqual(c, f.log.slice(0, 250));
    assert.equal(f.reads, 2);
  });

  it('a product with one destination reads straight from the store', async () => {
    const f = fakeStore();
    f.add(50);
    const pages = createPageReader(f.store, format(new Map()));
    await pages.read('p', { event: null, identity: null }, 10, false);
    await pages.read('p', { event: null, identity: null }, 10, false);
    assert.equal(f.reads, 2);
  });

  it('an expired window is not served', async () => {
    const f = fakeStore();
    f.add(20);
    let now = 0;
    const pages = createPageReader(f.store, format(new Map()), () => now);
    const start = { event: null, identity: null };
    await pages.read('p', start, 10, true);
    now += 10_000;
    assert.deepEqual(await pages.read('p', start, 10, true), f.log.slice(0, 10));
    assert.equal(f.reads, 2);
  });

  it('random interleavings: every read equals what the store holds after the cursor', async () => {
    for (let seed = 1; seed <= 40; seed++) {
      const random = seeded(seed);
      const f = fakeStore();
      f.add(Math.floor(random() * 200), random);
      let now = 0;
      const pages = createPageReader(f.store, format(new Map()), () => now);
      // Three readers, each moving its cursor by what it read (or part of it), some reading concurrently.
      const cursors: DestinationCursor[] = [0, 1, 2].map(() => ({ event: null, identity: null }));
      for (let step = 0; step < 60; step++) {
        if (random() < 0.3) f.add(Math.floor(random() * 300), random);
        if (random() < 0.05) now += 4_000;
        const who = [0, 1, 2].filter(() => random() < 0.6);
        await Promise.all(
          who.map(async (i) => {
            const limit = 1 + Math.floor(random() * 400);
            const cursor = cursors[i]!;
            const before = f.after(cursor);
            const got = await pages.read('p', cursor, limit, true);
            const expected = before.slice(0, limit);
            // What the store held at the start of the read is a prefix of the answer's source; nothing was skipped.
            assert.deepEqual(got.slice(0, expected.length), expected.slice(0, got.length), `seed ${seed} step ${step}`);
            assert.ok(
              got.length >= Math.min(limit, before.length),
              `seed ${seed}: a short read (${got.length} of ${Math.min(limit, before.length)})`,
            );
            assert.deepEqual(got, f.after(cursor).slice(0, got.length));
            let moved = cursor;
            for (const m of got.slice(0, Math.floor(random() * (got.length + 1)))) moved = cursorAfter(moved, m);
            cursors[i] = moved;
          }),
        );
      }
    }
  });
});
