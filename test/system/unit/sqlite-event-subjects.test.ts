// SQLite's subject index (src/storage/sqlite/event-keys.ts, kind `subjects`; migration 802; docs/design.md
// "Subjects on SQLite"): reads, lists and erasures by subject find every event of the subject and nothing else,
// in position order, whether its entry is in the tail, a merge in progress or event_subjects, across restarts,
// from a second connection that never wrote, and under hash collisions; erased rows' entries leave; the migration
// writes the entries of the events stored before it and drops the index on events.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { uuidv7 } from '../../../src/domain/ids.js';
import { SQLITE_PRODUCT_NUMBER } from '../../../src/storage/event-columns.js';
import { SUBJECT_TYPE_CODES } from '../../../src/storage/database.js';
import { openStorage, type OpenedStorage } from '../../../src/storage/connect.js';
import { erasureStore } from '../../../src/storage/erasure-store.js';
import { sqliteStoreDialect } from '../../../src/storage/sqlite/store-dialect.js';
import { sqliteEventDeletes } from '../../../src/storage/sqlite/event-deletes.js';
import { eventReads } from '../../../src/storage/event-reads.js';
import { keyHash, subjectHash } from '../../../src/storage/sqlite/event-keys.js';
import type { EventFilter, EventInsert } from '../../../src/storage/types.js';
import { eventRow, fileBefore, sqliteDirectWriter } from '../../event-rows.js';

/** A row's subject type as its text (SQLite stores a known one's code: migration 856). */
const SUBJECT_TYPE_TEXT = SUBJECT_TYPE_CODES.text('subject_type');

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'inlet-event-subjects-'));
  return test(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

/** A deterministic generator (mulberry32): the same events every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SUBJECTS = ['s0', 's1', 's2', 's3', 's4', 's5', 's6'];

/** Every entry on disk: both levels (event_subjects_recent, which merges write, and event_subjects). */
const SUBJECTS_ON_DISK =
  '(SELECT h, position FROM event_subjects_recent UNION ALL SELECT h, position FROM event_subjects)';

function subjectRow(productId: string, subjectType: string, subjectId: string): EventInsert {
  return { ...eventRow(productId, null), subjectType, subjectId };
}

type Reads = Pick<OpenedStorage['events'], 'page'>;

/** Every event the filter's subject ids and type match, paged `limit` at a time in `order`: their positions. */
async function pagedPositions(
  reads: Reads,
  productId: string,
  filter: EventFilter,
  order: 'asc' | 'desc',
  limit: number,
): Promise<number[]> {
  const positions: number[] = [];
  let after: string | undefined;
  for (let pages = 0; pages < 1000; pages++) {
    const page = await reads.page({ productId, filter, order, limit, ...(after === undefined ? {} : { after }) });
    assert.ok(page.events.length <= limit);
    for (const event of page.events) {
      assert.ok(filter.subjectIds!.includes(event.subjectId), `subject ${event.subjectId} asked for`);
      if (filter.subjectType !== undefined) assert.equal(event.subjectType, filter.subjectType);
      positions.push(Number(event.position));
    }
    if (page.next === null) return positions;
    after = page.next;
  }
  throw new Error('more than 1000 pages');
}

/** What the reads must return: every row of the product with these subjects, from events itself. */
function expectedPositions(
  raw: BetterSqlite3.Database,
  productId: string,
  subjectIds: string[],
  subjectType: string | undefined,
  order: 'asc' | 'desc',
): number[] {
  const rows = raw
    .prepare(
      `SELECT position, ${SUBJECT_TYPE_TEXT} AS type, subject_id AS id FROM events WHERE product_id = ${SQLITE_PRODUCT_NUMBER} ORDER BY position`,
    )
    .all(productId) as Array<{ position: number; type: string; id: string }>;
  const matching = rows
    .filter((r) => subjectIds.includes(r.id) && (subjectType === undefined || r.type === subjectType))
    .map((r) => r.position);
  return order === 'asc' ? matching : matching.reverse();
}

/** Reads by each subject (with and without a type, both orders, small pages) and by two subjects at once agree with events. */
async function checkAll(reads: Reads, raw: BetterSqlite3.Database, productId: string, limit: number): Promise<void> {
  for (const subjectType of [undefined, 'user', 'anonymous']) {
    for (const order of ['asc', 'desc'] as const) {
      for (const ids of [...SUBJECTS.map((s) => [s]), ['s1', 's2'], ['s0', 'nobody']]) {
        const filter: EventFilter = { subjectIds: ids, ...(subjectType === undefined ? {} : { subjectType }) };
        assert.deepEqual(
          await pagedPositions(reads, productId, filter, order, limit),
          expectedPositions(raw, productId, ids, subjectType, order),
          `${ids} ${subjectType} ${order}`,
        );
      }
    }
  }
}

async function product(storage: OpenedStorage, name = 'subjects'): Promise<string> {
  const id = uuidv7();
  await storage.products.create({ id, name, createdAt: new Date().toISOString() });
  return id;
}

describe('SQLite subject index', () => {
  it('reads by subject find every event in order, from the tail, during and after merges, and after a restart', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const url = `sqlite:${file}`;
      // A tail of 40 entries: a merge every few groups.
      let storage = await openStorage(url, { sqliteEventKeysTail: 40 });
      const a = await product(storage, 'a');
      const b = await product(storage, 'b');
      const raw = new BetterSqlite3(file, { readonly: true });
      const next = random(11);
      for (let group = 0; group < 60; group++) {
        const rows = Array.from({ length: 1 + Math.floor(next() * 12) }, () =>
          subjectRow(
            next() < 0.7 ? a : b,
            next() < 0.75 ? 'user' : 'anonymous',
            SUBJECTS[Math.floor(next() * SUBJECTS.length)]!,
          ),
        );
        await storage.events.insertMany(rows);
        // Read while merges run (they yield between their transactions): nothing is missed or doubled.
        if (group % 6 === 5) {
          const ids = [SUBJECTS[group % SUBJECTS.length]!];
          assert.deepEqual(
            await pagedPositions(storage.events, a, { subjectIds: ids }, 'asc', 4),
            expectedPositions(raw, a, ids, undefined, 'asc'),
            `group ${group}`,
          );
        }
      }
      await checkAll(storage.events, raw, a, 5);
      await checkAll(storage.events, raw, b, 3);
      // Some merges moved the recent level into event_subjects (moveThreshold), so the reads above read both levels.
      assert.ok(
        storage.capabilities.telemetry.eventSubjectStats!().moves > 0,
        `moves ${storage.capabilities.telemetry.eventSubjectStats!().moves}`,
      );
      await storage.close();

      storage = await openStorage(url, { sqliteEventKeysTail: 40 });
      const state = raw.prepare('SELECT subjects_merged_through AS merged FROM event_keys_state').get() as {
        merged: number;
      };
      const last = raw.prepare('SELECT max(position) FROM events').pluck().get() as number;
      assert.ok(
        state.merged > 0 && state.merged < last,
        `some entries merged (through ${state.merged} of ${last}), some only in the tail`,
      );
      await checkAll(storage.events, raw, a, 7);
      // The user's events (identity reads): newest first by occurred_at, across the tail and the table.
      const listed = await storage.events.listBySubjects(a, 'user', ['s1', 's3'], 1000);
      assert.deepEqual(
        listed.map((e) => Number(e.position)).sort((x, y) => x - y),
        expectedPositions(raw, a, ['s1', 's3'], 'user', 'asc'),
      );
      raw.close();
      await storage.close();
    }));

  it('a second connection that never wrote reads the events the writer holds only in memory', () =>
    withDir(async (dir) => {
      const url = `sqlite:${join(dir, 'inlet.db')}`;
      const writer = await openStorage(url);
      const a = await product(writer);
      await writer.events.insertMany(SUBJECTS.map((s) => subjectRow(a, 'user', s)));
      const reader = await openStorage(url);
      const first = await reader.events.page({ productId: a, filter: { subjectIds: ['s3'] }, order: 'asc', limit: 10 });
      assert.deepEqual(
        first.events.map((e) => e.subjectId),
        ['s3'],
      );
      // Written after the reader took in the writer's rows: found at its next read.
      await writer.events.insertMany([subjectRow(a, 'user', 's3'), subjectRow(a, 'user', 's4')]);
      const second = await reader.events.page({
        productId: a,
        filter: { subjectIds: ['s3'] },
        order: 'desc',
        limit: 10,
      });
      assert.deepEqual(
        second.events.map((e) => Number(e.position)),
        [8, 4],
      );
      await reader.close();
      await writer.close();
    }));

  it('tells subjects that share a hash apart by reading the rows back (every subject hashed to one of two values)', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const storage = await openStorage(`sqlite:${file}`);
      const a = await product(storage);
      await storage.close();
      const hash = (seed: number, p: string, s: string, e: string) => keyHash(seed, p, s, e) % 2;
      const { raw, db, subjects, writer, close } = sqliteDirectWriter(file, { tailKeys: 25, hash });
      const reads = eventReads(db, 'sqlite', raw, subjects);
      const next = random(5);
      for (let group = 0; group < 20; group++) {
        await writer.insertMany(
          Array.from({ length: 7 }, () =>
            subjectRow(a, next() < 0.5 ? 'user' : 'anonymous', SUBJECTS[Math.floor(next() * SUBJECTS.length)]!),
          ),
        );
      }
      await subjects.mergeNow();
      assert.equal(raw.prepare(`SELECT count(DISTINCT h) FROM ${SUBJECTS_ON_DISK}`).pluck().get(), 2);
      await writer.insertMany(SUBJECTS.map((s) => subjectRow(a, 'user', s)));
      await checkAll(reads, raw, a, 4);
      await close();
    }));

  it('an erasure deletes the subject’s events through the index, stepping over other types, and their entries go', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const storage = await openStorage(`sqlite:${file}`);
      const a = await product(storage);
      await storage.close();
      const { raw, db, subjects, writer, close } = sqliteDirectWriter(file, { tailKeys: 30 });
      const erasure = erasureStore(db, sqliteStoreDialect(), sqliteEventDeletes(db, subjects));
      // s1 as an anonymous subject first (not the person: an erasure takes the user's events), then as the user,
      // the user's events partly merged into the table and partly in the tail.
      await writer.insertMany(Array.from({ length: 12 }, () => subjectRow(a, 'anonymous', 's1')));
      for (let i = 0; i < 5; i++)
        await writer.insertMany([
          subjectRow(a, 'user', 's1'),
          subjectRow(a, 'user', 's2'),
          subjectRow(a, 'user', 's1'),
        ]);
      await subjects.mergeNow();
      await writer.insertMany([subjectRow(a, 'user', 's1'), subjectRow(a, 'anonymous', 's1')]);
      let batches = 0;
      let deleted = 0;
      for (let n = await erasure.deleteEvents(a, ['s1'], 4); n > 0; n = await erasure.deleteEvents(a, ['s1'], 4)) {
        deleted += n;
        batches++;
      }
      assert.equal(deleted, 11);
      assert.ok(batches >= 3, `batches of at most 4 (${batches})`);
      const left = raw
        .prepare(
          `SELECT ${SUBJECT_TYPE_TEXT} || ':' || subject_id AS s, count(*) AS n FROM events GROUP BY 1 ORDER BY 1`,
        )
        .all();
      assert.deepEqual(left, [
        { s: 'anonymous:s1', n: 13 },
        { s: 'user:s2', n: 5 },
      ]);
      // The erased rows' entries left the table at once; the sweep takes their notes.
      const h = subjects.hashSubject(a, 's1');
      assert.equal(
        raw
          .prepare(
            `SELECT count(*) FROM ${SUBJECTS_ON_DISK} s LEFT JOIN events e ON e.position = s.position WHERE s.h = ? AND e.position IS NULL`,
          )
          .pluck()
          .get(h),
        0,
      );
      await subjects.mergeNow();
      assert.equal(raw.prepare(`SELECT count(*) FROM ${SUBJECTS_ON_DISK}`).pluck().get(), 18);
      assert.equal(raw.prepare('SELECT count(*) FROM event_subjects_gone').pluck().get(), 0);
      const reads = eventReads(db, 'sqlite', raw, subjects);
      assert.deepEqual(
        await pagedPositions(reads, a, { subjectIds: ['s1'] }, 'asc', 5),
        expectedPositions(raw, a, ['s1'], undefined, 'asc'),
      );
      await close();
    }));

  it('the migration writes the entries of the events stored before it and drops the index on events', () =>
    withDir(async (dir) => {
      const file = join(dir, 'inlet.db');
      const { raw, db, productId, insert, migrateAll } = await fileBefore(file, 802);
      for (let i = 0; i < 50; i++) insert(null, SUBJECTS[i % SUBJECTS.length]);
      await migrateAll();
      const state = raw.prepare('SELECT seed, subjects_merged_through AS merged FROM event_keys_state').get() as {
        seed: number;
        merged: number;
      };
      assert.equal(state.merged, 50);
      assert.equal(raw.prepare('SELECT count(*) FROM event_subjects').pluck().get(), 50);
      const first = raw.prepare('SELECT h FROM event_subjects WHERE position = 1').pluck().get();
      assert.equal(
        first,
        subjectHash(keyHash, state.seed, productId, 's0'),
        'the hash of the SQL function is the writer’s',
      );
      assert.equal(raw.prepare(`SELECT count(*) FROM sqlite_master WHERE name = 'events_by_subject'`).pluck().get(), 0);
      await db.destroy();

      const storage = await openStorage(`sqlite:${file}`);
      await storage.events.insertMany([subjectRow(productId, 'user', 's2')]);
      const check = new BetterSqlite3(file, { readonly: true });
      await checkAll(storage.events, check, productId, 3);
      check.close();
      await storage.close();
    }));
});
