// What the migrator's progress says in a log (the server's, at start) or on stderr (`inlet migrate`).
import type { MigrationProgress } from '../storage/types.js';

/**
 * Turns the migrator's progress into log lines: on an upgrade every migration at info (a rewrite says so before
 * it starts, and how long it took), on a fresh database one line for the schema (at `freshLevel`) and the rest
 * at debug.
 */
export function narrateMigrations(
  write: (level: 'info' | 'debug', message: string) => void,
  { freshLevel = 'info' }: { freshLevel?: 'info' | 'debug' } = {},
): (progress: MigrationProgress) => void {
  let fresh = false;
  return (progress) => {
    if (progress.phase === 'plan') {
      fresh = progress.fresh;
      const count = `${progress.pending.length} migration${progress.pending.length === 1 ? '' : 's'}`;
      write(
        fresh ? freshLevel : 'info',
        fresh
          ? `creating the database schema (${count})`
          : `upgrading the database schema: ${count} to apply (${progress.pending.join(', ')})`,
      );
    } else if (progress.phase === 'start') {
      const { version, name, rewrites } = progress;
      if (rewrites !== undefined && !fresh)
        write(
          'info',
          `applying migration ${version} (${name}): it rewrites ${rewrites}, which takes a while on a large database; nothing is served until it is done`,
        );
      else write(fresh ? 'debug' : 'info', `applying migration ${version} (${name})`);
    } else {
      const slow = progress.seconds >= 1;
      write(
        fresh && !slow ? 'debug' : 'info',
        `applied migration ${progress.version} in ${progress.seconds.toFixed(progress.seconds < 10 ? 2 : 1)} s`,
      );
    }
  };
}
