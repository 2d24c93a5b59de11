// How far V8 lets the server's old generation grow between full collections (docs/design.md, "RSS under
// mixed load"). The server sets it on itself, so `npm start`, `npx inlet serve` and a container all get it.
import { setFlagsFromString } from 'node:v8';
import { nodeFlagValue } from '../domain/node-flags.js';

/** The old generation may grow by this share of what the last full collection kept before the next one. */
export const HEAP_GROWING_PERCENT = 50;

/**
 * The V8 flag to set, or undefined when the command line already gives one (the operator's choice wins; Node
 * refuses this flag in NODE_OPTIONS). V8's own factor goes up to 4× what survived the last full collection; under
 * ingest most of what it promotes is requests that were in flight during a scavenge, garbage by the next full
 * collection, which at 4× held the RSS far above what is live.
 */
export function heapGrowthFlag(execArgv: readonly string[]): string | undefined {
  return nodeFlagValue('heap-growing-percent', execArgv) !== undefined
    ? undefined
    : `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
}

/** Sets the flag on this process (V8 reads it whenever it recomputes the old generation's limit). */
export function limitHeapGrowth(execArgv: readonly string[] = process.execArgv): void {
  const flag = heapGrowthFlag(execArgv);
  if (flag !== undefined) setFlagsFromString(flag);
}
