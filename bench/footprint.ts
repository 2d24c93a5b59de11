// What the events take on disk, and the server's memory, for the issue-11 targets (≤ 250 bytes per event
// beyond the properties' JSON bytes; server RSS ≤ 300 MB). See clarifications §7 and §9.
import { existsSync, readFileSync, statSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';

export interface DiskFootprint {
  events: number;
  bytes: number;
  /** What the bytes are: files or relations. */
  what: string;
}

/** SQLite: the database file plus its WAL, over the rows ever inserted (sqlite_sequence; the bench deletes none). */
export function sqliteFootprint(file: string): DiskFootprint {
  const wal = `${file}-wal`;
  const walBytes = existsSync(wal) ? statSync(wal).size : 0;
  const db = new BetterSqlite3(file, { readonly: true });
  try {
    const row = db.prepare(`SELECT seq FROM sqlite_sequence WHERE name = 'events'`).get() as { seq: number } | undefined;
    return { events: row?.seq ?? 0, bytes: statSync(file).size + walBytes, what: `file ${(statSync(file).size / 1e6).toFixed(0)} MB + WAL ${(walBytes / 1e6).toFixed(0)} MB` };
  } finally {
    db.close();
  }
}

/** PostgreSQL: pg_total_relation_size (heap, TOAST, indexes) of every partition of events, plus event_dedup. */
export async function postgresFootprint(url: string): Promise<DiskFootprint> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const sizes = await client.query<{ events_bytes: string; dedup_bytes: string; n: string }>(
      `SELECT (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = 'events'::regclass) AS events_bytes,
              pg_total_relation_size('event_dedup') AS dedup_bytes,
              (SELECT count(*) FROM events) AS n`,
    );
    const row = sizes.rows[0]!;
    const events = Number(row.events_bytes);
    const dedup = Number(row.dedup_bytes);
    return { events: Number(row.n), bytes: events + dedup, what: `events partitions ${(events / 1e6).toFixed(0)} MB + event_dedup ${(dedup / 1e6).toFixed(0)} MB` };
  } finally {
    await client.end();
  }
}

export interface MemoryPeak {
  rssBytes: number;
  anonBytes: number;
  fileBytes: number;
}

/** Samples a process's VmRSS / RssAnon / RssFile from /proc every `everyMs` and keeps the maxima. */
export function memorySampler(pid: number | undefined, everyMs = 250) {
  const peak: MemoryPeak = { rssBytes: 0, anonBytes: 0, fileBytes: 0 };
  const sample = () => {
    if (pid === undefined) return;
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
      peak.rssBytes = Math.max(peak.rssBytes, kb('VmRSS'));
      peak.anonBytes = Math.max(peak.anonBytes, kb('RssAnon'));
      peak.fileBytes = Math.max(peak.fileBytes, kb('RssFile'));
    } catch {
      // exited
    }
  };
  const timer = setInterval(sample, everyMs);
  timer.unref();
  sample();
  return {
    peak,
    stop(): MemoryPeak {
      sample();
      clearInterval(timer);
      return peak;
    },
  };
}
