// The `inlet` command run in-process against a test database, as an operator runs it on the server's
// machine: same database, found through the environment only (the CLI reads nothing else), so on
// PostgreSQL the test schema travels in the URL as libpq's `options=-c search_path=…`.
import { after, before } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { runCli } from '../../src/cli/main.js';
import { buildApp } from '../../src/http/app.js';
import type { Config } from '../../src/config.js';
import type { Services } from '../../src/services.js';
import { createTestServices, reusableDatabase, type TestDatabase } from '../helpers.js';

export type CliEnv = Record<string, string>;

export interface CliResult {
  code: number;
  /** What the command printed to stdout, lines joined with \n. */
  out: string;
  err: string;
}

/** The CLI's environment for `database`. */
export function cliEnv(database: TestDatabase): CliEnv {
  const { databaseUrl, postgresSchema } = database;
  const url =
    postgresSchema === undefined
      ? databaseUrl
      : `${databaseUrl}${databaseUrl.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${postgresSchema}`)}`;
  // The outbound guard as the test runner sets it: loopback only (the fake providers listen there).
  return {
    INLET_DATABASE_URL: url,
    INLET_LOG_LEVEL: 'silent',
    INLET_OUTBOUND_ALLOW: '127.0.0.0/8,::1',
    INLET_OUTBOUND_ALLOW_PRIVATE: 'true',
  };
}

/** An empty database for tests that start with the CLI (reusableDatabase: on PostgreSQL a migrated schema), and the CLI's environment for it. */
export async function cliDatabase(): Promise<{ database: TestDatabase; env: CliEnv }> {
  const database = reusableDatabase();
  await database.prepare?.();
  // The schema the URL names must exist on PostgreSQL (the CLI would not create it); createServices
  // creates and migrates it. A SQLite file the CLI creates itself.
  if (database.postgresSchema !== undefined) await (await createTestServices({}, database)).services.close();
  return { database, env: cliEnv(database) };
}

/** `inlet …argv` with `env`: its exit code and what it printed. */
export async function inlet(env: CliEnv, ...argv: string[]): Promise<CliResult> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, { out: (line) => out.push(line), err: (line) => err.push(line) }, env);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/**
 * For a test file that starts with the CLI: an empty database opened in `before` and dropped in
 * `after` (the hooks are registered here), and `cli(…argv)` against it.
 */
export function cliTestDatabase(): { cli(...argv: string[]): Promise<CliResult>; database(): TestDatabase } {
  let opened: { database: TestDatabase; env: CliEnv } | undefined;
  before(async () => {
    opened = await cliDatabase();
  });
  after(async () => opened?.database.drop());
  const current = () => {
    if (opened === undefined) throw new Error('the CLI test database is opened in before()');
    return opened;
  };
  return { cli: (...argv) => inlet(current().env, ...argv), database: () => current().database };
}

/**
 * For a test file that runs the CLI beside a running app on the same database, as an operator does beside a
 * server: the app (its services built with `overrides`), `cli(…argv)` against its database, and a temporary
 * folder for the files the commands read, all opened in `before` and closed in `after` (hooks registered here).
 */
export function cliBesideApp(overrides: Partial<Config> = {}): {
  app(): FastifyInstance;
  services(): Services;
  dir(): string;
  cli(...argv: string[]): Promise<CliResult>;
} {
  let opened:
    { database: TestDatabase; env: CliEnv; services: Services; app: FastifyInstance; dir: string } | undefined;
  before(async () => {
    const database = reusableDatabase();
    await database.prepare?.();
    const { services } = await createTestServices(overrides, database);
    const app = await buildApp(services, { logger: false });
    opened = { database, env: cliEnv(database), services, app, dir: mkdtempSync(join(tmpdir(), 'inlet-cli-')) };
  });
  after(async () => {
    if (opened === undefined) return;
    await opened.app.close();
    await opened.services.close();
    await opened.database.drop();
    rmSync(opened.dir, { recursive: true, force: true });
  });
  const current = () => {
    if (opened === undefined) throw new Error('the app beside the CLI is opened in before()');
    return opened;
  };
  return {
    app: () => current().app,
    services: () => current().services,
    dir: () => current().dir,
    cli: (...argv) => inlet(current().env, ...argv),
  };
}
