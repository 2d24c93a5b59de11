// The metrics of transformations.md §5: items per product, step and outcome, and CPU seconds per step kind.
import { Counter, type Registry } from 'prom-client';
import type { StepOutcome, TransformResult } from '../../domain/transform-engine.js';
import type { StepKind } from '../../domain/transform-types.js';

export interface TransformMetrics {
  /** Counts one request's runs (per step and outcome, then once per distinct label set) and its CPU per kind. */
  count(productId: string, results: readonly TransformResult[], cpu: ReadonlyMap<StepKind, number>): void;
}

export function createTransformMetrics(registry: Registry): TransformMetrics {
  const items = new Counter({
    name: 'inlet_transformation_items_total',
    help: 'Items through each step of a product transformation, by outcome (changed, unchanged, dropped, error)',
    labelNames: ['product_id', 'step', 'outcome'],
    registers: [registry],
  });
  const cpu = new Counter({
    name: 'inlet_transformation_cpu_seconds_total',
    help: 'CPU time spent in transformation steps, by step kind',
    labelNames: ['kind'],
    registers: [registry],
  });
  return {
    count(productId, results, seconds) {
      const tally = new Map<string, number>();
      for (const result of results)
        result.outcomes.forEach((outcome: StepOutcome, step) => {
          const key = `${step}\u0000${outcome}`;
          tally.set(key, (tally.get(key) ?? 0) + 1);
        });
      for (const [key, count] of tally) {
        const [step, outcome] = key.split('\u0000') as [string, string];
        items.inc({ product_id: productId, step, outcome }, count);
      }
      for (const [kind, value] of seconds) cpu.inc({ kind }, value);
    },
  };
}
