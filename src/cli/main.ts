// The `inlet` command. Thin: parses arguments, builds services from the same config as the server,
// calls one service, prints. Exit codes: 0 ok, 1 failure, 2 usage or configuration error.
import { ConfigError, loadConfig } from '../config.js';
import { AppError } from '../domain/errors.js';
import { createServices } from '../services.js';
import { narrateMigrations } from '../services/migration-narration.js';
import { parseCommandArgs, UsageError, type CliIo, type Command } from './command.js';
import { coreCommands } from './core-commands.js';
import { rejectionCommands } from './rejection-commands.js';
import { identityCommands } from './identity-commands.js';
import { eventCommands } from './event-commands.js';
import { trafficCommands } from './traffic-commands.js';
import { destinationCommands } from './destination-commands.js';
import { governanceCommands } from './governance-commands.js';
import { transformationCommands } from './transformation-commands.js';
import { erasureCommands } from './erasure-commands.js';
import { backupCommands } from './backup-command.js';

export const commands: Command[] = [
  ...coreCommands,
  ...identityCommands,
  ...eventCommands,
  ...trafficCommands,
  ...rejectionCommands,
  ...destinationCommands,
  ...governanceCommands,
  ...transformationCommands,
  ...erasureCommands,
  ...backupCommands,
];

function help(io: CliIo): void {
  io.out('Usage: inlet <command> [options]\n');
  io.out('  serve                      start the HTTP server (same as npm start)');
  for (const command of commands) io.out(`  ${command.usage}\n      ${command.summary}`);
  io.out(
    '\nThe database is INLET_DATABASE_URL (default sqlite:./data/inlet.db). --json prints machine-readable output.',
  );
}

export async function runCli(
  argv: string[],
  io: CliIo = {
    out: (l) => process.stdout.write(`${l}\n`),
    err: (l) => process.stderr.write(`${l}\n`),
    ...(process.stderr.isTTY ? { progress: (text: string) => process.stderr.write(`\r\x1b[K${text}`) } : {}),
  },
  env = process.env,
): Promise<number> {
  if (argv.length === 0 || argv[0] === 'help' || argv[0] === '--help' || argv[0] === '-h') {
    help(io);
    return argv.length === 0 ? 2 : 0;
  }
  const command = [...commands]
    .sort((a, b) => b.path.length - a.path.length)
    .find((c) => c.path.every((word, i) => argv[i] === word));
  if (command === undefined) {
    io.err(`inlet: unknown command "${argv.join(' ')}". Run "inlet help".`);
    return 2;
  }
  let parsed;
  try {
    parsed = parseCommandArgs(command, argv.slice(command.path.length));
  } catch (error) {
    io.err(`inlet: ${(error as Error).message}\nusage: ${command.usage}`);
    return 2;
  }
  if (parsed.values.help) {
    io.out(`usage: ${command.usage}\n${command.summary}`);
    return 0;
  }
  let services;
  try {
    const config = loadConfig(env);
    for (const deprecation of config.deprecations) io.err(`inlet: warning: ${deprecation}`);
    services = await createServices(config, {
      defaultMetrics: false,
      command: true,
      // An upgrade's migrations are told on stderr as they run; creating a new database's schema is not news.
      onMigration: narrateMigrations((level, message) => level === 'info' && io.err(`inlet: ${message}`), {
        freshLevel: 'debug',
      }),
    });
  } catch (error) {
    io.err(
      `inlet: ${error instanceof ConfigError ? `configuration error: ${error.message}` : `cannot open the database: ${(error as Error).message}`}`,
    );
    return 2;
  }
  try {
    return await command.run({
      services,
      args: parsed.positionals,
      values: parsed.values,
      json: parsed.values.json === true,
      io,
    });
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`inlet: ${error.message}\nusage: ${command.usage}`);
      return 2;
    }
    if (error instanceof AppError) {
      io.err(parsed.values.json ? JSON.stringify(error.toProblem()) : `inlet: ${error.message}`);
      return 1;
    }
    io.err(`inlet: ${(error as Error).stack ?? String(error)}`);
    return 1;
  } finally {
    await services.close();
  }
}
