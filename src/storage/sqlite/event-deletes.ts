// Erasure's and retention's event deletes on SQLite (erasure/event-deletes.ts). `secure_delete` is on for the
// connection (sqlite/backend.ts), so a deleted row's bytes are zeroed in the page instead of left in free space;
// `reclaim` then empties the WAL into the file (TRUNCATE checkpoint), whose older frames still held the rows.
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../database.js';
import { positionSql } from '../event-position.js';
import type { EventDeletes } from '../erasure/event-deletes.js';
import { list } from '../erasure/tables.js';
import type { EventKeys } from './event-keys.js';

const { product, code } = positionSql('sqlite');

/** The longest a background batch waits for room in the WAL (roomToWrite): bounds how much it can slow a job. */
const ROOM_WAIT_MS = 1000;

/** `work` on the connection (its mutex held), its statements committed without waiting for their fsync:
 *  see deleteWhere. */
function unsyncedOnConnection<R>(db: Kysely<Database>, work: (conn: Kysely<Database>) => Promise<R>): Promise<R> {
  return db.connection().execute(async (conn) => {
    const mode = await sql<{ synchronous: number }>`PRAGMA synchronous`.execute(conn);
    const previous = Number(mode.rows[0]?.synchronous ?? 2);
    if (previous > 1) await sql`PRAGMA synchronous = NORMAL`.execute(conn);
    try {
      return await work(conn);
    } finally {
      if (previous > 1) await sql.raw(`PRAGMA synchronous = ${previous}`).execute(conn);
    }
  });
}

function deleteWhere(
  db: Kysely<Database>,
  productId: string,
  where: RawBuilder<unknown>,
  limit: number,
): Promise<number> {
  // A batch commits without waiting for its fsync (synchronous=NORMAL for this statement only, inside
  // the connection's mutex so no ingest commit runs meanwhile): at synchronous=FULL the fsync was a
  // third of a small batch's time (measured: 40-row batches at 1 M events, 189 → 142 µs per row), and
  // batches are kept small for ingest's sake. Durability is not lost, only deferred: the WAL is
  // appended in order and the next FULL commit (any ingest commit, or the job saving its progress)
  // fsyncs these frames with its own; a crash before that loses some deletions, which the resumed job
  // (or the next retention pass) simply deletes again.
  return unsyncedOnConnection(db, async (conn) => {
    const result =
      await sql`DELETE FROM events WHERE position IN (SELECT position FROM events WHERE product_id = ${product(productId)} AND ${where} LIMIT ${limit})`.execute(
        conn,
      );
    return Number(result.numAffectedRows ?? 0);
  });
}

/**
 * Up to `limit` of the product's events whose subject is `user` and one of `externalIds`, through the subject
 * index (sqlite/event-keys.ts), oldest first; their index entries go with them. Positions whose rows do not match
 * (another subject type, a shared hash, a row deleted and not yet swept) are stepped over.
 */
async function deleteBySubjects(
  db: Kysely<Database>,
  index: EventKeys,
  productId: string,
  externalIds: string[],
  limit: number,
): Promise<number> {
  for (let after = 0; ;) {
    const { deleted, positions } = await unsyncedOnConnection(db, async (conn) => {
      const positions = index.subjectPositionsLocked(productId, externalIds, { after, order: 'asc', limit });
      if (positions.length === 0) return { deleted: [] as number[], positions };
      const gone = await sql<{ position: number }>`DELETE FROM events
        WHERE position IN (SELECT value FROM json_each(${JSON.stringify(positions)})) AND +product_id = ${product(productId)}
          AND subject_type = ${code('subject_type', 'user')} AND subject_id IN ${list(externalIds)}
        RETURNING position`.execute(conn);
      const deleted = gone.rows.map((r) => Number(r.position));
      index.forgetLocked(productId, externalIds, deleted);
      return { deleted, positions };
    });
    if (deleted.length > 0 || positions.length < limit) return deleted.length;
    after = positions[positions.length - 1]!;
  }
}

/**
 * A TRUNCATE checkpoint. A reader (another connection: the delivery worker, another process) can keep it from
 * finishing: tried again for a while, waiting between tries on the event loop. Each try runs without the busy
 * handler (busy_timeout 0, restored after), which would otherwise sleep synchronously for up to the connection's
 * 5 s on every try, with every request of the server waiting behind it.
 */
async function checkpointTruncate(db: Kysely<Database>): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const busy = await db.connection().execute(async (conn) => {
      const timeout = Number((await sql<{ timeout: number }>`PRAGMA busy_timeout`.execute(conn)).rows[0]?.timeout ?? 0);
      await sql`PRAGMA busy_timeout = 0`.execute(conn);
      try {
        const result = await sql<{ busy: number }>`PRAGMA wal_checkpoint(TRUNCATE)`.execute(conn);
        return Number(result.rows[0]?.busy ?? 0) !== 0;
      } finally {
        await sql.raw(`PRAGMA busy_timeout = ${timeout}`).execute(conn);
      }
    });
    if (!busy) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('the WAL checkpoint stayed busy for 5 s (a reader holds it); the job retries it');
}

/**
 * `subjects`: the subject index (there is no index on the events' subject columns on SQLite). `roomInWal` (with
 * the checkpoint thread): resolves when the WAL has room for a background batch (sqlite/checkpointer.ts), waiting
 * at most the given time.
 */
export function sqliteEventDeletes(
  db: Kysely<Database>,
  subjects: EventKeys,
  roomInWal?: (maxMs: number) => Promise<void>,
): EventDeletes {
  return {
    where: (productId, where, limit) => deleteWhere(db, productId, where, limit),
    ofSubjects: (productId, externalIds, limit) => deleteBySubjects(db, subjects, productId, externalIds, limit),
    reclaim: () => checkpointTruncate(db),
    async roomToWrite() {
      await roomInWal?.(ROOM_WAIT_MS);
    },
  };
}
