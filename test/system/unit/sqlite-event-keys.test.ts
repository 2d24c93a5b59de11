// SQLite idempotency keys (src/storage/sqlite/event-keys.ts, docs/design.md "Idempotency keys on SQLite"): an
// external_id is stored once per product and source whether its key is in this transaction, the tail, a merge in
// progress or event_keys, across restarts, and under hash collisions; a deleted event takes its key along; the
// migration writes the keys of events stored before it.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
import { uuidv7 } from '../../../src/domain/ids.js';
import { SQLITE_PRODUCT_NUMBER } from '../../../src/storage/event-columns.js';
import { openStorage, type OpenedStorage } from '../../../src/storage/connect.js';
import {
  HASH_RANGE,
  keyHash,
  mergeAllEventKeys,
  moveSlices,
  moveThreshold,
  sliceStart,
  subjectHash,
} from '../../../src/storage/sqlite/event-keys.js';
import { eventRow, fileBefore, sqliteDirectWriter } from '../../event-rows.js';

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-event-keys-'));
  return test(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

const row = eventRow;

async function product(storage: OpenedStorage): Promise<string> {
  const id = uuidv7();
  await storage.products.create({ id, name: 'keys', createdAt: new Date().toISOString() });
  return id;
}

/** A migrated file in `dir` with one product (`a`), then written through a direct writer (test/event-rows.ts). */
async function writerOnProduct(dir: string, options: Parameters<typeof sqliteDirectWriter>[1] = {}) {
  const storage = await openStorage(`sqlite:${join(dir, 'inlet.db')}`);
  const a = await product(storage);
  await storage.close();
  return { a, ...sqliteDirectWriter(join(dir, 'inlet.db'), options) };
}

/** Rows in a table, read on the writer's own connection. */
function tableCount(raw: BetterSqlite3.Database, table: string): number {
  return raw.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number;
}

/** Every key on disk: both levels (event_keys_recent, which merges write, and event_keys, which it moves into). */
const ON_DISK = '(SELECT h, position FROM event_keys_recent UNION ALL SELECT h, position FROM event_keys)';
function keysOnDisk(raw: BetterSqlite3.Database): number {
  return tableCount(raw, ON_DISK);
}

async function count(storage: OpenedStorage, table: 'events' | 'event_keys'): Promise<number> {
  const result = await sql<{ n: number }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(storage.db);
  return result.rows[0]!.n;
}

describe('SQLite idempotency keys', () => {
  it('stores each key once through tail, merges and a restart, with ids reused across products and sources', () =>
    withDir(async (dir) => {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      // A tail of 40 keys: many merges in a few hundred events.
      let storage = await openStorage(url, { sqliteEventKeysTail: 40 });
      const a = await product(storage);
      const b = await product(storage);
      const ids = Array.from({ length: 300 }, (_, i) => `ext-${i}`);
      const firstIds = new Map<string, string>();
      // Groups of 7 with a repeat inside the group and ids sent again from earlier groups.
      for (let i = 0; i < ids.length; i += 7) {
        const group = ids.slice(i, i + 7);
        const rows = [...group, group[0]!, ...(i >= 14 ? [ids[i - 14]!, ids[i - 3]!] : [])].map((id) => row(a, id));
        const outcomes = await storage.events.insertMany(rows);
        outcomes.forEach((outcome, j) => {
          const id = rows[j]!.externalId!;
          if (!firstIds.has(id)) {
            assert.equal(outcome.status, 'created', `${id} first time`);
            firstIds.set(id, outcome.event.id);
          } else {
            assert.equal(outcome.status, 'duplicate', `${id} again`);
            assert.equal(outcome.event.id, firstIds.get(id), `${id}: the original`);
          }
        });
      }
      // The same ids in another product and under another source are other events.
      const other = await storage.events.insertMany([row(b, 'ext-1'), row(a, 'ext-1', { source: 'segment' })]);
      assert.deepEqual(
        other.map((o) => o.status),
        ['created', 'created'],
      );
      // Events without an external_id are never duplicates.
      const plain = await storage.events.insertMany([row(a, null), row(a, null)]);
      assert.deepEqual(
        plain.map((o) => o.status),
        ['created', 'created'],
      );
      assert.equal(await count(storage, 'events'), 304);
      await storage.close();

      // After a restart (the tail rebuilt from the rows after merged_through) every id is still known.
      storage = await openStorage(url, { sqliteEventKeysTail: 40 });
      const merged = (
        await sql<{ through: number }>`SELECT merged_through AS through FROM event_keys_state`.execute(storage.db)
      ).rows[0]!.through;
      assert.ok(merged > 0 && merged < 304, `some events merged (through ${merged}), some in the tail`);
      const again = await storage.events.insertMany(ids.map((id) => row(a, id)));
      assert.ok(again.every((o) => o.status === 'duplicate'));
      assert.deepEqual(
        again.map((o) => o.event.id),
        ids.map((id) => firstIds.get(id)),
      );
      assert.equal(await count(storage, 'events'), 304);
      await storage.close();
    }));

  it('two writers of one file each see the keys the other stored (a second process must not store an id twice)', () =>
    withDir(async (dir) => {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      const first = await openStorage(url, { sqliteEventKeysTail: 30 });
      const second = await openStorage(url, { sqliteEventKeysTail: 30 });
      try {
        const a = await product(first);
        const stored = new Map<string, string>();
        for (let i = 0; i < 120; i++) {
          const writer = i % 2 === 0 ? first : second;
          // Each id is sent twice: first by one writer, then (a step later) by the other.
          const batch = [row(a, `w${i}`), ...(i > 0 ? [row(a, `w${i - 1}`)] : [])];
          const outcomes = await writer.events.insertMany(batch);
          assert.equal(outcomes[0]!.status, 'created', `w${i}`);
          stored.set(`w${i}`, outcomes[0]!.event.id);
          if (i > 0) {
            assert.equal(outcomes[1]!.status, 'duplicate', `w${i - 1} from the other writer`);
            assert.equal(outcomes[1]!.event.id, stored.get(`w${i - 1}`));
          }
        }
        assert.equal(await count(first, 'events'), 120);
      } finally {
        await second.close();
        await first.close();
      }
    }));

  it('with the key filter built, every stored id is still a duplicate after a restart, and new ids mostly skip the table', () =>
    withDir(async (dir) => {
      const first = await writerOnProduct(dir, { tailKeys: 40 });
      const a = first.a;
      const ids = Array.from({ length: 300 }, (_, i) => `f${i}`);
      for (let i = 0; i < ids.length; i += 10)
        await first.writer.insertMany(ids.slice(i, i + 10).map((id) => row(a, id)));
      await first.keys.mergeNow();
      // The merges' transactions count as time the background work held the connection.
      assert.ok(
        first.keys.merges > 0 && first.keys.busySeconds > 0,
        `merges ${first.keys.merges}, busy ${first.keys.busySeconds} s`,
      );
      await first.close();

      const { keys, writer, close } = sqliteDirectWriter(join(dir, 'inlet.db'), { tailKeys: 40 });
      await writer.insertMany([row(a, 'first-after-restart')]);
      await keys.filtered();
      // The filter's build, before any merge of this writer, counts as background work too.
      assert.ok(keys.merges === 0 && keys.busySeconds > 0, `merges ${keys.merges}, busy ${keys.busySeconds} s`);
      const before = keys.probes;
      const fresh = await writer.insertMany(Array.from({ length: 400 }, (_, i) => row(a, `new-${i}`)));
      assert.ok(fresh.every((o) => o.status === 'created'));
      assert.ok(keys.probes - before < 40, `new ids probed event_keys ${keys.probes - before} times of 400`);
      const again = await writer.insertMany(ids.map((id) => row(a, id)));
      assert.deepEqual(
        again.map((o) => o.status),
        ids.map(() => 'duplicate'),
      );
      await close();
    }));

  it('merges write a recent level that moves into event_keys once large; every key is found in either, once, after a restart and a sweep', () =>
    withDir(async (dir) => {
      const tailKeys = 50;
      const first = await writerOnProduct(dir, { tailKeys });
      const a = first.a;
      const ids = Array.from({ length: 1000 }, (_, i) => `lv${i}`);
      for (let i = 0; i < ids.length; i += 25) {
        await first.writer.insertMany(ids.slice(i, i + 25).map((id) => row(a, id)));
        await first.keys.idle(); // a merge per tail, as under a steady load
      }
      await first.keys.mergeNow();
      // Keys in both levels: if the last merge moved the recent level, one more tail (right after a move the level
      // is far below its threshold, so this one stays).
      const all = [...ids];
      for (let extra = 0; tableCount(first.raw, 'event_keys_recent') === 0; extra++) {
        const more = Array.from({ length: tailKeys }, (_, i) => `lv-more${extra}-${i}`);
        await first.writer.insertMany(more.map((id) => row(a, id)));
        await first.keys.mergeNow();
        all.push(...more);
      }
      const recent = tableCount(first.raw, 'event_keys_recent');
      const big = tableCount(first.raw, 'event_keys');
      assert.ok(
        first.keys.moves >= 2,
        `moves ${first.keys.moves}, merges ${first.keys.merges}, recent ${recent}, big ${big}`,
      );
      assert.ok(recent > 0 && big > 0, `recent ${recent}, big ${big}`);
      assert.ok(
        recent < moveThreshold(big, tailKeys),
        `the recent level (${recent}) stays below its threshold (${moveThreshold(big, tailKeys)})`,
      );
      assert.equal(recent + big, all.length);
      assert.equal(
        tableCount(first.raw, 'event_keys_recent r JOIN event_keys k USING (h, position)'),
        0,
        'no entry in both levels',
      );
      await first.close();

      // A restart: the filter is built from both levels; every stored id is a duplicate, new ids mostly skip both.
      // (A tail large enough that this writer neither merges nor moves before the sweep below.)
      const { raw, keys, writer, close } = sqliteDirectWriter(join(dir, 'inlet.db'), {
        tailKeys: 10_000,
        sweepMin: 10,
      });
      await writer.insertMany([row(a, 'lv-after-restart')]);
      await keys.filtered();
      const before = keys.probes;
      const fresh = await writer.insertMany(Array.from({ length: 400 }, (_, i) => row(a, `lv-new-${i}`)));
      assert.ok(fresh.every((o) => o.status === 'created'));
      assert.ok(keys.probes - before < 40, `new ids probed ${keys.probes - before} times of 400`);
      const again = await writer.insertMany(all.map((id) => row(a, id)));
      assert.deepEqual(
        again.map((o) => o.status),
        all.map(() => 'duplicate'),
      );

      // Rows deleted from both levels: a sweep takes their keys out of whichever holds them.
      const inRecent = raw
        .prepare(`SELECT e.external_id FROM event_keys_recent r JOIN events e ON e.position = r.position LIMIT 5`)
        .pluck()
        .all() as string[];
      const inBig = raw
        .prepare(`SELECT e.external_id FROM event_keys k JOIN events e ON e.position = k.position LIMIT 5`)
        .pluck()
        .all() as string[];
      assert.equal(inRecent.length + inBig.length, 10);
      const other = new BetterSqlite3(join(dir, 'inlet.db'));
      const gone = [...inRecent, ...inBig];
      other
        .prepare(`DELETE FROM events WHERE external_id IN (SELECT value FROM json_each(?))`)
        .run(JSON.stringify(gone));
      other.close();
      await keys.sweepIfMany();
      assert.equal(keys.swept, 10);
      assert.equal(keysOnDisk(raw), all.length - 10);
      await keys.mergeNow();
      const stored = tableCount(raw, 'events');
      assert.equal(keysOnDisk(raw), stored);
      assert.equal(
        raw.prepare(`SELECT count(*) FROM ${ON_DISK} k JOIN events e ON e.position = k.position`).pluck().get(),
        stored,
      );
      const kept = all.filter((id) => !gone.includes(id)).slice(0, 3);
      const outcomes = await writer.insertMany([...gone, ...kept].map((id) => row(a, id)));
      assert.deepEqual(
        outcomes.map((o) => o.status),
        [...gone.map(() => 'created'), ...kept.map(() => 'duplicate')],
      );
      await close();
    }));

  it('spreads a move over the merges after it starts, a slice of the hash range each; every key in one level, found', () =>
    withDir(async (dir) => {
      const tailKeys = 50;
      const { a, raw, keys, writer, close } = await writerOnProduct(dir, { tailKeys });
      const merged = raw.prepare('SELECT merged_through FROM event_keys_state WHERE id = 1').pluck();
      const ids: string[] = [];
      let midMove = 0;
      let checked = false;
      let startedThrough = 0;
      for (let i = 0; i < 2000; i += 25) {
        const batch = Array.from({ length: 25 }, (_, j) => `sl${i + j}`);
        await writer.insertMany(batch.map((id) => row(a, id)));
        ids.push(...batch);
        await keys.idle(); // a merge per tail, and a slice of a move after it
        const move = keys.moving;
        if (move === undefined) {
          startedThrough = 0;
          continue;
        }
        // The merge that started this move is the first one after which it is seen: every entry it had merged
        // by then and whose hash is in a slice moved since has left the recent level.
        if (startedThrough === 0) startedThrough = merged.get() as number;
        assert.equal(
          raw
            .prepare('SELECT count(*) FROM event_keys_recent WHERE h < ? AND position <= ?')
            .pluck()
            .get(sliceStart(move.done, move.slices), startedThrough),
          0,
          `slices 1–${move.done} of ${move.slices} moved`,
        );
        assert.ok(
          tableCount(raw, `event_keys_recent WHERE h >= ${sliceStart(move.done, move.slices)}`) > 0,
          'the slices still to move are in the recent level',
        );
        assert.equal(tableCount(raw, 'event_keys_recent r JOIN event_keys k USING (h, position)'), 0);
        assert.equal(keysOnDisk(raw), merged.get());
        midMove++;
        if (!checked) {
          // Halfway through a move every stored id is still a duplicate.
          checked = true;
          const again = await writer.insertMany(ids.map((id) => row(a, id)));
          assert.ok(again.every((o) => o.status === 'duplicate'));
        }
      }
      assert.ok(midMove >= 4, `merges seen halfway through a move: ${midMove}`);
      assert.ok(keys.moves >= 2, `moves ${keys.moves}`);
      const again = await writer.insertMany(ids.map((id) => row(a, id)));
      assert.deepEqual(
        again.map((o) => o.status),
        ids.map(() => 'duplicate'),
      );
      await close();
    }));

  it('every key and subject hash is a whole number below HASH_RANGE, where the last slice of a move ends', () => {
    // An entry hashed at or above HASH_RANGE would sit past every slice and never leave the recent level.
    let seed = 0x9e3779b9;
    const random = () => (seed = Math.imul(seed ^ (seed >>> 15), 2246822507) >>> 0);
    for (let i = 0; i < 20_000; i++) {
      const text = `${random().toString(36)}-${'ü€'.repeat(random() % 3)}${random()}`;
      for (const h of [keyHash(random(), `p${i}`, 'api', text), subjectHash(keyHash, random(), `p${i}`, text)]) {
        assert.ok(Number.isInteger(h) && h >= 0 && h < HASH_RANGE, `${text}: ${h}`);
      }
    }
  });

  it('moveSlices: about a tail a slice, at most 8', () => {
    assert.equal(moveSlices(250_000, 250_000), 1);
    assert.equal(moveSlices(707_107, 250_000), 2);
    assert.equal(moveSlices(2_236_068, 250_000), 8);
    assert.equal(moveSlices(7_071_068, 250_000), 8);
    assert.equal(sliceStart(0, 8), 0);
    assert.equal(sliceStart(8, 8), HASH_RANGE);
    assert.equal(sliceStart(3, 3), HASH_RANGE, 'the last slice ends above every hash, whatever the count');
    assert.ok(sliceStart(1, 3) < sliceStart(2, 3) && sliceStart(2, 3) < HASH_RANGE);
  });

  it('moveThreshold: sqrt(2 × big × tail), at least a tail', () => {
    assert.equal(moveThreshold(0, 250_000), 250_000);
    assert.equal(moveThreshold(10_000_000, 250_000), 2_236_068);
    assert.equal(moveThreshold(100_000_000, 250_000), 7_071_068);
  });

  it('warmEventIndexes (the server at start) rebuilds both tails before any write and builds the key filter', () =>
    withDir(async (dir) => {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      let storage = await openStorage(url);
      const a = await product(storage);
      const ids = Array.from({ length: 30 }, (_, i) => `warm-${i}`);
      await storage.events.insertMany([...ids.map((id) => row(a, id)), row(a, null)]);
      await storage.close();

      storage = await openStorage(url);
      assert.equal(storage.capabilities.telemetry.eventKeyStats!().held, 0, 'nothing in memory before');
      await storage.capabilities.eventIndexes!.warm();
      assert.equal(storage.capabilities.telemetry.eventKeyStats!().held, 30, 'the keyed events after the last merge');
      assert.equal(storage.capabilities.telemetry.eventSubjectStats!().held, 31, 'every event after the last merge');
      assert.ok(storage.capabilities.telemetry.eventKeyStats!().filterBytes > 0, 'the filter is built');
      const again = await storage.events.insertMany(ids.map((id) => row(a, id)));
      assert.deepEqual(
        again.map((o) => o.status),
        ids.map(() => 'duplicate'),
      );
      await storage.close();
    }));

  it('a writer whose key filter is built still sees the keys another writer stored and merged meanwhile', () =>
    withDir(async (dir) => {
      const first = await writerOnProduct(dir, { tailKeys: 1_000_000 });
      await first.writer.insertMany([row(first.a, 'start')]);
      await first.keys.filtered();
      // The other writer stores ids and merges them into event_keys before the first one writes again.
      const second = sqliteDirectWriter(join(dir, 'inlet.db'), { tailKeys: 1_000_000 });
      const ids = Array.from({ length: 50 }, (_, i) => `other-${i}`);
      await second.writer.insertMany(ids.map((id) => row(first.a, id)));
      await second.keys.mergeNow();
      const outcomes = await first.writer.insertMany(ids.map((id) => row(first.a, id)));
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ids.map(() => 'duplicate'),
      );
      await second.close();
      await first.close();
    }));

  it('finds every key of a tail that grew past its first table (3,000 keys), then of the table after a merge', () =>
    withDir(async (dir) => {
      const { a, keys, writer, close } = await writerOnProduct(dir);
      const ids = Array.from({ length: 3000 }, (_, i) => `g${i}`);
      const groups = (list: string[]) =>
        Array.from({ length: Math.ceil(list.length / 400) }, (_, i) => list.slice(i * 400, i * 400 + 400));
      const first: string[] = [];
      for (const group of groups(ids)) {
        const outcomes = await writer.insertMany(group.map((id) => row(a, id)));
        assert.ok(outcomes.every((o) => o.status === 'created'));
        first.push(...outcomes.map((o) => o.event.id));
      }
      for (const phase of ['tail', 'table']) {
        const again: string[] = [];
        for (const group of groups(ids)) {
          const outcomes = await writer.insertMany(group.map((id) => row(a, id)));
          assert.ok(
            outcomes.every((o) => o.status === 'duplicate'),
            phase,
          );
          again.push(...outcomes.map((o) => o.event.id));
        }
        assert.deepEqual(again, first, phase);
        await keys.mergeNow();
      }
      await close();
    }));

  it('does not take into memory the rows a bulk load stored and merged itself (only rows after merged_through)', () =>
    withDir(async (dir) => {
      const { a, keys, writer, close } = await writerOnProduct(dir);
      await writer.insertMany(Array.from({ length: 10 }, (_, i) => row(a, `mine${i}`)));
      assert.equal(keys.held, 10);
      // Another connection stores 500 events and merges their keys (and this writer's) itself, as the bench's
      // prefill does.
      const bulk = new BetterSqlite3(join(dir, 'inlet.db'));
      const insert = bulk.prepare(
        `INSERT INTO events (id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties)
         VALUES (?, ${SQLITE_PRODUCT_NUMBER}, 'api', ?, NULL, NULL, (SELECT number FROM event_names WHERE canonical_name = 'order_placed'), 'preferred', 'user', 'u1', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', '{}')`,
      );
      bulk.transaction(() => {
        for (let i = 0; i < 500; i++) insert.run(uuidv7(), a, `bulk${i}`);
      })();
      mergeAllEventKeys(bulk);
      // The writer's rows carry their hashes and go straight in; the bulk rows, without, are noted by position too
      // (where a delete's trigger finds their hash).
      assert.equal(tableCount(bulk, 'event_keys'), 510);
      assert.equal(tableCount(bulk, 'event_keys_by_position'), 500);
      assert.equal(tableCount(bulk, 'event_subjects'), 510);
      bulk.close();
      const outcomes = await writer.insertMany([row(a, 'bulk7'), row(a, 'mine3'), row(a, 'new')]);
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['duplicate', 'duplicate', 'created'],
      );
      assert.equal(keys.held, 11, 'the bulk rows are found in event_keys, not copied into memory');
      await close();
    }));

  it('a merge cut off halfway (the process stopping) loses no key: the next writer rebuilds them from the rows', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const storage = await openStorage(`sqlite:${file}`);
      const a = await product(storage);
      await storage.close();
      const first = sqliteDirectWriter(file, { tailKeys: 4000 });
      const ids = Array.from({ length: 4400 }, (_, i) => `cut${i}`);
      for (let i = 0; i < ids.length; i += 400)
        await first.writer.insertMany(ids.slice(i, i + 400).map((id) => row(a, id)));
      // Stop once the merge has written part of its keys and before it moved merged_through.
      const written = () => first.raw.prepare('SELECT count(*) FROM event_keys_recent').pluck().get() as number;
      while (written() === 0) await new Promise((resolve) => setImmediate(resolve));
      await first.keys.stop();
      assert.equal(
        first.raw.prepare('SELECT merged_through FROM event_keys_state').pluck().get(),
        0,
        'cut off before its end',
      );
      await first.close();

      const second = sqliteDirectWriter(file, {});
      const again = await second.writer.insertMany(ids.map((id) => row(a, id)));
      assert.ok(again.every((o) => o.status === 'duplicate'));
      await second.keys.mergeNow();
      assert.equal(keysOnDisk(second.raw), ids.length);
      assert.equal(second.raw.prepare('SELECT merged_through FROM event_keys_state').pluck().get(), ids.length);
      await second.close();
    }));

  it('tells colliding keys apart by reading the rows back (every key hashed to one of three values)', () =>
    withDir(async (dir) => {
      // The writer with a hash that collides nearly always, over the same file.
      const { a, keys, writer, close } = await writerOnProduct(dir, {
        tailKeys: 25,
        hash: (_seed, _p, _s, externalId) => externalId.length % 3,
      });
      const ids = Array.from({ length: 120 }, (_, i) => `c${'x'.repeat(i % 5)}${i}`);
      const created = await writer.insertMany(ids.map((id) => row(a, id)));
      assert.ok(
        created.every((o) => o.status === 'created'),
        'no false duplicate under collisions',
      );
      await keys.idle();
      await keys.mergeNow();
      const again = await writer.insertMany(ids.map((id) => row(a, id)));
      assert.ok(again.every((o) => o.status === 'duplicate'));
      assert.deepEqual(
        again.map((o) => o.event.id),
        created.map((o) => o.event.id),
      );
      await close();
    }));

  it('lets a deleted event go with its key, merged or not, so the id can be stored again', () =>
    withDir(async (dir) => {
      const { a, raw, keys, writer, close } = await writerOnProduct(dir);
      const ids = Array.from({ length: 25 }, (_, i) => `d${i}`);
      await writer.insertMany(ids.slice(0, 12).map((id) => row(a, id)));
      await keys.mergeNow();
      // d0…d11 are merged into event_keys, d12…d24 are in the tail.
      await writer.insertMany(ids.slice(12).map((id) => row(a, id)));
      assert.equal(keysOnDisk(raw), 12);
      // Delete d0 (merged) and d24 (in the tail) as erasure and retention do, from another connection.
      const other = new BetterSqlite3(join(dir, 'inlet.db'));
      other.prepare(`DELETE FROM events WHERE external_id IN ('d0', 'd24')`).run();
      other.close();
      // The deletes only note the positions (no random page of event_keys per deleted row): the keys stay until
      // a sweep, and match nothing meanwhile.
      assert.equal(keysOnDisk(raw), 12);
      assert.equal(tableCount(raw, 'event_keys_gone'), 2);
      const outcomes = await writer.insertMany([row(a, 'd0'), row(a, 'd24'), row(a, 'd5'), row(a, 'd20')]);
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['created', 'created', 'duplicate', 'duplicate'],
      );
      // The merge writes the tail, d24's stale position included, and ends with a sweep: the old keys of d0 (merged
      // before its row went) and of d24 (merged now, its note kept until then) go; the new positions of both stay.
      await keys.mergeNow();
      assert.equal(keysOnDisk(raw), 25);
      assert.equal(tableCount(raw, 'event_keys_gone'), 0);
      assert.equal(
        raw.prepare(`SELECT count(*) FROM ${ON_DISK} k JOIN events e ON e.position = k.position`).pluck().get(),
        25,
      );
      assert.equal(keys.swept, 2, 'the keys of both deleted rows removed');
      await close();
    }));

  it('sweeps the keys of many deleted rows on its own (sweepMin), sorted, without a merge, and not for a few', () =>
    withDir(async (dir) => {
      const sweepMin = 3000;
      const { a, raw, keys, writer, close } = await writerOnProduct(dir, { sweepMin });
      const ids = Array.from({ length: sweepMin + 500 }, (_, i) => `s${i}`);
      for (let from = 0; from < ids.length; from += 1000)
        await writer.insertMany(ids.slice(from, from + 1000).map((id) => row(a, id)));
      await keys.mergeNow();
      assert.equal(keysOnDisk(raw), ids.length);
      const other = new BetterSqlite3(join(dir, 'inlet.db'));
      const remove = (count: number) =>
        other
          .prepare(`DELETE FROM events WHERE position IN (SELECT position FROM events ORDER BY position LIMIT ?)`)
          .run(count);
      remove(10);
      await keys.sweepIfMany();
      assert.equal(keysOnDisk(raw), ids.length, 'ten deleted rows wait for the next merge');
      remove(sweepMin);
      await keys.sweepIfMany();
      other.close();
      assert.equal(keys.swept, sweepMin + 10);
      assert.equal(keysOnDisk(raw), 490);
      assert.equal(tableCount(raw, 'event_keys_gone'), 0);
      assert.equal(
        raw.prepare(`SELECT count(*) FROM ${ON_DISK} k JOIN events e ON e.position = k.position`).pluck().get(),
        490,
      );
      // Every remaining id is still a duplicate, every deleted one can be stored again.
      const outcomes = await writer.insertMany([
        row(a, ids[0]!),
        row(a, ids[sweepMin + 9]!),
        row(a, ids[sweepMin + 10]!),
        row(a, ids.at(-1)!),
      ]);
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['created', 'created', 'duplicate', 'duplicate'],
      );
      await close();
    }));

  it('a tail that fills during a sweep is merged once the sweep has ended, and no key is left behind', () =>
    withDir(async (dir) => {
      const { a, raw, keys, writer, close } = await writerOnProduct(dir, { tailKeys: 50 });
      await writer.insertMany(Array.from({ length: 40 }, (_, i) => row(a, `w${i}`)));
      await keys.mergeNow();
      const other = new BetterSqlite3(join(dir, 'inlet.db'));
      other
        .prepare(`DELETE FROM events WHERE position IN (SELECT position FROM events ORDER BY position LIMIT 20)`)
        .run();
      other.close();
      const sweeping = keys.mergeNow(); // nothing in the tail: a sweep
      await writer.insertMany(Array.from({ length: 60 }, (_, i) => row(a, `v${i}`))); // fills the tail meanwhile
      await sweeping;
      while (keys.merges < 2) await new Promise((resolve) => setTimeout(resolve, 5));
      await keys.idle();
      assert.equal(keys.swept, 20);
      assert.equal(keysOnDisk(raw), 80);
      assert.equal(tableCount(raw, 'event_keys_gone'), 0);
      assert.equal(
        raw.prepare(`SELECT count(*) FROM ${ON_DISK} k JOIN events e ON e.position = k.position`).pluck().get(),
        80,
      );
      await close();
    }));

  it('a tail that fills while a merge runs goes on in generations of its size, all found, then merged at once', () =>
    withDir(async (dir) => {
      const { a, raw, keys, subjects, writer, close } = await writerOnProduct(dir, { tailKeys: 50 });
      await writer.insertMany(Array.from({ length: 40 }, (_, i) => row(a, `m${i}`)));
      const merging = keys.mergeNow();
      // 130 keys while the 40 are merged: two full generations of 50 and a third of 30.
      await writer.insertMany(Array.from({ length: 130 }, (_, i) => row(a, `n${i}`)));
      assert.equal(keys.held, 170, 'the merging keys are still held');
      const again = await writer.insertMany([row(a, 'm3'), row(a, 'n0'), row(a, 'n77'), row(a, 'n129')]);
      assert.ok(again.every((o) => o.status === 'duplicate'));
      // One subject for all: its chain runs through every generation.
      assert.equal((await subjects.subjectPositions(a, ['u1'], { order: 'asc' })).length, 170);
      await merging;
      while (keys.merges < 2) await new Promise((resolve) => setTimeout(resolve, 5));
      await keys.idle();
      assert.equal(keys.merges, 2, 'the 130 keys in one merge');
      assert.equal(keys.held, 0);
      assert.equal(keysOnDisk(raw), 170);
      // A new tail: every key still found, new ones stored.
      const more = await writer.insertMany([row(a, 'm39'), row(a, 'n100'), row(a, 'fresh')]);
      assert.deepEqual(
        more.map((o) => o.status),
        ['duplicate', 'duplicate', 'created'],
      );
      await close();
    }));

  it('migration 804: rows carry their hashes, notes take them (or the by-position entry of an older row), and sweeps remove those keys', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const { raw, db, productId, insert, migrateAll } = await fileBefore(file, 800);
      for (let i = 0; i < 20; i++) insert(`m${i}`);
      // Up to 803: the keys and their by-position entries are written; two rows go and leave notes of positions
      // only; two more rows come after the last merge (a tail's worth, as a running server leaves behind).
      await migrateAll(804);
      raw.prepare(`DELETE FROM events WHERE external_id IN ('m3', 'm4')`).run();
      for (let i = 20; i < 22; i++) insert(`m${i}`);
      assert.equal(tableCount(raw, 'event_keys_gone'), 2);
      await migrateAll();
      const seed = raw.prepare('SELECT seed FROM event_keys_state').pluck().get() as number;
      assert.deepEqual(raw.prepare('SELECT h FROM event_keys_gone ORDER BY position').pluck().all(), [
        keyHash(seed, productId, 'api', 'm3'),
        keyHash(seed, productId, 'api', 'm4'),
      ]);
      // The rows after the last merge got their hashes; the older ones have theirs by position.
      assert.deepEqual(
        raw
          .prepare(
            `SELECT external_id, key_hash, subject_hash FROM events WHERE key_hash IS NOT NULL ORDER BY position`,
          )
          .all(),
        [
          {
            external_id: 'm20',
            key_hash: keyHash(seed, productId, 'api', 'm20'),
            subject_hash: subjectHash(keyHash, seed, productId, 'u1'),
          },
          {
            external_id: 'm21',
            key_hash: keyHash(seed, productId, 'api', 'm21'),
            subject_hash: subjectHash(keyHash, seed, productId, 'u1'),
          },
        ],
      );
      // An older row deleted after the migration: its note finds the hash by position.
      raw.prepare(`DELETE FROM events WHERE external_id = 'm5'`).run();
      assert.equal(
        raw.prepare(`SELECT h FROM event_keys_gone ORDER BY position DESC LIMIT 1`).pluck().get(),
        keyHash(seed, productId, 'api', 'm5'),
      );
      await db.destroy();

      const { keys, subjects, writer, close, raw: own } = sqliteDirectWriter(file, { sweepMin: 1 });
      const [fresh] = await writer.insertMany([row(productId, 'fresh')]);
      // A row the writer stores carries its hashes, and so does its note once it is deleted.
      const stored = own
        .prepare(`SELECT position, key_hash, subject_hash FROM events WHERE id = unhex(replace(?, '-', ''))`)
        .get(fresh!.event.id) as { position: number; key_hash: number; subject_hash: number };
      assert.equal(stored.key_hash, keyHash(seed, productId, 'api', 'fresh'));
      assert.equal(stored.subject_hash, subjectHash(keyHash, seed, productId, 'u1'));
      await keys.mergeNow();
      await subjects.mergeNow();
      own.prepare(`DELETE FROM events WHERE external_id IN ('fresh', 'm21')`).run();
      assert.deepEqual(
        own
          .prepare(`SELECT h FROM event_keys_gone WHERE position >= ? ORDER BY position`)
          .pluck()
          .all(stored.position - 1),
        [keyHash(seed, productId, 'api', 'm21'), keyHash(seed, productId, 'api', 'fresh')],
      );
      await keys.sweepIfMany();
      await subjects.sweepIfMany();
      assert.equal(
        keys.swept,
        5,
        'the keys of m3 and m4 (hash kept by the migration), m5 (by position), m21 and fresh (from the row)',
      );
      assert.equal(subjects.swept, 5);
      assert.equal(tableCount(own, 'event_keys_gone'), 0);
      assert.equal(tableCount(own, 'event_subjects_gone'), 0);
      assert.equal(tableCount(own, ON_DISK), 18);
      assert.equal(tableCount(own, 'event_keys_by_position'), 17, 'the swept older rows leave it too');
      const outcomes = await writer.insertMany(
        ['m3', 'm5', 'm21', 'fresh', 'm6', 'm20'].map((id) => row(productId, id)),
      );
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['created', 'created', 'created', 'created', 'duplicate', 'duplicate'],
      );
      await close();
    }));

  it('the migration writes the keys of the events stored before it and drops the unique index', () =>
    withDir(async (dir) => {
      const { raw, db, productId, insert, migrateAll } = await fileBefore(join(dir, 'inlet.db'), 800);
      for (let i = 0; i < 50; i++) insert(i % 10 === 0 ? null : `old-${i}`);
      await migrateAll();
      const state = raw.prepare('SELECT seed, merged_through FROM event_keys_state').get() as {
        seed: number;
        merged_through: number;
      };
      assert.equal(state.merged_through, 50);
      const stored = raw.prepare('SELECT h, position FROM event_keys ORDER BY position').all() as Array<{
        h: number;
        position: number;
      }>;
      assert.equal(stored.length, 45);
      assert.equal(
        stored[0]!.h,
        keyHash(state.seed, productId, 'api', 'old-1'),
        'the hash of the SQL function is the writer’s',
      );
      assert.equal(raw.prepare(`SELECT count(*) AS n FROM sqlite_master WHERE name = 'events_dedup'`).pluck().get(), 0);
      await db.destroy();

      const storage = await openStorage(`sqlite:${join(dir, 'inlet.db')}`);
      const outcomes = await storage.events.insertMany([row(productId, 'old-7'), row(productId, 'new-1')]);
      assert.deepEqual(
        outcomes.map((o) => o.status),
        ['duplicate', 'created'],
      );
      await storage.close();
    }));
});
