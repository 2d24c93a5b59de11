// The metrics of transformations.md §5: items per product, step and outcome, and CPU seconds per step kind; and
// the steps of the versions held here that this instance cannot run (stored-steps.ts).
import { Counter, Gauge, type Registry } from 'prom-client';
import type { StepOutcome, TransformResult } from '../../domain/transform-engine.js';
import type { StepKind } from '../../domain/transform-types.js';
import type { UnavailableStep } from './stored-steps.js';

export interface TransformMetrics {
  /** Counts one request's runs (per step and outcome, then once per distinct label set) and its CPU per kind. */
  count(productId: string, results: readonly TransformResult[], cpu: ReadonlyMap<StepKind, number>): void;
}

const OUTCOMES: readonly StepOutcome[] = ['changed', 'unchanged', 'dropped', 'error'];
const OUTCOME_SLOT: Record<StepOutcome, number> = { changed: 0, unchanged: 1, dropped: 2, error: 3 };

/** The versions this instance holds, by product, with the steps of each it cannot run. */
export type HeldVersions = () => ReadonlyArray<[string, { version: number; unavailable: readonly UnavailableStep[] }]>;

export function createTransformMetrics(registry: Registry, held: HeldVersions = () => []): TransformMetrics {
  const items = new Counter({
    name: 'inlet_transformation_items_total',
    help: 'Items through each step of a product transformation, by outcome (changed, unchanged, dropped, error)',
    labelNames: ['product_id', 'step', 'outcome'],
    registers: [registry],
  });
  const cpu = new Counter({
    name: 'inlet_transformation_cpu_seconds_total',
    help: 'Seconds spent in transformation steps, by step kind (a function step: the wait for the sandbox)',
    labelNames: ['kind'],
    registers: [registry],
  });
  new Gauge({
    name: 'inlet_transformation_unavailable_steps',
    help: 'Steps of the transformation version held here that this instance cannot run (1 each): they fail as step errors, on_error decides',
    labelNames: ['product_id', 'version', 'step', 'kind'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [productId, { version, unavailable }] of held())
        for (const { step, kind } of unavailable)
          this.set({ product_id: productId, version: String(version), step: String(step), kind }, 1);
    },
  });
  return {
    count(productId, results, seconds) {
      // Tallied by step × outcome in an array (a request of 100 items through 6 steps is 600 counts), then one
      // counter increment per pair seen.
      const tally: number[] = [];
      for (const result of results) {
        const outcomes = result.outcomes;
        for (let step = 0; step < outcomes.length; step++) {
          const slot = step * OUTCOMES.length + OUTCOME_SLOT[outcomes[step]!];
          tally[slot] = (tally[slot] ?? 0) + 1;
        }
      }
      tally.forEach((count, slot) => {
        const step = String(Math.floor(slot / OUTCOMES.length));
        items.inc({ product_id: productId, step, outcome: OUTCOMES[slot % OUTCOMES.length]! }, count);
      });
      for (const [kind, value] of seconds) cpu.inc({ kind }, value);
    },
  };
}
