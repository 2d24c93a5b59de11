// Group commit: every request that arrives while the previous commit is in flight (or within the
// same event-loop turn) is written by the next commit, in one transaction with one fsync.
// A request's items are never split across commits; when a shared commit fails, each of its requests
// is retried alone, so a failure reaches only the request whose rows caused it.

interface Pending<T, R> {
  items: T[];
  resolve: (results: R[]) => void;
  reject: (error: unknown) => void;
}

export interface GroupCommitOptions {
  /** Soft cap on items per commit (a single larger request still goes in one commit). */
  maxItems: number;
  /** Commits that may be in flight at once (2 for SQLite; more for a pooled server database). */
  maxInFlight: number;
  /** While a commit is in flight, another starts only once this many items wait (default 0: at once). Fewer
   *  items wait for the commit in flight and go together in a larger one. */
  minItemsToOverlap?: number;
}

export class GroupCommitWriter<T, R> {
  private queue: Array<Pending<T, R>> = [];
  private queuedItems = 0;
  private inFlight = 0;
  private scheduled = false;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly write: (items: T[]) => Promise<R[]>,
    private readonly options: GroupCommitOptions,
    /** Called after every successful commit (metrics), including the one-by-one retries. */
    private readonly onCommit?: (items: number, seconds: number) => void,
    /** Errors after which the outcome of the commit may be unknown (the connection died while committing):
     *  those fail every request of the group at once (503), because writing them again one by one could
     *  store an event without an external_id twice. */
    private readonly isUnavailable: (error: unknown) => boolean = () => false,
  ) {}

  submit(items: T[]): Promise<R[]> {
    return new Promise<R[]>((resolve, reject) => {
      this.queue.push({ items, resolve, reject });
      this.queuedItems += items.length;
      this.schedule();
    });
  }

  /** Resolves once nothing is queued or in flight. */
  drain(): Promise<void> {
    if (this.queue.length === 0 && this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled || !this.mayStart()) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  /** Whether a commit may start now: something waits, a slot is free, and beside another one, enough waits. */
  private mayStart(): boolean {
    if (this.queue.length === 0 || this.inFlight >= this.options.maxInFlight) return false;
    return this.inFlight === 0 || this.queuedItems >= (this.options.minItemsToOverlap ?? 0);
  }

  /** One commit; reports it to `onCommit` when it succeeds. */
  private async commit(items: T[]): Promise<R[]> {
    const started = process.hrtime.bigint();
    const results = await this.write(items);
    this.onCommit?.(items.length, Number(process.hrtime.bigint() - started) / 1e9);
    return results;
  }

  private async writeEach(group: Array<Pending<T, R>>): Promise<void> {
    for (const pending of group) {
      try {
        pending.resolve(await this.commit(pending.items));
      } catch (error) {
        pending.reject(error);
      }
    }
  }

  private async flush(): Promise<void> {
    if (!this.mayStart()) return;
    const group: Array<Pending<T, R>> = [];
    const items: T[] = [];
    while (this.queue.length > 0) {
      const next = this.queue[0]!;
      if (items.length > 0 && items.length + next.items.length > this.options.maxItems) break;
      this.queue.shift();
      this.queuedItems -= next.items.length;
      group.push(next);
      for (const item of next.items) items.push(item);
    }
    this.inFlight++;
    // Allow another commit to start gathering while this one is in flight.
    this.schedule();
    try {
      const results = await this.commit(items);
      let offset = 0;
      for (const pending of group) {
        pending.resolve(results.slice(offset, offset + pending.items.length));
        offset += pending.items.length;
      }
    } catch (error) {
      if (group.length === 1 || this.isUnavailable(error)) for (const pending of group) pending.reject(error);
      // The commit was one transaction, so nothing of it was stored. One request's bad rows must not
      // fail the other requests that happened to share the commit: write each request on its own.
      else await this.writeEach(group);
    } finally {
      this.inFlight--;
      if (this.queue.length > 0) this.schedule();
      else if (this.inFlight === 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
    }
  }
}
