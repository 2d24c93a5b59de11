// The metrics of what the storage tells about itself (the port's telemetry): each figure its backend gives is
// registered, whichever database that is.
import type { Registry } from 'prom-client';
import type { StorageTelemetry } from '../storage/types.js';
import {
  registerCheckpointMetrics,
  registerEventKeyMetrics,
  registerEventSubjectMetrics,
} from './checkpoint-metrics.js';
import { registerPoolMetrics, registerReplicationMetrics } from './pool-metrics.js';
import { registerWalMetrics } from './postgres-checkpoints.js';

export function registerStorageMetrics(registry: Registry, telemetry: StorageTelemetry): void {
  if (telemetry.poolStats !== undefined) registerPoolMetrics(registry, telemetry.poolStats);
  if (telemetry.replicationStatus !== undefined) registerReplicationMetrics(registry, telemetry.replicationStatus);
  if (telemetry.walStats !== undefined) registerWalMetrics(registry, telemetry.walStats);
  if (telemetry.observeCheckpoints !== undefined) registerCheckpointMetrics(registry, telemetry.observeCheckpoints);
  if (telemetry.eventKeyStats !== undefined) registerEventKeyMetrics(registry, telemetry.eventKeyStats);
  if (telemetry.eventSubjectStats !== undefined) registerEventSubjectMetrics(registry, telemetry.eventSubjectStats);
}
