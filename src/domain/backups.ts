// Backups (issue 36; docs/operations.md): the failures a backup reports, the settings' interval syntax, and the
// names and rotation of scheduled backups. Pure: the storage adapter copies, the backup service schedules.

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

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * An interval such as `6h`, `30m`, `1h30m`, `90s` or `1d` in milliseconds; `off`, `0` or blank: undefined.
 * Throws on anything else (the config names the setting).
 */
export function parseInterval(text: string | undefined): number | undefined {
  const raw = text?.trim().toLowerCase() ?? '';
  if (raw === '' || raw === 'off' || raw === '0') return undefined;
  if (!/^(\d+[smhd])+$/.test(raw)) {
    throw new Error(`must be a duration such as 6h, 30m, 1h30m or 1d (or off), got "${text}"`);
  }
  let ms = 0;
  for (const [, amount, unit] of raw.matchAll(/(\d+)([smhd])/g)) ms += Number(amount) * UNIT_MS[unit!]!;
  return ms;
}

const NAME = /^inlet-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})\.(\d{3})Z\.db$/;

/** `inlet-20261128T081500.123Z.db`: UTC, so that names sort by time; no colons (not allowed everywhere). */
export function backupFileName(at: Date): string {
  return `inlet-${at.toISOString().replace(/[-:]/g, '')}.db`;
}

/** The time a scheduled backup's name carries (epoch ms), or undefined for any other file. */
export function backupTimeOf(name: string): number | undefined {
  const parts = NAME.exec(name);
  if (parts === null) return undefined;
  const [, year, month, day, hour, minute, second, ms] = parts;
  return Date.parse(`${year}-${month}-${day}T${hour}:${minute}:${second}.${ms}Z`);
}

/** The scheduled backups among `names` to remove so that the newest `keep` stay; other files are not ours. */
export function backupsBeyond(names: readonly string[], keep: number): string[] {
  const ours = names.filter((name) => backupTimeOf(name) !== undefined).sort();
  return ours.slice(0, Math.max(0, ours.length - keep));
}

/** The name a backup is written under until it is complete: hidden, in the target's directory, unique. */
export function temporaryName(targetName: string, random: string): string {
  return `.${targetName}.${random}.partial`;
}

/** A scheduled backup's temporary file (left by a process that died while writing it). */
export function isScheduledTemporary(name: string): boolean {
  const parts = /^\.(.+)\.[0-9a-f]+\.partial$/.exec(name);
  return parts !== null && backupTimeOf(parts[1]!) !== undefined;
}

/** After a failure, the next attempt comes sooner than the interval: 1 min, 2, 4 … and never later than it. */
export function retryDelay(intervalMs: number, consecutiveFailures: number): number {
  const backoff = 60_000 * 2 ** Math.min(Math.max(consecutiveFailures - 1, 0), 20);
  return Math.min(intervalMs, backoff);
}

/** When the next scheduled backup is due: one interval after the newest one kept, at once if that has passed. */
export function firstBackupDelay(newestMs: number | undefined, nowMs: number, intervalMs: number): number {
  if (newestMs === undefined) return 0;
  return Math.max(0, Math.min(intervalMs, newestMs + intervalMs - nowMs));
}
