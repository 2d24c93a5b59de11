// Composition root of what transformation steps run with (transformations.md §3–4): the enrichment modules and
// the function sandbox, built from the settings. The main thread builds one for product transformations and
// destinations' checks (src/services.ts); the delivery worker builds its own for the destinations' steps it
// runs (src/delivery-worker.ts), its sandbox a thread of that worker; both build their destination service with
// the same settings (destinationServiceOptions).
import { randomBytes } from 'node:crypto';
import { ConfigError, type Config } from './config.js';
import {
  GeoIpDatabaseError,
  isBot,
  openGeoIp,
  parseUserAgent,
  type GeoIp,
} from './services/transformations/enrichment.js';
import { sandboxCompiler, type TransformRuntime } from './services/transformations/runtime.js';
import { createSandbox } from './services/transformations/sandbox.js';
import type { DestinationTransformOptions } from './services/destinations/transformation.js';
import type { DestinationServiceOptions } from './services/destinations/service.js';
import type { OutboundGuard } from './services/outbound-guard.js';
import { destinationMessage } from './resources/destination-messages.js';
import type { Storage } from './storage/types.js';

/**
 * The enrichment modules and the function sandbox of transformation steps. The MaxMind database is opened once,
 * at start (a file that cannot be read stops the start with an error naming INLET_GEOIP_DATABASE); the sandbox's
 * thread starts with the first function compiled.
 */
export async function createTransformRuntime(config: Config): Promise<TransformRuntime> {
  let geoip: GeoIp | undefined;
  if (config.geoipDatabase !== undefined) {
    try {
      geoip = await openGeoIp(config.geoipDatabase);
    } catch (error) {
      throw error instanceof GeoIpDatabaseError ? new ConfigError(error.message) : error;
    }
  }
  return {
    enrichers: {
      // Both remember their answers (a bounded cache of recent user agents); the parser's are shared between events,
      // frozen (a step that writes inside one copies it).
      userAgent: (userAgent) => parseUserAgent(userAgent) as unknown as Record<string, unknown>,
      isBot,
      ...(geoip === undefined
        ? {}
        : { geoip: (ip: string) => geoip.lookup(ip) as Record<string, unknown> | undefined }),
    },
    functions: sandboxCompiler(
      createSandbox({ cpuMs: config.transformFunctionCpuMs, memoryMb: config.transformFunctionMemoryMb }),
    ),
  };
}

/** What destinations' own transformations run with: this runtime, and each product's secret (for `mask` `hash`). */
export function destinationTransformOptions(
  config: Config,
  storage: Pick<Storage, 'transformations'>,
  runtime: TransformRuntime,
): DestinationTransformOptions {
  return {
    runtime,
    geoip: config.geoipDatabase !== undefined,
    secret: (productId) => storage.transformations.secret(productId, () => randomBytes(32).toString('hex')),
  };
}

/**
 * The destination service's settings, the same in the server's process and in the delivery worker's thread: the
 * config's timeouts, lease, limits and file root, the outbound guard, the message format and destinations' own
 * transformations.
 */
export function destinationServiceOptions(
  config: Config,
  storage: Pick<Storage, 'transformations'>,
  runtime: TransformRuntime,
  guard: OutboundGuard,
): DestinationServiceOptions {
  return {
    timeoutMs: config.destinationTimeoutMs,
    disableAfterMs: config.destinationDisableAfterMs,
    pollMs: config.destinationPollMs,
    leaseMs: config.destinationLeaseMs,
    logRetentionMs: config.destinationLogRetentionDays * 86_400_000,
    warehouse: { maxTables: config.warehouseMaxTables, maxColumns: config.warehouseMaxColumns },
    ...(config.fileDestinationsRoot === undefined ? {} : { fileRoot: config.fileDestinationsRoot }),
    guard,
    format: destinationMessage,
    transformations: destinationTransformOptions(config, storage, runtime),
  };
}
