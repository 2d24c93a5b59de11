// The writer thread's entry (writer-thread.ts starts it): a connection of its own to the SQLite file that runs
// every event commit (event-writer.ts's transaction, the idempotency keys of event-keys.ts with their merges and
// sweeps, the WAL's sync) so that the server's event loop only parses, validates and answers.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import { leaveCheckpointsToThread } from './checkpointer.js';
import { EventKeys, registerEventKeyFunction } from './event-keys.js';
import { eventTransaction, FLAT_ROWS, type SubjectSink } from './event-writer.js';
import { tune } from './tune.js';
import { WalSync, withoutCommitSync } from './wal-sync.js';
import type { WriterReply, WriterRequest, WriterSetup } from './writer-thread.js';

function errorOf(error: unknown): { message: string; code?: string } {
  const code = (error as { code?: unknown } | null)?.code;
  return { message: (error as Error)?.message ?? String(error), ...(typeof code === 'string' ? { code } : {}) };
}

function serve(setup: WriterSetup, port: MessagePort): void {
  const raw = new BetterSqlite3(setup.path);
  tune(raw, setup);
  registerEventKeyFunction(raw);
  if (setup.checkpointThread) leaveCheckpointsToThread(raw);
  const synchronous = setup.sqliteSynchronous === 'normal' ? 'NORMAL' : 'FULL';
  const walSync = setup.syncOffLoop ? new WalSync(`${setup.path}-wal`) : undefined;
  const unsynced = walSync === undefined ? undefined : withoutCommitSync(raw, 'FULL');
  // Writes are synchronous here, so background work (merges, sweeps) never lands inside one.
  const keys = new EventKeys(raw, {
    kind: 'keys',
    exclusive: (work) => Promise.resolve().then(work),
    synchronous,
    ...(setup.tailKeys === undefined ? {} : { tailKeys: setup.tailKeys }),
    onMergeError: (error) =>
      process.emitWarning(`merging SQLite event keys failed (tried again later): ${(error as Error).message}`),
  });
  // The subjects' hashes go back to the server's subject index with the answer.
  let subjects: Array<[number, number]> = [];
  let last = 0;
  const sink: SubjectSink = {
    catchUp: () => {},
    hashSubject: (productId, subjectId) => keys.hashSubject(productId, subjectId),
    committed: (pairs, position) => {
      subjects = pairs;
      last = position;
    },
  };
  const write = eventTransaction(raw, keys, sink, FLAT_ROWS);
  // Answers leave in the order of the commits, so the server's subject index takes them in position order.
  let answered: Promise<void> = Promise.resolve();
  const answer = (after: Promise<unknown> | undefined, reply: () => WriterReply, id: number) => {
    // Handled now, answered in its turn.
    after?.catch(() => {});
    answered = answered
      .then(() => after)
      .then(
        () => {
          const message = reply();
          port.postMessage(message, message.subjects === undefined ? [] : [message.subjects.buffer as ArrayBuffer]);
        },
        (error: unknown) => port.postMessage({ id, error: errorOf(error) } satisfies WriterReply),
      );
  };

  const handle = async (request: WriterRequest): Promise<void> => {
    const { id } = request;
    if (request.write !== undefined) {
      let synced: Promise<void> | undefined;
      let reply: () => WriterReply;
      try {
        subjects = [];
        const outcomes = unsynced === undefined ? write(request.write) : unsynced(() => write(request.write!));
        const pairs = new Float64Array(subjects.length * 2);
        subjects.forEach(([h, position], i) => {
          pairs[2 * i] = h;
          pairs[2 * i + 1] = position;
        });
        const duplicates: Array<[number, unknown]> = [];
        outcomes.forEach((stored, i) => stored !== undefined && duplicates.push([i, stored]));
        const at = last;
        // Also when every row was a duplicate: "already stored" must be true when it is said.
        synced = walSync?.sync();
        reply = () => ({ id, duplicates, subjects: pairs, last: at, stats: keys.stats() });
      } catch (error) {
        reply = () => ({ id, error: errorOf(error) });
      }
      answer(synced, reply, id);
    } else if (request.checkpoint === true) {
      await walSync?.sync();
      const [result] = raw.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number; checkpointed: number }>;
      answer(undefined, () => ({ id, checkpoint: result ?? { log: -1, checkpointed: -1 } }), id);
    } else if (request.autocheckpoint !== undefined) {
      raw.pragma(`wal_autocheckpoint = ${request.autocheckpoint}`);
      answer(undefined, () => ({ id }), id);
    } else if (request.warm === true) {
      keys.catchUp();
      await keys.filtered();
      answer(undefined, () => ({ id, stats: keys.stats() }), id);
    } else if (request.settle === true) {
      await keys.settle();
      answer(undefined, () => ({ id, stats: keys.stats() }), id);
    } else if (request.stop === true) {
      await answered;
      await keys.stop();
      await walSync?.close();
      raw.close();
      port.postMessage({ id, stats: keys.stats() } satisfies WriterReply);
      port.close();
    }
  };
  port.on('message', (request: WriterRequest) => {
    handle(request).catch((error: unknown) => port.postMessage({ id: request.id, error: errorOf(error) }));
  });
  port.postMessage({ id: 0 } satisfies WriterReply);
}

if (parentPort !== null) serve(workerData as WriterSetup, parentPort);
