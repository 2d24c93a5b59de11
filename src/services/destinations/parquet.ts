// The Parquet file type (warehouses.md §2): its admin fields (`path`, a folder under the operator's
// INLET_FILE_DESTINATIONS_ROOT, and `partition`), the checks (no root set, a path outside it, `..`, or a symlink
// leading out → 400), and the driver, which writes each delivery's messages into hive-partitioned files
// (files/parquet-files.ts) and erases a person by rewriting the files that hold them. The cursor moves only
// after the files are renamed into place and fsynced.
import { mkdir, realpath } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, sep } from 'node:path';
import { performance } from 'node:perf_hooks';
import { validationError, type FieldError } from '../../domain/errors.js';
import type { StoredMessage } from '../../storage/types.js';
import { eraseFromFiles, writeMessages } from './files/parquet-files.js';
import type { DeliveryContext, DestinationDriver, DestinationKind, DriverOptions, SendOutcome } from './kind.js';
import { failedSend } from './kind.js';

const OFF = 'file destinations are off: the operator has not set INLET_FILE_DESTINATIONS_ROOT';

const inside = (root: string, path: string) => path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);

/** The folder `path` names under `root` (relative to it, or absolute inside it); a message when it is not one. */
export function folderUnder(root: string, path: unknown): string | { error: string } {
  if (typeof path !== 'string' || path.trim() === '' || path.length > 1000 || path.includes('\u0000'))
    return { error: 'must be a folder path of at most 1000 characters' };
  if (path.split(/[\\/]/).includes('..')) return { error: 'must not contain ".."' };
  const folder = normalize(isAbsolute(path) ? path : join(root, path)).replace(/\/+$/, '');
  if (!inside(root, folder)) return { error: `must be inside INLET_FILE_DESTINATIONS_ROOT (${root})` };
  return folder;
}

/** The folder of a `path` field under the root; undefined (and the reason in `errors`) when it is not one. */
function parsePath(value: unknown, errors: FieldError[], fileRoot: string | undefined): string | undefined {
  if (fileRoot === undefined) {
    errors.push({ pointer: '/path', message: OFF });
    return undefined;
  }
  const folder = folderUnder(fileRoot, value);
  if (typeof folder === 'string') return folder;
  errors.push({ pointer: '/path', message: folder.error });
  return undefined;
}

/** The real path of `path`'s deepest existing folder. */
async function realExisting(path: string): Promise<string> {
  for (let current = path; ; current = dirname(current)) {
    try {
      return await realpath(current);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(current) === current) throw error;
    }
  }
}

/**
 * An earlier folder of the destination, for erasure: undefined when it is gone, or no longer inside the root (the
 * root changed, or a symbolic link now leads out), so erasure never creates a folder nor writes outside the root.
 */
async function earlierFolder(root: string, folder: string): Promise<string | undefined> {
  if (!inside(root, folder)) return undefined;
  try {
    const realRoot = await realpath(root);
    return inside(realRoot, await realpath(folder)) ? folder : undefined;
  } catch {
    return undefined;
  }
}

/** Refuses a folder that a symlink leads outside the root (before creating it, and after). */
async function checkFolder(root: string, folder: string): Promise<void> {
  await mkdir(root, { recursive: true });
  const realRoot = await realpath(root);
  if (!inside(realRoot, await realExisting(folder)))
    throw new Error(`${folder} leads outside INLET_FILE_DESTINATIONS_ROOT (a symbolic link)`);
  await mkdir(folder, { recursive: true });
  if (!inside(realRoot, await realpath(folder)))
    throw new Error(`${folder} leads outside INLET_FILE_DESTINATIONS_ROOT (a symbolic link)`);
}

/** The delivery's messages in runs between erasures, in order. */
function runs(messages: StoredMessage[]): Array<StoredMessage[] | { erase: string[] }> {
  const out: Array<StoredMessage[] | { erase: string[] }> = [];
  let current: StoredMessage[] = [];
  for (const message of messages) {
    if (message.kind === 'identity' && message.type === 'user.erased') {
      if (current.length > 0) out.push(current);
      current = [];
      out.push({ erase: (message.data as { externalIds: string[] }).externalIds });
    } else current.push(message);
  }
  if (current.length > 0) out.push(current);
  return out;
}

/**
 * Refuses to go on once this instance no longer holds the destination: one that lost it while it held these
 * messages (frozen, cut off) would put back rows that the new holder wrote and then erased since. Checked before
 * each file and erasure; files have no lock across instances, so this narrows that window without closing it.
 */
async function mustHold(context: DeliveryContext): Promise<void> {
  if (!(await context.holds()))
    throw new Error('this instance no longer holds the destination; the delivery is dropped');
}

function parquetDriver(options: DriverOptions): DestinationDriver {
  return {
    batchSize: (d) => d.batch.maxMessages,
    async deliver(d, messages, context) {
      const started = performance.now();
      let outcome: SendOutcome = { ok: true, status: null, error: null };
      try {
        if (options.fileRoot === undefined) throw new Error(OFF);
        const root = options.fileRoot;
        const folder = d.config.path!;
        await checkFolder(root, folder);
        let rows = 0;
        for (const run of runs(messages)) {
          await mustHold(context);
          if (!Array.isArray(run)) {
            // The files written before a path edit hold the person too.
            for (const earlier of d.config.earlierPaths ?? []) {
              const existing = await earlierFolder(root, earlier);
              if (existing !== undefined) rows += await eraseFromFiles(existing, run.erase);
            }
            rows += await eraseFromFiles(folder, run.erase);
            continue;
          }
          // Files of at most max_messages rows: a delivery's whole batches, each written on its own.
          for (let at = 0; at < run.length; at += d.batch.maxMessages) {
            if (at > 0) await mustHold(context);
            const chunk = run.slice(at, at + d.batch.maxMessages);
            const partition = d.config.partition ?? 'hour';
            const writer = { token: context.leaseUntil };
            rows += (
              await writeMessages(folder, partition, chunk, new Date(options.now()), options.orderPositions, writer)
            ).rows;
          }
        }
        await options.warehouse.loaded(d.id, {
          rows,
          seconds: (performance.now() - started) / 1000,
          columnsAdded: 0,
          widenings: 0,
          warnings: [],
        });
      } catch (error) {
        outcome = failedSend('Parquet: ', error);
      }
      const ends = messages.length === 1 ? [messages[0]!] : [messages[0]!, messages[messages.length - 1]!];
      context.sent(ends.map(context.format), outcome, performance.now() - started);
      return outcome.ok ? { accepted: messages.length } : { accepted: 0, failure: outcome };
    },
    prune: async () => {},
    forget: async () => {},
    close: async () => {},
  };
}

export const parquetKind: DestinationKind = {
  label: 'Parquet',
  fields: ['path', 'partition'],
  editable: ['path'],
  batch: { defaultMessages: 100_000, maxMessages: 100_000, defaultWaitMs: 60_000, maxWaitMs: 60_000 },
  defaultStart: 'beginning',
  parse(input, errors, { fileRoot }) {
    const path = parsePath(input.path, errors, fileRoot) ?? '';
    const partition = input.partition ?? 'hour';
    if (partition !== 'hour' && partition !== 'day')
      errors.push({ pointer: '/partition', message: 'must be "hour" or "day"' });
    return { config: { path, partition: partition as 'hour' | 'day' }, credentials: null };
  },
  // A new folder passes the checks of creation; the files written so far stay where they are, and the files
  // from the cursor on go to the new folder. The destination remembers the folders it wrote to before, so that
  // an erasure reaches their files too.
  edit(current, input, errors, { fileRoot }) {
    if (input.path === undefined) return undefined;
    const path = parsePath(input.path, errors, fileRoot);
    if (path === undefined) return undefined;
    if (path === current.path) return current;
    const earlier = [...(current.earlierPaths ?? []), current.path!].filter(
      (p, i, all) => p !== path && all.indexOf(p) === i,
    );
    return { ...current, path, earlierPaths: earlier };
  },
  async check(config, { fileRoot }) {
    if (fileRoot === undefined) throw validationError([{ pointer: '/path', message: OFF }]);
    try {
      await checkFolder(fileRoot, config.path!);
    } catch (error) {
      throw validationError([{ pointer: '/path', message: (error as Error).message }]);
    }
  },
  driver: parquetDriver,
};
