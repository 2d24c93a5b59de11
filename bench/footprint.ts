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
  /**
   * The bytes by table and index, largest first (PostgreSQL: each index summed over the partitions; SQLite: dbstat,
   * which reads every page, so only with `--footprint-parts`). Where a byte target is missed, this says where.
   */
  parts?: Array<{ name: string; bytes: number }>;
}

/** SQLite: the database file plus its WAL, over the rows ever inserted (sqlite_sequence; the bench deletes none). */
export function sqliteFootprint(file: string, parts = false): DiskFootprint {
  const wal = `${file}-wal`;
  const walBytes = existsSync(wal) ? statSync(wal).size : 0;
  const db = new BetterSqlite3(file, { readonly: true });
  try {
    const row = db.prepare(`SELECT seq FROM sqlite_sequence WHERE name = 'events'`).get() as
      { seq: number } | undefined;
    const footprint: DiskFootprint = {
      events: row?.seq ?? 0,
      bytes: statSync(file).size + walBytes,
      what: `file ${(statSync(file).size / 1e6).toFixed(0)} MB + WAL ${(walBytes / 1e6).toFixed(0)} MB`,
    };
    if (parts) {
      // Pages in use per table and index (the file's free pages and the WAL are not in it).
      footprint.parts = (
        db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC').all() as Array<{
          name: string;
          bytes: number;
        }>
      ).map((p) => ({ name: p.name, bytes: Number(p.bytes) }));
    }
    return footprint;
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
    // The same bytes by relation: the partitions' heaps, their TOAST (with its index), each index of events summed
    // over its partitions' indexes, and event_dedup's heap and indexes. Sizes from the catalog: no page is read.
    const parts = await client.query<{ name: string; bytes: string }>(
      `SELECT 'events (rows)' AS name, coalesce(sum(pg_relation_size(inhrelid)), 0) AS bytes FROM pg_inherits WHERE inhparent = 'events'::regclass
       UNION ALL
       SELECT 'events (TOAST)', coalesce(sum(pg_total_relation_size(c.reltoastrelid)), 0)
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass AND c.reltoastrelid <> 0
       UNION ALL
       SELECT x.indexrelid::regclass::text, (SELECT coalesce(sum(pg_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = x.indexrelid)
         FROM pg_index x WHERE x.indrelid = 'events'::regclass
       UNION ALL
       SELECT 'event_dedup (rows)', pg_relation_size('event_dedup') + coalesce((SELECT pg_total_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'event_dedup'::regclass AND reltoastrelid <> 0), 0)
       UNION ALL
       SELECT x.indexrelid::regclass::text, pg_relation_size(x.indexrelid) FROM pg_index x WHERE x.indrelid = 'event_dedup'::regclass
       ORDER BY bytes DESC`,
    );
    return {
      events: Number(row.n),
      bytes: events + dedup,
      what: `events partitions ${(events / 1e6).toFixed(0)} MB + event_dedup ${(dedup / 1e6).toFixed(0)} MB`,
      parts: parts.rows.map((p) => ({ name: p.name, bytes: Number(p.bytes) })),
    };
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
