// Backups (issue 36; docs/operations.md). `inlet backup <file>` goes through backupTo; the server's schedule
// (INLET_BACKUP_DIR, INLET_BACKUP_INTERVAL, INLET_BACKUP_KEEP) writes one backup every interval into the directory,
// named by time, and then removes the oldest beyond the count to keep. The storage copies and verifies each backup
// off the event loop; a failure is logged, counted and tried again sooner (1 min, 2, 4 … at most the interval), and
// never stops ingest. Only the server starts the schedule, and only on a storage that backs itself up (SQLite: one
// instance, so one writer of backups); the composition root refuses the settings on any other (scheduleRefusal).
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Counter, Gauge } from 'prom-client';
import {
  BackupError,
  backupFileName,
  backupsBeyond,
  backupTimeOf,
  firstBackupDelay,
  isScheduledTemporary,
  retryDelay,
} from '../domain/backups.js';
import type { BackupOptions, BackupResult, DatabaseBackup } from '../storage/types.js';
import type { Metrics } from './metrics.js';

export interface BackupSchedule {
  dir: string;
  intervalMs: number;
  keep: number;
}

export interface BackupLog {
  info(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** A scheduled backup: what the storage wrote, and the old backups removed after it. */
export interface ScheduledBackup extends BackupResult {
  removed: string[];
}

/** Why the schedule cannot run on this storage (the setting to name at start), or undefined when it can. */
export function scheduleRefusal(backup: DatabaseBackup | undefined, schedule: BackupSchedule | undefined) {
  if (schedule === undefined || backup?.supported === true) return undefined;
  return `INLET_BACKUP_INTERVAL is set, but Inlet does not back this database up: ${backup?.reason ?? 'this storage has no backups'}`;
}

function backupMetrics(metrics: Metrics) {
  return {
    lastSuccess: new Gauge({
      name: 'inlet_backup_last_success_timestamp_seconds',
      help: 'When the last scheduled backup was written and verified (at start: the newest kept in INLET_BACKUP_DIR); 0: none yet',
      registers: [metrics.registry],
    }),
    lastDuration: new Gauge({
      name: 'inlet_backup_last_duration_seconds',
      help: 'How long the last successful scheduled backup took, copy and verification',
      registers: [metrics.registry],
    }),
    lastSize: new Gauge({
      name: 'inlet_backup_last_size_bytes',
      help: 'Size of the last successful scheduled backup',
      registers: [metrics.registry],
    }),
    runs: new Counter({
      name: 'inlet_backups_total',
      help: 'Scheduled backups by outcome (success, failure); a failure is tried again sooner than the interval',
      labelNames: ['outcome'],
      registers: [metrics.registry],
    }),
  };
}

export function createBackupService(
  backup: DatabaseBackup | undefined,
  metrics: Metrics,
  schedule: BackupSchedule | undefined,
  options: { now?: () => number } = {},
) {
  const now = options.now ?? Date.now;
  const gauges = schedule === undefined ? undefined : backupMetrics(metrics);
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = true;
  let failures = 0;
  let log: BackupLog | undefined;
  const cancel = new AbortController();

  function writer(): Extract<DatabaseBackup, { supported: true }> {
    if (backup === undefined) throw new BackupError('unsupported', 'this storage has no backups');
    if (!backup.supported) throw new BackupError('unsupported', backup.reason);
    return backup;
  }

  async function runScheduled(): Promise<ScheduledBackup> {
    if (schedule === undefined) throw new BackupError('unsupported', 'no backup schedule (INLET_BACKUP_INTERVAL)');
    const { dir, keep } = schedule;
    await mkdir(dir, { recursive: true });
    // Only scheduled names: a manual `inlet backup` into the same directory may be running.
    for (const name of (await readdir(dir)).filter(isScheduledTemporary)) await rm(join(dir, name), { force: true });
    const result = await writer().write(join(dir, backupFileName(new Date(now()))), { signal: cancel.signal });
    const removed = backupsBeyond(await readdir(dir), keep);
    for (const name of removed) await rm(join(dir, name), { force: true });
    gauges?.lastSuccess.set(now() / 1000);
    gauges?.lastDuration.set(result.seconds);
    gauges?.lastSize.set(result.bytes);
    gauges?.runs.inc({ outcome: 'success' });
    return { ...result, removed };
  }

  function next(delay: number): void {
    if (stopped || schedule === undefined) return;
    const { intervalMs } = schedule;
    timer = setTimeout(() => {
      running = runScheduled()
        .then(
          (result) => {
            failures = 0;
            log?.info(result, 'backup written and verified');
            next(intervalMs);
          },
          (error: unknown) => {
            if (stopped) return;
            failures++;
            gauges?.runs.inc({ outcome: 'failure' });
            const retryMs = retryDelay(intervalMs, failures);
            log?.error(
              {
                reason: error instanceof BackupError ? error.reason : 'failed',
                err: error,
                retryInSeconds: retryMs / 1000,
              },
              `backup failed: ${(error as Error).message}`,
            );
            next(retryMs);
          },
        )
        .finally(() => {
          running = undefined;
        });
    }, delay);
    timer.unref();
  }

  return {
    /** `inlet backup <file>`: one verified copy at `target`. */
    backupTo(target: string, options?: Omit<BackupOptions, 'signal'>): Promise<BackupResult> {
      return writer().write(target, { ...options, signal: cancel.signal });
    },

    /** One scheduled backup now (what each tick does), with the rotation after it. */
    runScheduled,

    /** Starts the schedule (no-op without one): due one interval after the newest backup kept, at once if none. */
    start(logger?: BackupLog): void {
      if (schedule === undefined || !stopped) return;
      stopped = false;
      log = logger;
      void readdir(schedule.dir)
        .then(
          (names) => Math.max(...names.map((name) => backupTimeOf(name) ?? -Infinity)),
          () => -Infinity,
        )
        .then((newest) => {
          const kept = Number.isFinite(newest) ? newest : undefined;
          if (kept !== undefined) gauges?.lastSuccess.set(kept / 1000);
          next(firstBackupDelay(kept, now(), schedule.intervalMs));
        });
    },

    /** Stops the schedule; a backup under way is cancelled and leaves nothing behind. */
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      cancel.abort();
      await running?.catch(() => {});
    },
  };
}

export type BackupService = ReturnType<typeof createBackupService>;
