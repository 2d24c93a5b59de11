// services/version-cache.ts, the per-product versions of tracking plans and transformations: only the first ask
// waits for storage, a warm version answers at once (no promise), a stale one is served while one refresh asks for
// a newer one, a version stored here applies at once (and a refresh that began before cannot put an older one back),
// KEEP keeps what is held, a version `retry` names is made ready again at each refresh, and a replaced version is
// handed to `replaced` (a transformation frees its compiled functions there).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { KEEP, VersionCache, type VersionSource } from '../../src/services/version-cache.js';

interface Doc {
  version: number;
  name: string;
}

/** A source whose stored version of product `p` the test sets (other products have none); counts the reads, and
 *  answers KEEP for versions named `bad`. */
function source() {
  const state = { stored: undefined as Doc | undefined, versionReads: 0, loads: 0, replaced: [] as Doc[] };
  const src: VersionSource<Doc> = {
    currentVersion: async (productId) => {
      state.versionReads++;
      return productId === 'p' ? (state.stored?.version ?? 0) : 0;
    },
    load: async (productId) => {
      state.loads++;
      if (productId !== 'p') return undefined;
      if (state.stored?.name === 'bad') return KEEP;
      return state.stored;
    },
    replaced: (old) => state.replaced.push(old),
  };
  return { state, src };
}

describe('VersionCache', () => {
  it('waits for storage only on the first ask; a warm entry answers without a promise', async () => {
    const { state, src } = source();
    state.stored = { version: 1, name: 'one' };
    const cache = new VersionCache(src, 60_000, () => 0);
    const first = cache.get('p');
    assert.ok(first instanceof Promise);
    assert.deepEqual(await first, { version: 1, name: 'one' });
    const warm = cache.get('p');
    assert.ok(!(warm instanceof Promise));
    assert.deepEqual(warm, { version: 1, name: 'one' });
    assert.equal(state.versionReads, 1);
    // A product without a version is remembered as none, warm too.
    assert.equal(await cache.get('other'), undefined);
    assert.equal(cache.get('other'), undefined);
  });

  it('serves a stale entry while one refresh reads the newer version; the next ask gets it', async () => {
    const { state, src } = source();
    state.stored = { version: 1, name: 'one' };
    let now = 0;
    const cache = new VersionCache(src, 1000, () => now);
    await cache.get('p');
    state.stored = { version: 2, name: 'two' };
    now = 1500;
    assert.equal((cache.get('p') as Doc).name, 'one');
    assert.equal((cache.get('p') as Doc).name, 'one');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(state.versionReads, 2, 'one refresh for two stale asks');
    assert.equal((cache.get('p') as Doc).name, 'two');
    assert.deepEqual(state.replaced, [{ version: 1, name: 'one' }]);
  });

  it('applies a version stored here at once, and keeps the held one when the stored one cannot be used', async () => {
    const { state, src } = source();
    state.stored = { version: 1, name: 'one' };
    let now = 0;
    const cache = new VersionCache(src, 1000, () => now);
    await cache.get('p');
    cache.set('p', { version: 2, name: 'two' });
    assert.equal((cache.get('p') as Doc).name, 'two');
    assert.deepEqual(state.replaced, [{ version: 1, name: 'one' }]);
    state.stored = { version: 3, name: 'bad' };
    now = 5000;
    cache.get('p');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(state.loads, 2);
    assert.equal((cache.get('p') as Doc).name, 'two', 'KEEP keeps the version held');
  });

  it('a refresh that read storage before a version was stored here does not put the older one back', async () => {
    const { state, src } = source();
    state.stored = { version: 1, name: 'one' };
    let now = 0;
    // Loads read the stored version at once, then answer when the test opens the gate.
    let gate = Promise.resolve();
    const slow: VersionSource<Doc> = {
      ...src,
      load: async (productId) => {
        const answer = await src.load(productId);
        await gate;
        return answer;
      },
    };
    const cache = new VersionCache(slow, 1000, () => now);
    await cache.get('p');
    // Another instance stores version 2; this one's refresh reads it and is held before it installs it.
    let open!: () => void;
    gate = new Promise<void>((resolve) => (open = resolve));
    state.stored = { version: 2, name: 'two' };
    now = 1500;
    assert.equal((cache.get('p') as Doc).name, 'one', 'stale: served while the refresh runs');
    while (state.loads < 2) await new Promise((resolve) => setImmediate(resolve));
    // A PUT here stores version 3 and answers: every ask from now on must get it.
    state.stored = { version: 3, name: 'three' };
    cache.set('p', { version: 3, name: 'three' });
    assert.equal((cache.get('p') as Doc).name, 'three');
    open();
    // The refresh ends by letting go of one version: the one it loaded, or (were it to install it) version 3.
    while (state.replaced.length < 2) await new Promise((resolve) => setImmediate(resolve));
    assert.equal((cache.get('p') as Doc).name, 'three', 'the refresh that read version 2 did not put it back');
    assert.deepEqual(
      state.replaced.map((doc) => doc.name),
      ['one', 'two'],
      'the version replaced, then the one the late refresh loaded, are let go',
    );
  });

  it('keeps the newer of two versions stored here whose answers crossed', () => {
    const { state, src } = source();
    const cache = new VersionCache(src, 1000, () => 0);
    cache.set('p', { version: 5, name: 'five' });
    cache.set('p', { version: 4, name: 'four' });
    assert.equal((cache.get('p') as Doc).name, 'five');
    assert.deepEqual(state.replaced, [{ version: 4, name: 'four' }]);
  });

  it('makes a held version that `retry` names ready again at each refresh, though storage has no newer one', async () => {
    const { state, src } = source();
    state.stored = { version: 1, name: 'partial' };
    let now = 0;
    const cache = new VersionCache({ ...src, retry: (held) => held.name === 'partial' }, 1000, () => now);
    await cache.get('p');
    assert.equal(state.loads, 1);
    state.stored = { version: 1, name: 'whole' };
    now = 1500;
    cache.get('p');
    while (state.loads < 2) await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal((cache.get('p') as Doc).name, 'whole');
    now = 3000;
    cache.get('p');
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(state.loads, 2, 'a whole version is not loaded again');
    assert.equal(state.versionReads, 3);
  });
});
