// PostgreSQL is backed up with its own tools (issue 36): Inlet says so, and where the docs show how.
import type { DatabaseBackup } from '../backup-types.js';

export const postgresBackup: DatabaseBackup = {
  supported: false,
  reason:
    'PostgreSQL is backed up with its own tools, not by Inlet: pg_dump for a logical copy, or a base backup ' +
    'with WAL archiving for point-in-time recovery. docs/operations.md, "Backing up PostgreSQL", shows both.',
};
