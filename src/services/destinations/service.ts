// Destinations (events-out §6): the admin operations, and the deliverers that move each active
// destination's messages onward, at least once and in position order, never skipping one. This module wires
// the parts, each in its file:
// - admin.ts: create, list, show, edit, delete, replay, rotate the secret, the delivery log (input.ts parses
//   the fields every type shares);
// - runner.ts: the passes, every `pollMs`, that take or renew the destinations' leases across instances and
//   run a delivery loop for each destination this instance holds;
// - deliverer.ts: one destination's loop of cycles (cursor, lease fencing, order; retries.ts for failures);
// - kind.ts: what a destination type is; webhook.ts, nats.ts, postgres.ts (a PostgreSQL warehouse: warehouse/
//   its layout, names, types and loads) and parquet.ts (Parquet files: files/) are the types, each its admin
//   fields and the driver the deliverer hands messages to;
// - metrics.ts, pages.ts (a product's page reads shared between its destinations), messages.ts (the wire
//   form), worker.ts (delivery in a worker thread: the main thread's side).
// Time comes from `clock` (tests move it instead of waiting), randomness from `random`.
import { hostname } from 'node:os';
import { randomBase62 } from '../../domain/ids.js';
import type { DestinationStore, DestinationType } from '../../storage/types.js';
import type { Metrics } from '../metrics.js';
import { outboundGuard, type OutboundGuard } from '../outbound-guard.js';
import { createDestinationAdmin } from './admin.js';
import { createDeliverer, type DeliveryRun } from './deliverer.js';
import type { DestinationDriver, DestinationKinds, WarehouseLoad, WarehouseOptions } from './kind.js';
import type { MessageFormatter } from './messages.js';
import { createDestinationMetrics, type DeliveryMetrics } from './metrics.js';
import { natsKind } from './nats.js';
import { createPageReader } from './pages.js';
import { parquetKind } from './parquet.js';
import { postgresKind } from './postgres.js';
import { createDeliveryRunner } from './runner.js';
import { createDestinationTransformer, type DestinationTransformOptions } from './transformation.js';
import { webhookKind } from './webhook.js';

/** The destination types, each a module (kind.ts). */
export const DESTINATION_KINDS: DestinationKinds = {
  webhook: webhookKind,
  nats: natsKind,
  postgres: postgresKind,
  parquet: parquetKind,
};

/** INLET_WAREHOUSE_MAX_TABLES and INLET_WAREHOUSE_MAX_COLUMNS by default (warehouses.md §1). */
export const WAREHOUSE_LIMITS = { maxTables: 500, maxColumns: 1000 };

export interface DestinationClock {
  now(): number;
}

export interface DestinationServiceOptions {
  timeoutMs: number;
  disableAfterMs: number;
  pollMs: number;
  leaseMs: number;
  logRetentionMs: number;
  clock?: DestinationClock;
  random?: () => number;
  /** This instance's name in leases. */
  holder?: string;
  /** The outbound guard (services.ts makes it from the config; default: a strict one, public addresses only). */
  guard?: OutboundGuard;
  /** Stored message → its public JSON (resources/destination-messages.ts). */
  format: MessageFormatter;
  /**
   * Where the deliverer reports deliveries, failures and latencies. Default: this service's own
   * prom-client metrics. The delivery worker (worker.ts) passes a sink that forwards them
   * by message to the main thread, which applies them to its metrics (`deliveryMetrics` there).
   */
  deliveryMetrics?: DeliveryMetrics;
  /** The destination types (tests: a type of their own); default: webhook, NATS and the PostgreSQL warehouse. */
  kinds?: DestinationKinds;
  /** Warehouses' bounds: event tables per schema, property columns per table (default WAREHOUSE_LIMITS). */
  warehouse?: { maxTables: number; maxColumns: number };
  /** INLET_FILE_DESTINATIONS_ROOT: where Parquet destinations may write (undefined: the type is refused). */
  fileRoot?: string;
  /** What destinations' own transformations run with (undefined: a destination with steps is refused). */
  transformations?: DestinationTransformOptions;
}

/** Delivery run elsewhere (the delivery worker): admin changes poke it, close stops it. */
export interface RemoteDeliverer {
  poke(): void;
  close(): Promise<void>;
}

export function createDestinationService(
  store: DestinationStore,
  metrics: Metrics,
  options: DestinationServiceOptions,
) {
  const clock = options.clock ?? { now: () => Date.now() };
  const now = () => clock.now();
  const holder = options.holder ?? `${hostname()}:${process.pid}:${randomBase62(6)}`;
  const guard = options.guard ?? outboundGuard();
  const kinds = options.kinds ?? DESTINATION_KINDS;
  const prom = createDestinationMetrics(metrics, store);
  const report = options.deliveryMetrics ?? prom.delivery;
  const warehouse: WarehouseOptions = {
    ...(options.warehouse ?? WAREHOUSE_LIMITS),
    loaded: (destinationId, load) => warehouseLoaded(store, report, now, destinationId, load),
  };
  const drivers = Object.fromEntries(
    Object.entries(kinds).map(([type, kind]) => [
      type,
      kind.driver({
        timeoutMs: options.timeoutMs,
        guard,
        now,
        warehouse,
        fileRoot: options.fileRoot,
        orderPositions: (a, b) => store.orderPositions(a, b),
      }),
    ]),
  ) as Record<DestinationType, DestinationDriver>;
  const run: DeliveryRun = { stopped: false, abort: new AbortController(), shared: new Set(), clockOffset: 0 };
  const transform = createDestinationTransformer(options.transformations, {
    counted: (destinationId, figures) => report.transformed(destinationId, figures),
    failed: (destinationId, warnings) =>
      void store.addWarnings(destinationId, warnings, new Date(now()).toISOString()).catch(() => {}),
  });
  const deliverer = createDeliverer({
    store,
    // One page read (and one formatting) shared by the destinations of a product (pages.ts).
    pages: createPageReader(store, options.format),
    drivers,
    report,
    transform,
    run,
    holder,
    now,
    random: options.random ?? Math.random,
    leaseMs: options.leaseMs,
    disableAfterMs: options.disableAfterMs,
    pollMs: options.pollMs,
  });
  const runner = createDeliveryRunner({
    store,
    run,
    loop: deliverer.loop,
    drivers: Object.values(drivers),
    release: (held) => transform.prune(held),
    holder,
    now,
    pollMs: options.pollMs,
    leaseMs: options.leaseMs,
    logRetentionMs: options.logRetentionMs,
  });
  let remote: RemoteDeliverer | undefined;
  const poke = () => (remote === undefined ? runner.poke() : remote.poke());
  const admin = createDestinationAdmin({
    store,
    kinds,
    guard,
    timeoutMs: options.timeoutMs,
    fileRoot: options.fileRoot,
    checkTransformation: (value) => transform.check(value),
    now,
    poke,
    forget: (d) => drivers[d.type].forget(d.id),
  });

  return {
    ...admin,
    holder,
    /** This process's prom-client metrics of delivery (the delivery worker's reports are applied to them). */
    deliveryMetrics: prom.delivery,
    /** One pass: take or renew leases and start a delivery loop for each destination held. */
    tick: runner.tick,
    /** Asks for a pass soon (after an admin change). */
    poke,
    /** Whether any product has a destination: the delivery worker's host starts the thread with the first. */
    hasDestinations: (): Promise<boolean> => store.any(),
    /** Counts a restart of the delivery worker (the worker's host calls it). */
    workerRestarted: prom.workerRestarted,
    /** Delivery runs elsewhere from now on (the delivery worker): poke() and close() go to it. */
    useRemote(deliverer: RemoteDeliverer): void {
      remote = deliverer;
    },
    /** Starts the periodic passes (main.ts). */
    start: runner.start,
    /** Waits for the delivery loops now running (tests). */
    idle: runner.idle,
    async close(): Promise<void> {
      await remote?.close();
      await runner.close();
      transform.close();
    },
  };
}

/**
 * A warehouse load's figures to the metrics, and onto the destination its warnings (a limit reached) and the
 * columns it added and widened. Awaited by the driver, so the destination shows them once its cursor moves; a
 * failed write loses those figures, never the load.
 */
async function warehouseLoaded(
  store: DestinationStore,
  report: DeliveryMetrics,
  now: () => number,
  destinationId: string,
  load: WarehouseLoad,
): Promise<void> {
  report.loaded(destinationId, load);
  await Promise.all([
    load.warnings.length > 0 && store.addWarnings(destinationId, load.warnings, new Date(now()).toISOString()),
    (load.columnsAdded > 0 || load.widenings > 0) &&
      store.countLayoutChanges(destinationId, load.columnsAdded, load.widenings),
  ]).catch(() => {});
}

export type DestinationService = ReturnType<typeof createDestinationService>;
