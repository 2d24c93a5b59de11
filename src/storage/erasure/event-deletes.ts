// How erasure and retention delete events and reclaim the space on this database: the one part of them that is
// not the same SQL on both (sqlite/event-deletes.ts, postgres/event-deletes.ts). Deletions run in small
// transactions, a batch at a time, so ingest's group commits go on between them.
import type { Kysely, RawBuilder } from 'kysely';
import type { Database } from '../database.js';
import type { EventMonth, EventMonthCursor, EventMonthDrop } from '../types.js';

export interface EventDeletes {
  /** Deletes at most `limit` of the product's events that match `where` (a condition on `events`); returns how many. */
  where(productId: string, where: RawBuilder<unknown>, limit: number): Promise<number>;
  /** Deletes at most `limit` of the product's events whose subject is the user `externalIds` name; returns how many. */
  ofSubjects(productId: string, externalIds: string[], limit: number): Promise<number>;
  /** Makes deleted rows unreadable on disk after a job (the store's `reclaim`). */
  reclaim(only?: 'identity_messages'): Promise<void>;
  /** Awaited before each background batch (the store's `roomToWrite`). */
  roomToWrite(): Promise<void>;
  /** Monthly partitions of `events`, which retention drops whole; absent where there are none. */
  months?: EventMonths;
}

/** The month operations of postgres/event-partitions.ts, on the connections they need. */
export interface EventMonths {
  endingBy(end: string): Promise<EventMonth[]>;
  products(name: string): Promise<string[]>;
  deleteKeys(
    name: string,
    productIds: string[],
    after: EventMonthCursor | null,
    limit: number,
  ): Promise<{ events: number; keys: number; next: EventMonthCursor }>;
  drop(
    month: EventMonth,
    lockTimeoutMs: number,
    allowed: (q: Kysely<Database>, counts: Record<string, number>) => Promise<boolean>,
  ): Promise<EventMonthDrop>;
}
