// `inlet backup <file>` (docs/operations.md): a consistent, verified copy of the database while the server keeps
// taking events. Progress on a terminal (one line rewritten), plain lines otherwise; the counts copied at the end.
// Exit codes: 0 written, 1 failed (nothing left behind), 2 usage, or a database Inlet does not back up (PostgreSQL:
// the message says which tools do, and where the docs show them).
import { BackupError } from '../domain/backups.js';
import type { BackupProgress, BackupResult } from '../storage/types.js';
import { UsageError, type CliIo, type Command } from './command.js';

const MB = 1024 * 1024;
const megabytes = (bytes: number) => `${(bytes / MB).toFixed(bytes < 10 * MB ? 1 : 0)} MiB`;
const count = (n: number) => n.toLocaleString('en-US');

/** On a terminal: one status line, rewritten. Otherwise: a plain line when each phase begins. */
function progressReporter(io: CliIo, target: string): { report(progress: BackupProgress): void; done(): void } {
  let phase: BackupProgress['phase'] | undefined;
  return {
    report(progress) {
      if (io.progress !== undefined) {
        io.progress(
          progress.phase === 'copy'
            ? `copying ${Math.min(100, Math.floor((100 * progress.copiedBytes) / Math.max(progress.totalBytes, 1)))} % (${megabytes(progress.copiedBytes)} of about ${megabytes(progress.totalBytes)})`
            : `verifying the copy (integrity_check) ${progress.seconds.toFixed(0)} s`,
        );
        return;
      }
      if (progress.phase === phase) return;
      phase = progress.phase;
      io.err(
        progress.phase === 'copy'
          ? `copying the database (about ${megabytes(progress.totalBytes)}) to ${target}`
          : 'verifying the copy (integrity_check)',
      );
    },
    done: () => io.progress?.(''),
  };
}

function backupResource(result: BackupResult) {
  return {
    file: result.file,
    bytes: result.bytes,
    counts: result.counts,
    schema_version: result.schemaVersion,
    integrity_check: 'ok',
    seconds: result.seconds,
    copy_seconds: result.copySeconds,
    verify_seconds: result.verifySeconds,
  };
}

export const backupCommands: Command[] = [
  {
    path: ['backup'],
    usage: 'inlet backup <file> [--json]',
    summary:
      'Write a consistent, verified copy of the database to a new <file> while the server keeps running (SQLite; docs/operations.md)',
    async run({ services, args, io, json }) {
      if (args.length !== 1 || args[0]!.trim() === '')
        throw new UsageError('give the one file to write, such as inlet backup /var/backups/inlet-2026-11-28.db');
      const target = args[0]!;
      const progress = progressReporter(io, target);
      let result: BackupResult;
      try {
        result = await services.backups.backupTo(target, { onProgress: progress.report });
      } catch (error) {
        progress.done();
        if (!(error instanceof BackupError)) throw error;
        io.err(`inlet: ${error.reason === 'unsupported' ? '' : 'backup failed: '}${error.message}`);
        return error.reason === 'unsupported' ? 2 : 1;
      }
      progress.done();
      const { counts } = result;
      io.out(
        json
          ? JSON.stringify({ data: backupResource(result) })
          : [
              `backup written: ${result.file} (${megabytes(result.bytes)}) in ${result.seconds.toFixed(1)} s ` +
                `(copy ${result.copySeconds.toFixed(1)} s, verification ${result.verifySeconds.toFixed(1)} s)`,
              `  integrity_check ok, schema version ${result.schemaVersion}: events ${count(counts.events)}, ` +
                `users ${count(counts.users)}, keys ${count(counts.keys)}, products ${count(counts.products)}`,
            ].join('\n'),
      );
      return 0;
    },
  },
];
