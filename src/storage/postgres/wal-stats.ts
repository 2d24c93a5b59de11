// The server's checkpoints and WAL, for /metrics and the checkpoint advice (services/postgres-checkpoints.ts).
// Where PostgreSQL keeps them depends on its version: checkpoints in pg_stat_bgwriter until 16 and in
// pg_stat_checkpointer from 17; WAL volume in pg_stat_wal from 14. Every role may read these views.
import type pg from 'pg';
import type { PostgresWalStats } from '../types.js';

interface Row {
  server: string;
  timed: string;
  requested: string;
  bytes: string | null;
  fpi: string | null;
  max_wal_size: string;
  checkpoint_timeout: string;
}

/** Two queries: the server's version (which views hold the figures), then the figures and the settings (as SHOW prints them). */
export async function readWalStats(pool: pg.Pool): Promise<PostgresWalStats> {
  const version = Number(
    (await pool.query<{ v: string }>("SELECT current_setting('server_version_num') AS v")).rows[0]!.v,
  );
  const checkpoints =
    version >= 170000
      ? 'SELECT num_timed AS timed, num_requested AS requested FROM pg_stat_checkpointer'
      : 'SELECT checkpoints_timed AS timed, checkpoints_req AS requested FROM pg_stat_bgwriter';
  const wal = version >= 140000 ? '(SELECT wal_bytes::text FROM pg_stat_wal)' : 'NULL';
  const fpi = version >= 140000 ? '(SELECT wal_fpi::text FROM pg_stat_wal)' : 'NULL';
  const { rows } = await pool.query<Row>(
    `SELECT coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local') AS server, c.timed::text AS timed, c.requested::text AS requested, ${wal} AS bytes, ${fpi} AS fpi, ` +
      `current_setting('max_wal_size') AS max_wal_size, current_setting('checkpoint_timeout') AS checkpoint_timeout FROM (${checkpoints}) AS c`,
  );
  const row = rows[0]!;
  return {
    server: row.server,
    timedCheckpoints: Number(row.timed),
    requestedCheckpoints: Number(row.requested),
    ...(row.bytes === null ? {} : { walBytes: Number(row.bytes) }),
    ...(row.fpi === null ? {} : { walFullPageImages: Number(row.fpi) }),
    maxWalSize: row.max_wal_size,
    checkpointTimeout: row.checkpoint_timeout,
  };
}
