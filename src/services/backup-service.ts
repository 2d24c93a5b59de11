// Backups (issue 36; docs/operations.md). `inlet backup <file>` goes through backupTo; the storage copies and
// verifies the backup off the event loop, or says why it leaves backups to the database's own tools.
import { BackupError } from '../domain/backups.js';
import type { BackupOptions, BackupResult, DatabaseBackup } from '../storage/types.js';

export function createBackupService(backup: DatabaseBackup | undefined) {
  const cancel = new AbortController();

  function writer(): Extract<DatabaseBackup, { supported: true }> {
    if (backup === undefined) throw new BackupError('unsupported', 'this storage has no backups');
    if (!backup.supported) throw new BackupError('unsupported', backup.reason);
    return backup;
  }

  return {
    /** `inlet backup <file>`: one verified copy at `target`. */
    backupTo(target: string, options?: Omit<BackupOptions, 'signal'>): Promise<BackupResult> {
      return writer().write(target, { ...options, signal: cancel.signal });
    },

    /** A backup under way is cancelled and leaves nothing behind. */
    async close(): Promise<void> {
      cancel.abort();
    },
  };
}

export type BackupService = ReturnType<typeof createBackupService>;
