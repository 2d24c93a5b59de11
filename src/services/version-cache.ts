// The current version of a per-product document (a tracking plan, a transformation), made ready to use and kept
// by this instance. The accept pipeline asks on every request: a warm entry younger than `refreshMs` answers at
// once, without a promise; an older one answers as it is while one query in the background asks whether a newer
// version was stored (by another instance), so a new version applies everywhere within `refreshMs` plus one query.
// Only the first ask for a product waits for storage. A version stored by this instance applies here at once (`set`),
// and a refresh that began before it cannot put an older one back.

/** What `load` answers when the stored version cannot be used here: the entry keeps the version it holds. */
export const KEEP: unique symbol = Symbol('keep the version held');

export interface VersionSource<T> {
  /** The number of the version stored now (0: none). */
  currentVersion(productId: string): Promise<number>;
  /** The stored version made ready; undefined when none is stored; KEEP when it cannot be used here. */
  load(productId: string): Promise<T | undefined | typeof KEEP>;
  /** Whether a version held is to be made ready again at each refresh, though storage has no newer one. */
  retry?(held: T): boolean;
  /** A version this cache no longer holds, or loaded and let go unused (its resources may be freed). */
  replaced?(old: T): void;
}

interface Entry<T> {
  value: T | undefined;
  /** When storage last answered; undefined until it first did. */
  checkedAt: number | undefined;
  refreshing?: Promise<void>;
  /** Bumped by each `set`: a refresh that began under another generation may have read an older version. */
  generation: number;
}

export class VersionCache<T extends { version: number }> {
  private readonly entries = new Map<string, Entry<T>>();

  constructor(
    private readonly source: VersionSource<T>,
    private readonly refreshMs: number,
    private readonly clock: () => number,
  ) {}

  /** The product's version (undefined: none): at once when this instance holds one, else once storage answered. */
  get(productId: string): T | undefined | Promise<T | undefined> {
    let entry = this.entries.get(productId);
    if (entry === undefined) {
      entry = { value: undefined, checkedAt: undefined, generation: 0 };
      this.entries.set(productId, entry);
    }
    if (entry.checkedAt === undefined) {
      const cold = entry;
      return this.refresh(productId, cold).then(() => cold.value);
    }
    if (this.clock() - entry.checkedAt >= this.refreshMs) void this.refresh(productId, entry).catch(() => {});
    return entry.value;
  }

  /**
   * A version stored by this instance: applied here at once, for every ask after this call. A refresh already
   * running may have read the version before it; what that refresh loaded is let go rather than put back.
   */
  set(productId: string, value: T): void {
    const entry = this.entries.get(productId);
    if (entry === undefined) this.entries.set(productId, { value, checkedAt: this.clock(), generation: 0 });
    else if ((entry.value?.version ?? 0) > value.version) {
      // Two PUTs here whose answers crossed: the newer version stays.
      this.source.replaced?.(value);
    } else {
      entry.generation++;
      this.replace(entry, value);
      entry.checkedAt = this.clock();
    }
  }

  /** Each product's version held here (none: left out). */
  held(): Array<[productId: string, value: T]> {
    const held: Array<[string, T]> = [];
    for (const [productId, entry] of this.entries) if (entry.value !== undefined) held.push([productId, entry.value]);
    return held;
  }

  private replace(entry: Entry<T>, value: T | undefined): void {
    const old = entry.value;
    entry.value = value;
    if (old !== undefined && old !== value) this.source.replaced?.(old);
  }

  private refresh(productId: string, entry: Entry<T>): Promise<void> {
    entry.refreshing ??= this.load(productId, entry).finally(() => {
      entry.refreshing = undefined;
    });
    return entry.refreshing;
  }

  private async load(productId: string, entry: Entry<T>): Promise<void> {
    const generation = entry.generation;
    const version = await this.source.currentVersion(productId);
    if (entry.generation !== generation) return;
    const held = entry.value;
    if (version !== (held?.version ?? 0) || (held !== undefined && this.source.retry?.(held) === true)) {
      const loaded = await this.source.load(productId);
      if (entry.generation !== generation) {
        // A `set` came while this was read: its version stays (one stored since by another instance comes with the
        // next refresh).
        if (loaded !== KEEP && loaded !== undefined) this.source.replaced?.(loaded);
        return;
      }
      if (loaded !== KEEP) this.replace(entry, loaded);
    }
    entry.checkedAt = this.clock();
  }
}
