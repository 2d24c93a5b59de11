// The backup part of the storage port (issue 36): a storage says whether Inlet can back its database up, and
// if it cannot, why and what to use instead. Services and the CLI see it through types.ts.

/** Rows in the copy, counted after its integrity check. */
export interface BackupCounts {
  events: number;
  users: number;
  keys: number;
  products: number;
}

export interface BackupResult {
  /** The absolute path written. */
  file: string;
  bytes: number;
  counts: BackupCounts;
  /** The copy's schema version (the newest migration applied to it). */
  schemaVersion: number;
  /** Wall time of the copy, of its verification, and of the whole backup. */
  copySeconds: number;
  verifySeconds: number;
  seconds: number;
}

export type BackupProgress =
  { phase: 'copy'; copiedBytes: number; totalBytes: number } | { phase: 'verify'; seconds: number };

export interface BackupOptions {
  /** Called every `progressMs` (default 250) while the backup runs. */
  onProgress?: (progress: BackupProgress) => void;
  progressMs?: number;
  /** Aborts the backup: nothing is left behind, and the promise rejects (BackupError `aborted`). */
  signal?: AbortSignal;
}

/**
 * A consistent copy of the database while it keeps taking writes, verified before it is reported written. The
 * copy appears at `target` only once complete (written under a temporary name in the same directory, synced,
 * then renamed); a target that exists is never overwritten. Failures reject with domain/backups.ts's
 * BackupError, whose message says what went wrong and what to do.
 */
export type DatabaseBackup =
  | { readonly supported: true; write(target: string, options?: BackupOptions): Promise<BackupResult> }
  | {
      readonly supported: false;
      /** Why Inlet does not back this database up, and where the docs show how to do it instead. */
      readonly reason: string;
    };
