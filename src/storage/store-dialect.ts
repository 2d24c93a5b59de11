// What the shared stores (identity, traffic, governance, erasure) do differently on each database: a few
// expressions, how a transaction takes its locks, how a message joins the identity log. Each backend gives
// its own (sqlite/store-dialect.ts, postgres/store-dialect.ts), so the stores are written once and never
// ask which database they run on.
import type { Expression, Kysely, QueryExecutorProvider, RawBuilder, SqlBool } from 'kysely';

/** Takes these advisory locks, in a fixed order, until the transaction ends (a no-op where one writer runs at a time). */
export type Lock = (keys: bigint[]) => Promise<void>;

/** One row of `identity_messages` (migrations 500 and 700); its position is drawn by the database. */
export interface IdentityMessageRow {
  product_id: string;
  id: string;
  type: 'user.identified' | 'user.merged' | 'user.erased';
  created_at: string;
  data: string;
  /** The user the message is about (an erasure finds the person's messages by it); null for `user.erased`. */
  user_id: string | null;
}

/**
 * Thrown by the work of a locking transaction to have it tried again from the start (what it read changed while
 * it waited for a lock). Where transactions run one at a time it cannot happen.
 */
export class RetryTransaction extends Error {}

export interface StoreDialect {
  /** The smaller and the larger of two values (SQLite's two-argument min/max, PostgreSQL's LEAST/GREATEST). */
  least<T>(a: Expression<unknown>, b: Expression<unknown>): RawBuilder<T>;
  greatest<T>(a: Expression<unknown>, b: Expression<unknown>): RawBuilder<T>;
  /** A floating-point value rounded to `decimals` places. */
  round(value: Expression<unknown>, decimals: number): RawBuilder<unknown>;
  /** The text of a top-level field of a JSON column; both names are constants of ours, never input. */
  jsonText(column: string, field: string): RawBuilder<unknown>;
  /** The database's now, epoch ms (database-clock.ts): what leases are taken and judged by. */
  nowMs: RawBuilder<number>;
  /** A timestamp parameter, typed to compare with a timestamp column. */
  timestamp(value: string): RawBuilder<unknown>;
  /** The same, to compare with a time of `events` (milliseconds on SQLite: migration 853). */
  eventTime(value: string): RawBuilder<unknown>;
  /** The value to compare `product_id` of `events` with (the product's number on SQLite: migration 854). */
  eventProduct(productId: string): Expression<string>;
  /** `canonical_name` of `events` is one of these names (the name's number on SQLite: migration 855). */
  eventNamed(names: string[]): Expression<SqlBool>;
  /** The position of an `identity_messages` row as text, as destination cursors hold it. */
  readonly identityPosition: RawBuilder<string>;

  /** One write transaction that reads before it writes, with the write lock taken up front where there is one. */
  writeTransaction<DB, R>(db: Kysely<DB>, work: (q: Kysely<DB>) => Promise<R>): Promise<R>;
  /**
   * A write transaction that takes advisory locks (`lock`) before it reads what they guard, and joins the identity
   * log (lockIdentityLog). Tried again on a conflict (a unique violation, a deadlock, a RetryTransaction).
   */
  lockingTransaction<DB, R>(db: Kysely<DB>, work: (q: Kysely<DB>, lock: Lock) => Promise<R>): Promise<R>;
  /** A transaction whose reads all see one snapshot. */
  snapshot<DB, R>(db: Kysely<DB>, work: (q: Kysely<DB>) => Promise<R>): Promise<R>;
  /** First in a transaction that will append to the identity log, before it writes anything. */
  lockIdentityLog(q: QueryExecutorProvider): Promise<void>;
  /** Appends a message to the identity log destinations follow. */
  appendIdentityMessage(q: QueryExecutorProvider, row: IdentityMessageRow): Promise<void>;
  /**
   * Runs `work` holding the product's traffic sync lock, across instances where several share the database;
   * `acquired: false` (and `work` not run) when another sync holds it.
   */
  withSyncLock<DB, T>(
    db: Kysely<DB>,
    productId: string,
    work: () => Promise<T>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
}
