// The printed table: one line per run, the ratio to its baseline, and pass/fail against the targets.
export interface Line {
  name: string;
  requestsPerSecond: number | undefined;
  eventsPerSecond: number;
  p50Ms: number | undefined;
  p99Ms: number | undefined;
  cpuMicrosPerRequest: number | undefined;
  /** The load generator's CPU over the run, as a share of one core (undefined: not measured). */
  generatorCpuShare?: number | undefined;
  failures: string;
}

export interface TargetCheck {
  description: string;
  actual: string;
  pass: boolean;
}

/** The median: the middle value, or the mean of the two middle ones for an even count (the rounds of a bench
 *  that alternates the order of its variants are even). */
export function median(xs: readonly number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * The variants in the order round `round` (from 0) runs them: as given in even rounds, reversed in odd ones. A fixed
 * order charges whatever drifts through a run (the machine's load, the table's size and its cost per event) to the
 * variants that run last; alternating cancels a steady drift over an even number of rounds.
 */
export function inRoundOrder<T>(variants: readonly T[], round: number): T[] {
  return round % 2 === 0 ? [...variants] : [...variants].reverse();
}

const number = (value: number | undefined, digits = 0) =>
  value === undefined
    ? '—'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function formatTable(lines: Line[]): string {
  const header = ['run', 'req/s', 'events/s', 'p50 ms', 'p99 ms', 'server CPU µs/req', 'gen CPU', 'not ok'];
  const share = (value: number | undefined) => (value === undefined ? '—' : `${Math.round(value * 100)} %`);
  const rows = lines.map((l) => [
    l.name,
    number(l.requestsPerSecond),
    number(l.eventsPerSecond),
    number(l.p50Ms, 1),
    number(l.p99Ms, 1),
    number(l.cpuMicrosPerRequest),
    share(l.generatorCpuShare),
    l.failures,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const render = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [render(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(render)].join('\n');
}

export function formatTargets(checks: TargetCheck[]): string {
  return checks.map((c) => `  [${c.pass ? 'PASS' : 'FAIL'}] ${c.description}: ${c.actual}`).join('\n');
}
