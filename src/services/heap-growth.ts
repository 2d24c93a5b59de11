// How far V8 lets the server's old generation grow between full collections (docs/design.md, "RSS under
// mixed load"). The server sets it on itself, so `npm start`, `npx inlet serve` and a container all get it.
import { setFlagsFromString } from 'node:v8';

/** The old generation may grow by this share of what the last full collection kept before the next one. */
export const HEAP_GROWING_PERCENT = 50;

/**
 * The V8 flag to set, or undefined when the command line already gives one (the operator's choice wins). V8's
 * own factor goes up to 4× what survived the last full collection; under ingest most of what it promotes is
 * requests that were in flight during a scavenge, garbage by the next full collection, which at 4× held the
 * RSS far above what is live.
 */
export function heapGrowthFlag(execArgv: readonly string[]): string | undefined {
  return execArgv.some((argument) => /^--heap[-_]growing[-_]percent(=|$)/.test(argument))
    ? undefined
    : `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
}

/** Sets the flag on this process (V8 reads it whenever it recomputes the old generation's limit). */
export function limitHeapGrowth(execArgv: readonly string[] = process.execArgv): void {
  const flag = heapGrowthFlag(execArgv);
  if (flag !== undefined) setFlagsFromString(flag);
}
