// Backups (issue 36; docs/operations.md): the failures a backup reports, and the temporary name a backup is
// written under. Pure: the storage adapter copies.

/** Why a backup failed: each reaches the operator as a message that says what to do. */
export type BackupFailure =
  | 'unsupported'
  | 'no_database'
  | 'target_exists'
  | 'no_directory'
  | 'not_writable'
  | 'no_space'
  | 'verify_failed'
  | 'aborted'
  | 'failed';

export class BackupError extends Error {
  constructor(
    readonly reason: BackupFailure,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'BackupError';
  }
}

/** The name a backup is written under until it is complete: hidden, in the target's directory, unique. */
export function temporaryName(targetName: string, random: string): string {
  return `.${targetName}.${random}.partial`;
}
