// The transformations part of the storage port (transformations.md §3): numbered versions of a product's
// steps, the newest in force, and the product's secret for `mask` `hash`.

export interface TransformationVersion {
  version: number;
  /** The steps as validated and stored (defaults filled in). */
  steps: unknown[];
  createdAt: string;
}

export interface TransformationStore {
  /** Stores the steps as the product's next version; returns it. */
  put(productId: string, steps: unknown[], createdAt: string): Promise<TransformationVersion>;
  current(productId: string): Promise<TransformationVersion | undefined>;
  /** The current version number alone (0: none): what other instances poll. */
  currentVersion(productId: string): Promise<number>;
  /** Every version, newest first. */
  list(productId: string): Promise<TransformationVersion[]>;
  /** The product's secret (made on first use, then the same on every instance). */
  secret(productId: string, make: () => string): Promise<string>;
}
