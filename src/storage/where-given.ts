// Optional filters as WHERE clauses, written once for every store that pages through a filtered list
// (event reads, rejections, plan violations): a condition applies only when its value was given.
import type {
  ComparisonOperatorExpression,
  OperandValueExpressionOrList,
  ReferenceExpression,
  SelectQueryBuilder,
} from 'kysely';

/** `[column, operator, value]`; skipped when `value` is undefined. */
export type OptionalCondition<DB, TB extends keyof DB> = readonly [
  ReferenceExpression<DB, TB>,
  ComparisonOperatorExpression,
  unknown,
];

export function whereGiven<DB, TB extends keyof DB, O>(
  query: SelectQueryBuilder<DB, TB, O>,
  conditions: ReadonlyArray<OptionalCondition<DB, TB>>,
): SelectQueryBuilder<DB, TB, O> {
  let filtered = query;
  for (const [column, operator, value] of conditions) {
    if (value !== undefined)
      filtered = filtered.where(column, operator, value as OperandValueExpressionOrList<DB, TB, typeof column>);
  }
  return filtered;
}
