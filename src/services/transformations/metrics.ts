// The metrics of transformations.md §5: items per product, step and outcome, and CPU seconds per step kind.
import { Counter, type Registry } from 'prom-client';
import type { StepOutcome, TransformResult } from '../../domain/transform-engine.js';
import type { StepKind } from '../../domain/transform-types.js';

export interface TransformMetrics {
  /** Counts one request's runs (per step and outcome, then once per distinct label set) and its CPU per kind. */
  count(productId: string, results: readonly TransformResult[], cpu: ReadonlyMap<StepKind, number>): void;
}

const OUTCOMES: readonly StepOutcome[] = ['changed', 'unchanged', 'dropped', 'error'];
const OUTCOME_SLOT: Record<StepOutcome, number> = { changed: 0, unchanged: 1, dropped: 2, error: 3 };

export function createTransformMetrics(registry: Registry): TransformMetrics {
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
