import type { Migration } from './index.js';

export const coreMigrations: Migration[] = [
  {
    version: 1,
    name: 'products, api keys, events, legacy usage',
    statements: {
      sqlite: [
        `CREATE TABLE products (
           id TEXT PRIMARY KEY,
           name TEXT NOT NULL,
           created_at TEXT NOT NULL
         )`,
        `CREATE TABLE api_keys (
           id TEXT PRIMARY KEY,
           product_id TEXT NOT NULL REFERENCES products(id),
           kind TEXT NOT NULL CHECK (kind IN ('events', 'reports')),
           name TEXT,
           prefix TEXT NOT NULL,
           key_hash TEXT NOT NULL UNIQUE,
           created_at TEXT NOT NULL,
           expires_at TEXT,
           revoked_at TEXT,
           last_used_at TEXT
         )`,
        `CREATE INDEX api_keys_by_product ON api_keys (product_id, created_at)`,
        `CREATE TABLE events (
           id TEXT NOT NULL,
           product_id TEXT NOT NULL REFERENCES products(id),
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at TEXT NOT NULL,
           received_at TEXT NOT NULL,
           properties TEXT NOT NULL,
           api_key_id TEXT,
           PRIMARY KEY (product_id, id)
         ) WITHOUT ROWID`,
        // The idempotency key: NULL external ids never collide, in SQLite as in PostgreSQL.
        `CREATE UNIQUE INDEX events_dedup ON events (product_id, source, external_id)`,
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id, occurred_at)`,
        `CREATE TABLE legacy_usage (
           product_id TEXT NOT NULL,
           api_key_id TEXT NOT NULL,
           event_name TEXT NOT NULL,
           count INTEGER NOT NULL,
           first_seen_at TEXT NOT NULL,
           last_seen_at TEXT NOT NULL,
           PRIMARY KEY (product_id, api_key_id, event_name)
         )`,
      ],
      postgres: [
        `CREATE TABLE products (
           id TEXT PRIMARY KEY,
           name TEXT NOT NULL,
           created_at TIMESTAMPTZ NOT NULL
         )`,
        `CREATE TABLE api_keys (
           id TEXT PRIMARY KEY,
           product_id TEXT NOT NULL REFERENCES products(id),
           kind TEXT NOT NULL CHECK (kind IN ('events', 'reports')),
           name TEXT,
           prefix TEXT NOT NULL,
           key_hash TEXT NOT NULL UNIQUE,
           created_at TIMESTAMPTZ NOT NULL,
           expires_at TIMESTAMPTZ,
           revoked_at TIMESTAMPTZ,
           last_used_at TIMESTAMPTZ
         )`,
        `CREATE INDEX api_keys_by_product ON api_keys (product_id, created_at)`,
        `CREATE TABLE events (
           id UUID NOT NULL,
           product_id TEXT NOT NULL,
           source TEXT NOT NULL,
           external_id TEXT,
           event_type TEXT NOT NULL,
           action TEXT NOT NULL,
           canonical_name TEXT NOT NULL,
           name_format TEXT NOT NULL,
           subject_type TEXT NOT NULL,
           subject_id TEXT NOT NULL,
           occurred_at TIMESTAMPTZ NOT NULL,
           received_at TIMESTAMPTZ NOT NULL,
           properties JSONB NOT NULL,
           api_key_id TEXT,
           PRIMARY KEY (product_id, id, received_at)
         ) PARTITION BY RANGE (received_at)`,
        // Monthly partitions (events_pYYYY_MM) keep time-range reads and retention cheap: a month is
        // dropped, not deleted. The default partition takes any row no monthly partition covers, so an
        // insert never fails for lack of a partition; inlet_ensure_event_partitions moves such rows out.
        `CREATE TABLE events_default PARTITION OF events DEFAULT`,
        `CREATE INDEX events_by_subject ON events (product_id, subject_type, subject_id, occurred_at)`,
        `CREATE INDEX events_by_time ON events (product_id, received_at)`,
        // The idempotency key (contract §4: no time window). A unique index on a partitioned table must
        // contain the partition key, which would scope uniqueness to one month; so the key lives in its
        // own unpartitioned table, written in the same statement as the event (postgres/event-writer.ts).
        `CREATE TABLE event_dedup (
           product_id TEXT NOT NULL,
           source TEXT NOT NULL,
           external_id TEXT NOT NULL,
           event_id UUID NOT NULL,
           received_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, source, external_id)
         )`,
        // Rows arrive in time order, so a BRIN index finds a month's keys for retention at almost no cost.
        `CREATE INDEX event_dedup_by_time ON event_dedup USING brin (received_at)`,
        // Creates this month's and the next months' partitions; idempotent and safe to run from several
        // instances at once. Called by this migration, at every start and periodically (connect.ts);
        // operators may also schedule it (pg_cron). Months are UTC months.
        `CREATE FUNCTION inlet_ensure_event_partitions(months_ahead integer DEFAULT 3)
         RETURNS integer
         LANGUAGE plpgsql
         SET search_path FROM CURRENT
         AS $fn$
         DECLARE
           this_month date := date_trunc('month', now() AT TIME ZONE 'UTC')::date;
           events_schema text;
           month_start date;
           partition_name text;
           lower_bound text;
           upper_bound text;
           created integer := 0;
         BEGIN
           -- One creator at a time; the catalog queries below run after the lock with a fresh snapshot.
           PERFORM pg_advisory_xact_lock(7243002);
           SELECT n.nspname INTO events_schema
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = 'events'::regclass;
           FOR i IN 0..months_ahead LOOP
             month_start := (this_month + make_interval(months => i))::date;
             partition_name := 'events_p' || to_char(month_start, 'YYYY_MM');
             CONTINUE WHEN EXISTS (
               SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = events_schema AND c.relname = partition_name);
             lower_bound := to_char(month_start, 'YYYY-MM-DD') || ' 00:00:00+00';
             upper_bound := to_char((month_start + interval '1 month')::date, 'YYYY-MM-DD') || ' 00:00:00+00';
             -- CREATE + ATTACH instead of CREATE … PARTITION OF: attaching locks the parent only in SHARE
             -- UPDATE EXCLUSIVE mode, so reads and inserts go on meanwhile. Rows of that month that
             -- landed in the default partition move first (ATTACH refuses while they are there).
             EXECUTE format('CREATE TABLE %I.%I (LIKE %I.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                            events_schema, partition_name, events_schema);
             EXECUTE format('LOCK TABLE %I.events_default IN EXCLUSIVE MODE', events_schema);
             EXECUTE format('WITH moved AS (DELETE FROM %I.events_default WHERE received_at >= %L AND received_at < %L RETURNING *) '
                            'INSERT INTO %I.%I SELECT * FROM moved',
                            events_schema, lower_bound, upper_bound, events_schema, partition_name);
             EXECUTE format('ALTER TABLE %I.events ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                            events_schema, events_schema, partition_name, lower_bound, upper_bound);
             created := created + 1;
           END LOOP;
           RETURN created;
         END
         $fn$`,
        // Retention: drops every monthly partition that ends on or before the start of cutoff's (UTC)
        // month, the default partition's rows before it, and their idempotency keys, in one
        // transaction. A retried external_id of a dropped event is then stored as new.
        `CREATE FUNCTION inlet_drop_event_partitions_before(cutoff timestamptz)
         RETURNS SETOF text
         LANGUAGE plpgsql
         SET search_path FROM CURRENT
         AS $fn$
         DECLARE
           boundary timestamp := date_trunc('month', cutoff AT TIME ZONE 'UTC');
           events_schema text;
           old_partition record;
         BEGIN
           PERFORM pg_advisory_xact_lock(7243002);
           SELECT n.nspname INTO events_schema
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = 'events'::regclass;
           FOR old_partition IN
             SELECT c.relname
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'events'::regclass
                AND c.relname ~ '^events_p[0-9]{4}_[0-9]{2}$'
                AND to_date(substr(c.relname, 9), 'YYYY_MM') + interval '1 month' <= boundary
              ORDER BY c.relname
           LOOP
             EXECUTE format('DROP TABLE %I.%I', events_schema, old_partition.relname);
             RETURN NEXT old_partition.relname::text;
           END LOOP;
           DELETE FROM events_default WHERE received_at < boundary AT TIME ZONE 'UTC';
           DELETE FROM event_dedup WHERE received_at < boundary AT TIME ZONE 'UTC';
           RETURN;
         END
         $fn$`,
        `SELECT inlet_ensure_event_partitions(3)`,
        `CREATE TABLE legacy_usage (
           product_id TEXT NOT NULL,
           api_key_id TEXT NOT NULL,
           event_name TEXT NOT NULL,
           count BIGINT NOT NULL,
           first_seen_at TIMESTAMPTZ NOT NULL,
           last_seen_at TIMESTAMPTZ NOT NULL,
           PRIMARY KEY (product_id, api_key_id, event_name)
         )`,
      ],
    },
  },
];
