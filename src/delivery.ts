// Composition root of destination delivery (events-out §6): where the deliverers run in this process.
// By default in a worker thread with its own storage connection (src/delivery-worker.ts, managed by
// services/destinations/worker.ts), off the event loop that serves requests; INLET_DESTINATIONS_WORKER=false,
// or an in-memory SQLite database (which a second connection cannot open), keeps them on the main thread.
import type { Config } from './config.js';
import type { DestinationService } from './services/destinations/service.js';
import { startDeliveryWorker, type DestinationWorker, type WorkerLog } from './services/destinations/worker.js';
import { sqlitePath } from './storage/connect.js';

/** What the worker thread builds its storage and deliverers from. */
export interface DeliverySettings {
  config: Config;
  postgresSchema?: string;
}

/** Whether delivery can run in a worker for this configuration (a file database or PostgreSQL). */
export function deliveryWorkerPossible(config: Config): boolean {
  return (
    config.destinationsWorker &&
    !(config.databaseUrl.startsWith('sqlite:') && sqlitePath(config.databaseUrl) === ':memory:')
  );
}

/** Starts delivery: in a worker (its handle returned) when possible and configured, else on this thread. */
export function startDelivery(
  service: DestinationService,
  config: Config,
  log: WorkerLog,
  options: { postgresSchema?: string } = {},
): DestinationWorker | undefined {
  if (!deliveryWorkerPossible(config)) {
    if (config.destinationsWorker)
      log.info(
        {},
        'destinations: delivering on the main thread (an in-memory SQLite database cannot be opened by a worker)',
      );
    service.start();
    return undefined;
  }
  // The compiled .js next to this module, or the .ts source under tsx.
  const entry = new URL(`./delivery-worker.${import.meta.url.endsWith('.ts') ? 'ts' : 'js'}`, import.meta.url);
  const settings: DeliverySettings = {
    config,
    ...(options.postgresSchema === undefined ? {} : { postgresSchema: options.postgresSchema }),
  };
  return startDeliveryWorker(service, entry, settings, log, { checkMs: config.destinationPollMs });
}
