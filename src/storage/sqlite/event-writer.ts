// The SQLite ingest path. Hand-written prepared statements instead of Kysely: this runs for every
// event, and better-sqlite3's cached statements skip query compilation and the async round trips.
// It runs inside Kysely's connection mutex so it never lands inside another open transaction.
import type BetterSqlite3 from 'better-sqlite3';
import type { Kysely } from 'kysely';
import type { Database } from '../database.js';
import { eventFromRow } from '../event-reads.js';
import type { EventInsert, InsertOutcome } from '../types.js';

const COLUMNS =
  'id, product_id, source, external_id, event_type, action, canonical_name, name_format, subject_type, subject_id, occurred_at, received_at, properties, api_key_id, context, original';

export function sqliteEventWriter(db: Kysely<Database>, raw: BetterSqlite3.Database) {
  const insert = raw.prepare(`INSERT INTO events (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`);
  const original = raw.prepare(`SELECT ${COLUMNS} FROM events WHERE product_id = ? AND source = ? AND external_id = ?`);

  const writeAll = raw.transaction((rows: EventInsert[]): InsertOutcome[] =>
    rows.map((row) => {
      const result = insert.run(
        row.id,
        row.productId,
        row.source,
        row.externalId,
        row.eventType,
        row.action,
        row.canonicalName,
        row.nameFormat,
        row.subjectType,
        row.subjectId,
        row.occurredAt,
        row.receivedAt,
        row.propertiesJson,
        row.apiKeyId,
        row.contextJson ?? null,
        row.originalJson ?? null,
      );
      if (result.changes === 1) return { status: 'created', event: row };
      const stored = original.get(row.productId, row.source, row.externalId) as Parameters<typeof eventFromRow>[0] | undefined;
      if (stored === undefined) throw new Error(`event ${row.id} was neither inserted nor found as a duplicate`);
      return { status: 'duplicate', event: eventFromRow(stored) };
    }),
  );

  return {
    insertMany(rows: EventInsert[]): Promise<InsertOutcome[]> {
      if (rows.length === 0) return Promise.resolve([]);
      return db.connection().execute(async () => writeAll(rows));
    },
  };
}
