// The shape of a CLI command and small output helpers shared by all commands.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Services } from '../services.js';

export interface CliIo {
  out: (line: string) => void;
  err: (line: string) => void;
  /** Rewrites one status line on stderr; set only when stderr is a terminal ('' clears it). */
  progress?: (text: string) => void;
}

export interface Command {
  /** Words that select the command, e.g. ['keys', 'create']. */
  path: string[];
  usage: string;
  summary: string;
  options?: ParseArgsConfig['options'];
  run(ctx: {
    services: Services;
    args: string[];
    values: Record<string, string | boolean | undefined>;
    json: boolean;
    io: CliIo;
  }): Promise<number>;
}

export class UsageError extends Error {}

export function parseCommandArgs(command: Command, argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' }, ...(command.options ?? {}) },
    allowPositionals: true,
    strict: true,
  });
  return { values: values as Record<string, string | boolean | undefined>, positionals };
}

export function requireOption(values: Record<string, string | boolean | undefined>, name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value.trim() === '') throw new UsageError(`--${name} is required`);
  return value;
}

/** A plain aligned table for humans; `--json` prints the data instead. */
export function table(rows: Array<Record<string, unknown>>, columns: string[]): string {
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : String(v));
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...rows.map((r) => line(columns.map((c) => cell(r[c]))))].join(
    '\n',
  );
}
