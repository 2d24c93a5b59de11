// Which writer stores the events of a SQLite storage: in-process (event-writer.ts) at first, then the writer
// thread (writer-thread.ts) once enough events were written, and in-process again should the thread die.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';
import type { EventInsert, EventKeyStats, InsertOutcome } from '../types.js';
import type { EventKeys } from './event-keys.js';
import { insertOutcomes, sqliteEventWriter } from './event-writer.js';
import type { WalSync } from './wal-sync.js';
import { WriterThread, type WriterSetup } from './writer-thread.js';

export interface EventWritingOptions {
  db: Kysely<Database>;
  raw: BetterSqlite3.Database;
  /** A fresh idempotency key index on the server's connection (the in-process writer's). */
  makeKeys: () => EventKeys;
  subjects: EventKeys;
  walSync: WalSync | undefined;
  /** The thread's connection; undefined: never a thread (an in-memory database). */
  thread: WriterSetup | undefined;
  /** Events stored in-process before the thread starts (Infinity: never). */
  after: number;
}

export interface EventWriting {
  insertMany(rows: EventInsert[]): Promise<InsertOutcome[]>;
  keyStats(): EventKeyStats;
  warm(): Promise<void>;
  settle(): Promise<void>;
  /** The running thread, for the checkpoint thread's restart copy (undefined: the server's connection copies). */
  thread(): WriterThread | undefined;
  close(): Promise<void>;
}

const ZERO: EventKeyStats = {
  held: 0,
  merges: 0,
  mergeSeconds: 0,
  moves: 0,
  swept: 0,
  sweepSeconds: 0,
  busySeconds: 0,
  filterBytes: 0,
};

/** The counters of the writers retired so far, plus the current one's (metrics' counters never go down); the
 *  gauges (held, filterBytes) are the current one's. */
function withRetired(retired: EventKeyStats, current: EventKeyStats): EventKeyStats {
  return {
    held: current.held,
    merges: retired.merges + current.merges,
    mergeSeconds: retired.mergeSeconds + current.mergeSeconds,
    moves: retired.moves + current.moves,
    swept: retired.swept + current.swept,
    sweepSeconds: retired.sweepSeconds + current.sweepSeconds,
    busySeconds: retired.busySeconds + current.busySeconds,
    filterBytes: current.filterBytes,
  };
}

export function sqliteEventWriting(options: EventWritingOptions): EventWriting {
  const { db, raw, subjects, walSync } = options;
  const { after } = options;
  let keys = options.makeKeys();
  let local = sqliteEventWriter(db, raw, { keys, subjects }, walSync);
  let written = 0;
  let running: WriterThread | undefined;
  let starting: Promise<void> | undefined;
  let failed = false;
  let closing = false;
  const retired: EventKeys[] = [];
  let retiredStats = ZERO;

  const start = async (setup: WriterSetup): Promise<void> => {
    // The subject index reads its state before the thread's answers add to it.
    await db.connection().execute(async () => subjects.catchUp());
    const thread = await WriterThread.start(setup, () => {
      if (running !== thread || closing) return;
      // Gone: its commits in flight were failed as unavailable; the in-process writer takes over with a fresh key
      // index, whose first transaction reads the keys of every row the thread stored.
      running = undefined;
      failed = true;
      retiredStats = withRetired(retiredStats, thread.stats ?? ZERO);
      keys = options.makeKeys();
      local = sqliteEventWriter(db, raw, { keys, subjects }, walSync);
    });
    if (closing) return thread.stop();
    // The in-process writer's keys are the thread's now (it read them from the rows); no more merges here.
    await keys.stop();
    retiredStats = withRetired(retiredStats, keys.stats());
    retired.push(keys);
    running = thread;
  };

  const viaThread = async (thread: WriterThread, rows: EventInsert[]): Promise<InsertOutcome[]> => {
    const { outcomes, subjects: pairs, last } = await thread.write(rows);
    const added: Array<[number, number]> = new Array<[number, number]>(pairs.length / 2);
    for (let i = 0; i < added.length; i++) added[i] = [pairs[2 * i]!, pairs[2 * i + 1]!];
    subjects.committed(added, last);
    return insertOutcomes(rows, outcomes);
  };

  return {
    insertMany(rows) {
      if (rows.length === 0) return Promise.resolve([]);
      if (running !== undefined) return viaThread(running, rows);
      written += rows.length;
      if (options.thread !== undefined && !failed && !closing && starting === undefined && written >= after) {
        starting = start(options.thread).catch((error: unknown) => {
          failed = true;
          process.emitWarning(`the SQLite writer thread did not start (events stay in-process): ${String(error)}`);
        });
      }
      return local.insertMany(rows);
    },
    keyStats: () => withRetired(retiredStats, running === undefined ? keys.stats() : (running.stats ?? ZERO)),
    async warm() {
      await db.connection().execute(async () => subjects.catchUp(running === undefined ? keys.catchUp() : undefined));
      if (running !== undefined) await running.request('warm');
      else await keys.filtered();
    },
    async settle() {
      await Promise.all([running?.request('settle') ?? keys.settle(), subjects.settle()]);
    },
    thread: () => running,
    async close() {
      closing = true;
      await starting;
      await running?.stop();
      await keys.stop();
      for (const index of retired) await index.stop();
    },
  };
}
