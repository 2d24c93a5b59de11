// Process entry: load config → build services → build app → listen → shut down gracefully.
import { pino } from 'pino';
import { ConfigError, loadConfig, type Config } from './config.js';
import { createServices } from './services.js';
import { buildApp, logDestination, loggerOptions } from './http/app.js';
import { startDelivery } from './delivery.js';
import { narrateMigrations } from './services/migration-narration.js';
import { limitHeapGrowth } from './services/heap-growth.js';

async function start(config: Config): Promise<void> {
  limitHeapGrowth();
  // Made before the services so that a long upgrade of the schema is told in the log while it runs.
  const log = pino(loggerOptions(config.logLevel), logDestination());
  const services = await createServices(config, {
    onMigration: narrateMigrations((level, message) => log[level](message)),
    log,
  });
  const app = await buildApp(services, { loggerInstance: log });
  for (const deprecation of config.deprecations) app.log.warn(deprecation);
  // SQLite: the key and subject tails rebuilt before the first request, the key filter built in the background
  // (until then the writer probes event_keys for every key: slower, never wrong).
  services.storage.capabilities.eventIndexes
    ?.warm()
    .catch((error: unknown) =>
      app.log.warn(
        { err: error },
        'warming the SQLite event indexes failed; the first write takes the rows in instead',
      ),
    );
  const migration = services.storage.migration;
  if (migration !== undefined && migration.applied.length > 0) {
    app.log.info({ applied: migration.applied.map((m) => m.version), version: migration.current }, 'database migrated');
  }

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'shutting down: no new connections, finishing in-flight requests');
    const timer = setTimeout(() => {
      app.log.error('shutdown took longer than INLET_SHUTDOWN_TIMEOUT_MS; exiting');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    timer.unref();
    try {
      // Fastify stops accepting, waits for in-flight requests (whose events are committed before
      // they are answered), then we flush bookkeeping and close storage.
      await app.close();
      app.log.info('HTTP server closed; flushing and closing storage');
      await services.close();
      app.log.info('stopped');
      process.exit(0);
    } catch (error) {
      app.log.error({ err: error }, 'error during shutdown');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  await app.listen({ port: config.port, host: config.host });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : config.port;
  app.log.info(
    {
      port,
      storage: services.storage.name,
      admin_api: config.adminToken !== undefined,
      // Where a newcomer opens the web console (issue 14), when the admin API is on.
      console:
        config.adminToken !== undefined && config.consoleEnabled ? `http://${config.host}:${port}/console` : null,
      legacy_flat: config.legacyFlat,
    },
    `Inlet listening on http://${config.host}:${port}`,
  );
  // Syncs every connected traffic source now and then every INLET_TRAFFIC_SYNC_INTERVAL_MS (0: off).
  services.traffic.scheduler.start(app.log);
  // Delivers every active destination this instance holds the lease of (events-out §6): in a worker
  // thread with its own storage connection unless INLET_DESTINATIONS_WORKER=false.
  startDelivery(services.destinations, config, app.log);
  // Runs erasure jobs (pending ones, and those whose instance died) and the retention task.
  services.erasure.start();
  services.retention.start();
  // SQLite: a verified backup into INLET_BACKUP_DIR every INLET_BACKUP_INTERVAL (off by default), in a worker thread.
  services.backups.start(app.log);
  // PostgreSQL: a warning when the server checkpoints because its WAL keeps reaching max_wal_size (every 5 min).
  services.checkpointWatch?.start(app.log);
}

try {
  await start(loadConfig());
} catch (error) {
  if (error instanceof ConfigError) {
    process.stderr.write(`inlet: configuration error: ${error.message}\n`);
    process.exit(2);
  }
  process.stderr.write(
    `inlet: failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
}
