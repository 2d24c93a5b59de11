// SQLite statements retried on the event loop instead of in SQLite's busy handler (the delivery worker's
// connection; docs/design.md, "Destinations").
//
// With `busy_timeout`, a statement that finds the write lock taken sleeps in SQLite's busy handler: 1, 2, 5,
// 10, 15, 20, 25 … ms, synchronously, until the lock is free. The server's ingest writer holds that lock for
// most of every second under load (each group commit, with its fsync), so the delivery worker slept there
// 1.8 s of every 5 s in the destinations bench (strace: clock_nanosleep on the worker's thread, up to 50 ms at
// a time), its event loop standing still while webhook answers and NATS acknowledgements waited. Its
// connection runs with busy_timeout 0 instead: a busy statement fails at once, and the store method is called
// again after a short timer, the loop serving everything else meanwhile. Store methods are atomic (one
// statement, or one transaction that a failure rolls back), so calling one again is safe.
import { setTimeout as sleep } from 'node:timers/promises';

/** How long a store call keeps retrying a busy database before giving up (its error is then thrown). */
const RETRY_FOR_MS = 10_000;
const MAX_DELAY_MS = 8;

export function isSqliteBusy(error: unknown): boolean {
  for (let current = error, depth = 0; current !== null && typeof current === 'object' && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_BUSY')) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * `store` with every method that returns a promise retried while it fails with SQLITE_BUSY: after 1 ms, then
 * 2, 4, 8, 8 … ms, for up to RETRY_FOR_MS. `retries` counts the retries (tests, profiling).
 */
export function retryingBusy<T extends object>(store: T, stats: { retries: number } = { retries: 0 }): T {
  return new Proxy(store, {
    get(target, key, receiver) {
      const value: unknown = Reflect.get(target, key, receiver);
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      return (...args: unknown[]) => {
        const first = method.apply(target, args);
        if (!(first instanceof Promise)) return first;
        return first.catch(async (error: unknown) => {
          const until = Date.now() + RETRY_FOR_MS;
          let delay = 1;
          for (;;) {
            if (!isSqliteBusy(error) || Date.now() > until) throw error;
            stats.retries++;
            await sleep(delay);
            delay = Math.min(2 * delay, MAX_DELAY_MS);
            try {
              return await method.apply(target, args);
            } catch (next) {
              error = next;
            }
          }
        });
      };
    },
  });
}
