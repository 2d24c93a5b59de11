// Destinations (events-out §6): the admin operations, and the deliverers that move each active
// destination's messages onward, at least once and in position order, never skipping one.
//
// Delivery, per destination:
// - One deliverer across instances: a lease on the destination row (destination-store.ts). Every
//   instance runs `tick()` every `pollMs`: it takes or renews the leases it can and runs a delivery
//   loop for each destination it holds. A lease lasts `leaseMs` (15 s by default) and is renewed well
//   before it ends, so when its instance dies another takes over within leaseMs + pollMs.
// - The loop reads the messages after the cursor, skips those the filter does not want, sends up to
//   `max_messages` (waiting up to `max_wait_ms` for a fuller batch), and moves the cursor only after the
//   receiver accepted, in the same fenced write that records the success. A crash at any point
//   re-delivers from the stored cursor with the same message ids.
// - A failure holds the destination back (no dead-lettering): the next attempt is scheduled with
//   exponential backoff and full jitter (RETRY_DELAYS_MS), or after Retry-After on 429/503. 410
//   disables at once; `disableAfterMs` (24 h) without a success disables too. Re-enabling resumes from
//   the cursor.
// Time comes from `clock` (tests move it instead of waiting), randomness from `random`.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Counter, Gauge, Histogram } from 'prom-client';
import { AppError, validationError, type FieldError } from '../../domain/errors.js';
import { decodeCursor } from '../../domain/event-cursor.js';
import { decodeDestinationCursor } from '../../domain/destinations.js';
import { prefixedId, randomBase62 } from '../../domain/ids.js';
import type {
  DestinationBatch,
  DestinationCredentials,
  DestinationCursor,
  DestinationFilter,
  DestinationRecord,
  DestinationStatus,
  DestinationStore,
  DestinationType,
  DeliveryRecord,
  DeliveryStatePatch,
  MessageType,
  StoredMessage,
} from '../../storage/types.js';
import {
  bodyOf,
  bytesOf,
  MESSAGE_TYPES,
  matches,
  subjectCache,
  webhookIdOf,
  type BodyScratch,
  type MessageFormatter,
  type WireMessage,
} from './messages.js';
import { createNatsSender, natsHosts, type NatsSender } from './nats.js';
import { createPageReader } from './pages.js';
import { sendWebhook, type SendOutcome } from './webhook.js';
import { outboundGuard, OutboundRefused, type OutboundGuard } from '../outbound-guard.js';
import { scrapeRead, type Metrics } from '../metrics.js';

/** The retry schedule before jitter: ~5 s, 30 s, 2 min, 10 min, 30 min, 1 h, then hourly. */
export const RETRY_DELAYS_MS = [5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000];
const MIN_RETRY_MS = 1_000;
/** How long a rotated-out secret still signs (events-out §6). */
export const SECRET_OVERLAP_MS = 24 * 3_600_000;
/** Messages read per page while looking for a batch. */
const READ_PAGE = 500;
/** Messages sent per delivery cycle at most (one read, one state commit); webhooks: whole batches of max_messages. */
const CYCLE_MESSAGES = 1000;
/** Lag is counted up to this many messages per log (a count over a huge backlog would be slow). */
export const LAG_CAP = 1_000_000;

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
}

/** What a deliverer reports; the main thread's prom-client metrics, or a forwarder in the delivery worker. */
export interface DeliveryMetrics {
  delivered(destination: string, messages: number): void;
  failed(destination: string): void;
  /** Seconds from the newest accepted message's receipt to its acceptance. */
  latency(destination: string, seconds: number): void;
  /** Seconds one attempt took. */
  attempt(destination: string, seconds: number): void;
}

/** Delivery run elsewhere (the delivery worker): admin changes poke it, close stops it. */
export interface RemoteDeliverer {
  poke(): void;
  close(): Promise<void>;
}

export interface DestinationInput {
  type?: unknown;
  name?: unknown;
  filter?: unknown;
  batch?: unknown;
  start?: unknown;
  url?: unknown;
  servers?: unknown;
  subject?: unknown;
  credentials?: unknown;
  status?: unknown;
}

export interface DestinationView extends DestinationRecord {
  lag: number;
}

export function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** The delay before attempt `failures + 1`, with full jitter (uniform in [1 s, base]). */
export function retryDelay(failures: number, random: () => number): number {
  const base = RETRY_DELAYS_MS[Math.min(failures - 1, RETRY_DELAYS_MS.length - 1)]!;
  return Math.max(MIN_RETRY_MS, Math.round(random() * base));
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

function stringList(
  value: unknown,
  pointer: string,
  errors: FieldError[],
  allowed?: readonly string[],
): string[] | undefined {
  if (value === undefined) return undefined;
  if (
    !Array.isArray(value) ||
    value.length === 0 ||
    value.length > 100 ||
    !value.every((v) => typeof v === 'string' && v.length > 0 && v.length <= 200)
  ) {
    errors.push({ pointer, message: 'must be a non-empty list of up to 100 non-empty strings' });
    return undefined;
  }
  if (allowed !== undefined) {
    const bad = value.find((v) => !allowed.includes(v as string));
    if (bad !== undefined) errors.push({ pointer, message: `"${bad as string}" is not one of ${allowed.join(', ')}` });
  }
  return [...new Set(value as string[])];
}

function parseFilter(value: unknown, errors: FieldError[]): DestinationFilter | undefined {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/filter', message: 'must be an object' });
    return undefined;
  }
  const raw = value as Record<string, unknown>;
  for (const key of Object.keys(raw)) {
    if (!['types', 'canonical_names', 'sources'].includes(key))
      errors.push({ pointer: `/filter/${key}`, message: 'is not a filter (types, canonical_names, sources)' });
  }
  const filter: DestinationFilter = {};
  const types = stringList(raw.types, '/filter/types', errors, MESSAGE_TYPES);
  if (types !== undefined) filter.types = types as MessageType[];
  const names = stringList(raw.canonical_names, '/filter/canonical_names', errors);
  if (names !== undefined) filter.canonicalNames = names;
  const sources = stringList(raw.sources, '/filter/sources', errors);
  if (sources !== undefined) filter.sources = sources;
  return filter;
}

function parseBatch(value: unknown, errors: FieldError[]): DestinationBatch | undefined {
  if (value === undefined || value === null) return { maxMessages: 1, maxWaitMs: 0 };
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/batch', message: 'must be an object' });
    return undefined;
  }
  const raw = value as Record<string, unknown>;
  for (const key of Object.keys(raw)) {
    if (!['max_messages', 'max_wait_ms'].includes(key))
      errors.push({ pointer: `/batch/${key}`, message: 'is not a batch setting (max_messages, max_wait_ms)' });
  }
  const max = raw.max_messages ?? 1;
  const wait = raw.max_wait_ms ?? 0;
  if (!Number.isInteger(max) || (max as number) < 1 || (max as number) > 1000)
    errors.push({ pointer: '/batch/max_messages', message: 'must be a whole number from 1 to 1000' });
  if (!Number.isInteger(wait) || (wait as number) < 0 || (wait as number) > 60_000)
    errors.push({ pointer: '/batch/max_wait_ms', message: 'must be a whole number of milliseconds from 0 to 60000' });
  return { maxMessages: max as number, maxWaitMs: wait as number };
}

function parseName(value: unknown, errors: FieldError[]): string | undefined {
  if (typeof value !== 'string' || value.trim() === '' || value.length > 200) {
    errors.push({ pointer: '/name', message: 'must be a non-empty string of at most 200 characters' });
    return undefined;
  }
  return value.trim();
}

function parseUrl(value: unknown, errors: FieldError[]): string | undefined {
  if (typeof value !== 'string' || value.length > 2000) {
    errors.push({ pointer: '/url', message: 'must be an http or https URL' });
    return undefined;
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    errors.push({ pointer: '/url', message: 'must be an absolute http or https URL' });
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    errors.push({ pointer: '/url', message: 'must use http or https' });
  if (url.username !== '' || url.password !== '')
    errors.push({ pointer: '/url', message: 'must not carry credentials' });
  return url.toString();
}

function parseCredentials(value: unknown, errors: FieldError[]): DestinationCredentials | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    errors.push({ pointer: '/credentials', message: 'must be an object with user and pass, or token' });
    return null;
  }
  const raw = value as Record<string, unknown>;
  const credentials: DestinationCredentials = {};
  for (const key of Object.keys(raw)) {
    if (!['user', 'pass', 'token'].includes(key) || typeof raw[key] !== 'string')
      errors.push({ pointer: `/credentials/${key}`, message: 'must be user, pass or token, a string' });
    else credentials[key as 'user' | 'pass' | 'token'] = raw[key] as string;
  }
  return credentials;
}

async function guard(check: () => Promise<unknown>, pointer: string): Promise<void> {
  try {
    await check();
  } catch (error) {
    if (error instanceof OutboundRefused)
      throw validationError([{ pointer, message: `refused by the outbound guard: ${error.message}` }]);
    throw error;
  }
}

export function createDestinationService(
  store: DestinationStore,
  metrics: Metrics,
  options: DestinationServiceOptions,
) {
  const clock = options.clock ?? { now: () => Date.now() };
  const random = options.random ?? Math.random;
  const holder = options.holder ?? `${hostname()}:${process.pid}:${randomBase62(6)}`;
  const outbound = options.guard ?? outboundGuard();
  const nats: NatsSender = createNatsSender({ timeoutMs: options.timeoutMs, guard: outbound });
  // One page read (and one formatting) shared by the destinations of a product (pages.ts).
  const pages = createPageReader(store, options.format);
  const subjects = subjectCache();
  /** Per webhook destination: the memory its bodies are written into (bodyOf), kept while it delivers. */
  const scratches = new Map<string, BodyScratch>();
  const scratchOf = (id: string): BodyScratch => {
    let scratch = scratches.get(id);
    if (scratch === undefined) scratches.set(id, (scratch = { buffer: Buffer.alloc(0) }));
    return scratch;
  };
  const iso = () => new Date(clock.now()).toISOString();

  const delivered = new Counter({
    name: 'inlet_destination_messages_delivered_total',
    help: 'Messages a destination accepted, by destination',
    labelNames: ['destination'],
    registers: [metrics.registry],
  });
  const failed = new Counter({
    name: 'inlet_destination_failed_attempts_total',
    help: 'Delivery attempts that failed (non-2xx, timeout, connection error, NATS publish not acknowledged), by destination',
    labelNames: ['destination'],
    registers: [metrics.registry],
  });
  const latency = new Histogram({
    name: 'inlet_destination_delivery_latency_seconds',
    help: 'From an event being received to the destination accepting it (the newest message of each delivery), by destination',
    labelNames: ['destination'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600],
    registers: [metrics.registry],
  });
  const attemptDuration = new Histogram({
    name: 'inlet_destination_attempt_duration_seconds',
    help: 'Duration of one delivery attempt (HTTP request or NATS publishes), by destination',
    labelNames: ['destination'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 30],
    registers: [metrics.registry],
  });
  const promMetrics: DeliveryMetrics = {
    delivered: (destination, messages) => delivered.inc({ destination }, messages),
    failed: (destination) => failed.inc({ destination }),
    latency: (destination, seconds) => latency.observe({ destination }, seconds),
    attempt: (destination, seconds) => attemptDuration.observe({ destination }, seconds),
  };
  const report = options.deliveryMetrics ?? promMetrics;
  const workerRestarts = new Counter({
    name: 'inlet_destination_worker_restarts_total',
    help: 'Times the delivery worker thread died and was started again (services/destinations/worker.ts)',
    registers: [metrics.registry],
  });
  new Gauge({
    name: 'inlet_destination_lag_messages',
    help: `Messages after a destination's cursor (before its filter; counted up to ${LAG_CAP} per log), by destination and status`,
    labelNames: ['destination', 'status'],
    registers: [metrics.registry],
    async collect() {
      this.reset();
      // Without the database (an outage, a failover) the scrape goes on without these samples.
      const lags = await scrapeRead(async () => {
        const found: Array<{ d: DestinationRecord; lag: number }> = [];
        // One after the other, as before: a scrape takes one pool connection, not one per destination.
        for (const d of await store.listAll()) found.push({ d, lag: await store.lag(d.productId, d.cursor, LAG_CAP) });
        return found;
      });
      for (const { d, lag } of lags ?? []) this.set({ destination: d.id, status: d.status }, lag);
    },
  });

  // ---- admin operations ------------------------------------------------------------------------

  async function mustGet(productId: string, id: string): Promise<DestinationRecord> {
    const found = await store.get(productId, id);
    if (found === undefined) throw new AppError('not_found', `No destination "${id}" in product "${productId}".`);
    return found;
  }

  async function view(record: DestinationRecord): Promise<DestinationView> {
    return { ...record, lag: await store.lag(record.productId, record.cursor, LAG_CAP) };
  }

  /** A cursor from `start`/`from`: "now", "beginning", an events cursor, a destination cursor, or (replay) a received time. */
  async function cursorFrom(
    productId: string,
    value: unknown,
    pointer: string,
    allowTime: boolean,
  ): Promise<DestinationCursor> {
    if (value === undefined || value === 'now') return store.endCursor(productId);
    if (value === 'beginning') return { event: null, identity: null };
    if (typeof value === 'string') {
      const destinationCursor = decodeDestinationCursor(value);
      if (destinationCursor !== undefined) {
        const valid = (p: string | null) => p === null || store.isEventPosition(p);
        if (valid(destinationCursor.event) && valid(destinationCursor.identity)) return destinationCursor;
      }
      const position = decodeCursor(value);
      if (position !== undefined && store.isEventPosition(position)) return store.cursorAfterEvent(productId, position);
      if (allowTime && RFC3339.test(value) && !Number.isNaN(Date.parse(value))) {
        // Events are received before they commit, so one received just before `at` may have committed
        // after one received at `at`: the replay starts RECEIVE slack earlier (a few more re-deliveries, none missed).
        const before = await store.eventPositionBefore(
          productId,
          new Date(Date.parse(value) - 10 * 60_000).toISOString(),
        );
        return before === null ? { event: null, identity: null } : store.cursorAfterEvent(productId, before);
      }
    }
    const expected = allowTime
      ? 'a cursor (from a destination or the event reads) or an RFC 3339 time'
      : '"now", "beginning" or a cursor (from a destination or the event reads)';
    throw validationError([{ pointer, message: `must be ${expected}` }]);
  }

  let remote: RemoteDeliverer | undefined;

  const service = {
    holder,
    /** This process's prom-client metrics of delivery (the delivery worker's reports are applied to them). */
    deliveryMetrics: promMetrics,

    async create(
      productId: string,
      input: DestinationInput,
    ): Promise<{ destination: DestinationView; secret: string | null }> {
      const errors: FieldError[] = [];
      const type = input.type;
      if (type !== 'webhook' && type !== 'nats')
        errors.push({ pointer: '/type', message: 'must be "webhook" or "nats"' });
      const name = parseName(input.name, errors);
      const filter = parseFilter(input.filter, errors);
      const batch = parseBatch(input.batch, errors);
      let config: DestinationRecord['config'] = {};
      let credentials: DestinationCredentials | null = null;
      if (type === 'webhook') {
        const url = parseUrl(input.url, errors);
        if (url !== undefined) config = { url };
        for (const key of ['servers', 'subject', 'credentials'] as const)
          if (input[key] !== undefined) errors.push({ pointer: `/${key}`, message: 'is for NATS destinations' });
      } else if (type === 'nats') {
        const servers = stringList(input.servers, '/servers', errors);
        if (servers !== undefined) {
          try {
            natsHosts(servers);
          } catch {
            errors.push({ pointer: '/servers', message: 'must be NATS server URLs such as nats://host:4222' });
          }
        }
        if (
          typeof input.subject !== 'string' ||
          input.subject.trim() === '' ||
          input.subject.length > 255 ||
          /\s/.test(input.subject)
        ) {
          errors.push({
            pointer: '/subject',
            message: 'must be a subject template such as inlet.{product_id}.{canonical_name}',
          });
        }
        config = { servers: servers ?? [], subject: String(input.subject) };
        credentials = parseCredentials(input.credentials, errors);
        if (input.url !== undefined) errors.push({ pointer: '/url', message: 'is for webhook destinations' });
      }
      if (errors.length > 0) throw validationError(errors);
      if (type === 'webhook') await guard(() => outbound.checkUrl(config.url!), '/url');
      else for (const host of natsHosts(config.servers!)) await guard(() => outbound.checkHost(host), '/servers');
      const cursor = await cursorFrom(productId, input.start, '/start', false);
      const now = iso();
      const secret = type === 'webhook' ? newSecret() : null;
      const record: DestinationRecord = {
        id: prefixedId('dst'),
        productId,
        type: type as DestinationType,
        name: name!,
        status: 'active',
        disabledReason: null,
        config,
        credentials,
        filter: filter!,
        batch: batch!,
        secret,
        previousSecret: null,
        previousSecretUntil: null,
        cursor,
        consecutiveFailures: 0,
        failingSince: null,
        nextAttemptAt: null,
        lastSuccessAt: null,
        lastError: null,
        lastErrorAt: null,
        delivered: 0,
        createdAt: now,
        updatedAt: now,
        leaseHolder: null,
        leaseUntil: 0,
      };
      await store.insert(record);
      service.poke();
      return { destination: await view(record), secret };
    },

    async list(productId: string): Promise<DestinationView[]> {
      return Promise.all((await store.list(productId)).map(view));
    },

    async show(productId: string, id: string): Promise<DestinationView> {
      return view(await mustGet(productId, id));
    },

    /** name, url, filter, batch, status (paused / active: resume, or re-enable a disabled one). */
    async update(productId: string, id: string, input: DestinationInput): Promise<DestinationView> {
      const current = await mustGet(productId, id);
      const errors: FieldError[] = [];
      const patch: Parameters<DestinationStore['update']>[2] = { updatedAt: iso() };
      if (input.name !== undefined) patch.name = parseName(input.name, errors);
      if (input.filter !== undefined) patch.filter = parseFilter(input.filter, errors);
      if (input.batch !== undefined) patch.batch = parseBatch(input.batch, errors);
      if (input.url !== undefined) {
        if (current.type !== 'webhook') errors.push({ pointer: '/url', message: 'is for webhook destinations' });
        else {
          const url = parseUrl(input.url, errors);
          if (url !== undefined) patch.config = { ...current.config, url };
        }
      }
      for (const key of ['type', 'start', 'servers', 'subject', 'credentials'] as const) {
        if (input[key] !== undefined)
          errors.push({
            pointer: `/${key}`,
            message: 'cannot be changed (create a new destination, or use replay for the cursor)',
          });
      }
      let status: DestinationStatus | undefined;
      if (input.status !== undefined) {
        if (input.status !== 'active' && input.status !== 'paused')
          errors.push({
            pointer: '/status',
            message: 'must be "paused" or "active" (resume, or re-enable a disabled destination)',
          });
        else status = input.status;
      }
      if (errors.length > 0) throw validationError(errors);
      if (patch.config?.url !== undefined) await guard(() => outbound.checkUrl(patch.config!.url!), '/url');
      // "active" on an active destination that waits for a retry: retry now (the failure count and clock stay).
      if (status === 'active' && current.status === 'active') patch.nextAttemptAt = null;
      if (status !== undefined && status !== current.status) {
        patch.status = status;
        patch.disabledReason = null;
        if (status === 'active') {
          // Resume or re-enable: from the cursor, with a fresh retry schedule and failure clock.
          patch.consecutiveFailures = 0;
          patch.failingSince = null;
          patch.nextAttemptAt = null;
        }
      }
      const updated = await store.update(productId, id, patch);
      service.poke();
      return view(updated!);
    },

    async delete(productId: string, id: string): Promise<void> {
      await mustGet(productId, id);
      await store.delete(productId, id);
      await nats.closeOne(id);
    },

    /** Rewinds (or moves) the cursor to `from`; failures are forgotten so the replay starts now. */
    async replay(productId: string, id: string, from: unknown): Promise<DestinationView> {
      await mustGet(productId, id);
      if (from === undefined) throw validationError([{ pointer: '/from', message: 'is required' }]);
      const cursor = await cursorFrom(productId, from, '/from', true);
      const updated = await store.update(productId, id, {
        cursor,
        consecutiveFailures: 0,
        failingSince: null,
        nextAttemptAt: null,
        updatedAt: iso(),
      });
      service.poke();
      return view(updated!);
    },

    /** A new signing secret; the previous one keeps signing (a second signature) for 24 h. */
    async rotateSecret(productId: string, id: string): Promise<{ destination: DestinationView; secret: string }> {
      const current = await mustGet(productId, id);
      if (current.type !== 'webhook')
        throw validationError([{ pointer: '/', message: 'only webhook destinations have a signing secret' }]);
      const secret = newSecret();
      const updated = await store.update(productId, id, {
        secret,
        previousSecret: current.secret,
        previousSecretUntil: clock.now() + SECRET_OVERLAP_MS,
        updatedAt: iso(),
      });
      return { destination: await view(updated!), secret };
    },

    async deliveries(productId: string, id: string, limit: number, before?: string): Promise<DeliveryRecord[]> {
      await mustGet(productId, id);
      return store.listDeliveries(productId, id, limit, before);
    },

    /** Destinations by status, and the disabled ones with their reasons (readiness body, stats). */
    async summary(): Promise<{
      byStatus: Record<DestinationStatus, number>;
      disabled: Array<{ id: string; product_id: string; name: string; reason: string | null }>;
    }> {
      const byStatus: Record<DestinationStatus, number> = { active: 0, paused: 0, disabled: 0 };
      const disabled: Array<{ id: string; product_id: string; name: string; reason: string | null }> = [];
      for (const d of await store.listAll()) {
        byStatus[d.status]++;
        if (d.status === 'disabled')
          disabled.push({ id: d.id, product_id: d.productId, name: d.name, reason: d.disabledReason });
      }
      return { byStatus, disabled };
    },

    // ---- delivery --------------------------------------------------------------------------------

    /** One pass: take or renew leases and start a delivery loop for each destination held. */
    tick,
    /** Asks for a pass soon (after an admin change). */
    poke() {
      if (remote !== undefined) remote.poke();
      else if (running && !stopped) schedule(0);
    },
    /** Whether any product has a destination: the delivery worker's host starts the thread with the first. */
    hasDestinations(): Promise<boolean> {
      return store.any();
    },
    /** Counts a restart of the delivery worker (the worker's host calls it). */
    workerRestarted() {
      workerRestarts.inc();
    },
    /** Delivery runs elsewhere from now on (the delivery worker): poke() and close() go to it. */
    useRemote(deliverer: RemoteDeliverer) {
      remote = deliverer;
    },
    /** Starts the periodic passes (main.ts). */
    start() {
      running = true;
      schedule(0);
    },
    /** Waits for the delivery loops now running (tests). */
    async idle(): Promise<void> {
      while (loops.size > 0) await Promise.all([...loops.values()]);
    },
    async close(): Promise<void> {
      await remote?.close();
      stopped = true;
      clearTimeout(timer);
      abort.abort();
      await passing;
      await Promise.all([...loops.values()]);
      for (const id of held) await store.releaseLease(id, holder).catch(() => {});
      await nats.close();
    },
  };

  // ---- the delivery loop -------------------------------------------------------------------------

  /** A cycle accepted in full whose state write may still be running (deliverLoop). */
  interface Carried {
    cursor: DestinationCursor;
    /** Resolves true once written, false when not (lease lost, cursor moved by a replay, a storage error). */
    write: Promise<boolean>;
    /** Set when `write` settled. */
    written?: boolean;
  }

  const loops = new Map<string, Promise<void>>();
  const held = new Set<string>();
  const shared = new Set<string>();
  /** Per destination: when a partial batch was first seen (for max_wait_ms). */
  const pendingSince = new Map<string, number>();
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let passing: Promise<void> | undefined;
  let running = false;
  let stopped = false;
  let lastPrune = 0;

  function schedule(delay: number): void {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      passing = tick()
        .catch(() => {})
        .finally(() => {
          passing = undefined;
          if (timer === undefined) schedule(options.pollMs);
        });
    }, delay);
    timer.unref();
  }

  async function tick(): Promise<void> {
    if (stopped) return;
    const now = clock.now();
    const all = await store.listAll();
    const present = new Set(all.map((d) => d.id));
    for (const id of held) if (!present.has(id)) held.delete(id);
    for (const id of scratches.keys()) if (!held.has(id)) scratches.delete(id);
    // Products with several active destinations share their page reads.
    const perProduct = new Map<string, number>();
    for (const d of all) if (d.status === 'active') perProduct.set(d.productId, (perProduct.get(d.productId) ?? 0) + 1);
    shared.clear();
    for (const [productId, n] of perProduct) if (n > 1) shared.add(productId);
    // A deleted destination's NATS connection (the delete may have run in another thread or instance).
    for (const id of nats.linked()) if (!present.has(id)) await nats.closeOne(id);
    for (const d of all) {
      if (d.status !== 'active') {
        if (d.leaseHolder === holder) {
          await store.releaseLease(d.id, holder);
          held.delete(d.id);
        }
        continue;
      }
      const fresh = d.leaseHolder === holder && d.leaseUntil - now > (options.leaseMs * 2) / 3;
      // Ours already: a delivery worker restarted after a crash goes on under its predecessor's name.
      if (fresh) held.add(d.id);
      else {
        if (await store.acquireLease(d.id, holder, now, now + options.leaseMs)) held.add(d.id);
        else {
          held.delete(d.id);
          continue;
        }
      }
      if (!loops.has(d.id)) {
        const loop = deliverLoop(d.id)
          .catch(() => {})
          .finally(() => loops.delete(d.id));
        loops.set(d.id, loop);
      }
    }
    if (now - lastPrune > 3_600_000) {
      lastPrune = now;
      await store.pruneDeliveries(new Date(now - options.logRetentionMs).toISOString()).catch(() => {});
    }
  }

  /** Delivers until the destination is idle, must wait (retry, max_wait_ms), or is no longer ours. */
  async function deliverLoop(id: string): Promise<void> {
    // The state write of the previous cycle, when it succeeded in full, still running: the next cycle starts from
    // its cursor meanwhile, and writes its own state only after it landed (see `cycle`).
    let carried: Carried | undefined;
    try {
      while (!stopped) {
        const stored = await store.getById(id);
        if (
          stored === undefined ||
          stored.status !== 'active' ||
          stored.leaseHolder !== holder ||
          stored.leaseUntil < clock.now()
        )
          return;
        if (carried?.written === false) return; // lease lost or cursor moved by a replay: the next pass starts afresh
        if (carried === undefined && stored.nextAttemptAt !== null && stored.nextAttemptAt > clock.now()) return;
        // The carried cycle was a success: no failures, no retry waiting, the cursor after it.
        const d =
          carried === undefined
            ? stored
            : { ...stored, cursor: carried.cursor, consecutiveFailures: 0, failingSince: null, nextAttemptAt: null };
        const next = await cycle(d, carried);
        if (next === false) return;
        // One write at most outstanding when the next cycle starts (the one just chained after it): the stored
        // cursor is never more than a cycle behind what the receiver accepted.
        if (next !== true && carried !== undefined) await carried.write;
        carried = next === true ? undefined : next;
      }
    } finally {
      await carried?.write;
    }
  }

  /**
   * One delivery cycle: reads up to CYCLE_MESSAGES wanted messages after the cursor, sends them (webhooks:
   * batches of `max_messages`, one after another, each only after the previous was accepted; NATS: every
   * publish pipelined, all acks awaited), then writes the cursor after the last accepted message and the
   * attempts of the delivery log in one fenced transaction. A crash before that write re-delivers the
   * cycle from the stored cursor with the same ids (at least once). Returns whether to go on at once.
   */
  async function cycle(d: DestinationRecord, previous?: Carried): Promise<boolean | Carried> {
    const id = d.id;
    const want = d.batch.maxMessages;
    // Webhooks send whole batches of max_messages; NATS publishes one message each, pipelined.
    const limit = d.type === 'webhook' ? want * Math.max(1, Math.floor(CYCLE_MESSAGES / want)) : CYCLE_MESSAGES;
    const wanted: StoredMessage[] = [];
    /** The cursor just after wanted[i] (and the unwanted messages before it). */
    const afterEach: DestinationCursor[] = [];
    let cursor = d.cursor;
    let moved = false;
    let exhausted = false;
    const unfiltered =
      d.filter.types === undefined && d.filter.canonicalNames === undefined && d.filter.sources === undefined;
    const pageSize = unfiltered ? limit : Math.max(READ_PAGE, limit);
    read: while (wanted.length < limit) {
      const page = await pages.read(d.productId, cursor, pageSize, shared.has(d.productId));
      for (const message of page) {
        const isWanted = matches(d.filter, message);
        if (isWanted && wanted.length === limit) break read;
        cursor =
          message.kind === 'event' ? { ...cursor, event: message.position } : { ...cursor, identity: message.position };
        moved = true;
        if (isWanted) {
          wanted.push(message);
          afterEach.push(cursor);
        }
      }
      if (page.length < pageSize) {
        exhausted = true;
        break;
      }
    }
    if (wanted.length === 0) {
      pendingSince.delete(id);
      if (previous !== undefined && !(await previous.write)) return false;
      if (moved && !(await store.writeState(id, holder, { cursor }, iso(), [], d.cursor))) return false;
      return moved && !exhausted;
    }
    // Cut into sends: webhook batches of max_messages; for NATS one send of everything.
    const sends: StoredMessage[][] = [];
    const step = d.type === 'webhook' ? want : wanted.length;
    for (let i = 0; i < wanted.length; i += step) sends.push(wanted.slice(i, i + step));
    // A last partial batch waits up to max_wait_ms for more (only when nothing more is there yet).
    const last = sends[sends.length - 1]!;
    if (d.type === 'webhook' && last.length < want && d.batch.maxWaitMs > 0 && exhausted) {
      const since = pendingSince.get(id) ?? clock.now();
      pendingSince.set(id, since);
      if (clock.now() - since < d.batch.maxWaitMs) {
        sends.pop();
        if (sends.length === 0) {
          if (previous !== undefined) await previous.write;
          return false;
        }
      } else pendingSince.delete(id);
    } else pendingSince.delete(id);

    const attempts: Array<Omit<DeliveryRecord, 'id'>> = [];
    let accepted = 0;
    let acceptedWire: WireMessage[] = [];
    let failure: (SendOutcome & { durationMs: number }) | undefined;
    const cycleStarted = clock.now();
    // Webhooks: each batch formatted before it is sent; NATS formats each message as it publishes it.
    const webhook = d.type === 'webhook';
    let nextWire = webhook ? sends[0]!.map(pages.format) : [];
    for (const [i, batch] of sends.entries()) {
      const sending = send(d, batch, nextWire);
      let wire = nextWire;
      // The next batch is formatted while this one is on its way (sent only after this one was accepted).
      if (webhook && i + 1 < sends.length) nextWire = sends[i + 1]!.map(pages.format);
      const outcome = await sending;
      if (!webhook) wire = batch.map(pages.format);
      attempts.push({
        productId: d.productId,
        destinationId: id,
        attemptedAt: new Date(clock.now()).toISOString(),
        attempt: accepted === 0 ? d.consecutiveFailures + 1 : 1,
        webhookId: webhookIdOf(wire),
        messageIds: wire.map((m) => m.id),
        outcome: outcome.ok ? 'success' : 'failure',
        status: outcome.status,
        error: outcome.error,
        durationMs: outcome.durationMs,
      });
      if (!outcome.ok) {
        failure = outcome;
        break;
      }
      accepted += batch.length;
      acceptedWire = wire;
      // Keep the unrecorded part of a cycle well inside the lease.
      if (stopped || clock.now() - cycleStarted > options.leaseMs / 3) break;
    }
    if (stopped) {
      // A send cut off by shutdown is not the receiver's failure: record only what was accepted.
      if (accepted === 0) {
        if (previous !== undefined) await previous.write;
        return false;
      }
      if (failure !== undefined) {
        failure = undefined;
        attempts.pop();
      }
    }

    const nowMs = clock.now();
    const now = new Date(nowMs).toISOString();
    const patch: DeliveryStatePatch = {};
    if (accepted > 0) {
      // Everything read was accepted: the cursor also passes the unwanted messages after the last one.
      patch.cursor = accepted === wanted.length ? cursor : afterEach[accepted - 1]!;
      patch.deliveredAdd = accepted;
      patch.consecutiveFailures = 0;
      patch.failingSince = null;
      patch.nextAttemptAt = null;
      patch.lastSuccessAt = now;
    }
    if (failure !== undefined) {
      report.failed(id);
      const failures = accepted > 0 ? 1 : d.consecutiveFailures + 1;
      const failingSince = accepted > 0 ? nowMs : (d.failingSince ?? nowMs);
      patch.consecutiveFailures = failures;
      patch.failingSince = failingSince;
      patch.lastError = failure.error;
      patch.lastErrorAt = now;
      if (failure.gone) {
        patch.status = 'disabled';
        patch.disabledReason = 'the receiver answered 410 Gone';
      } else if (nowMs - failingSince >= options.disableAfterMs) {
        patch.status = 'disabled';
        patch.disabledReason = `no successful delivery for ${Math.round(options.disableAfterMs / 3_600_000)} h (last error: ${failure.error ?? 'unknown'})`;
      } else {
        const delay =
          failure.retryAfterMs !== undefined
            ? Math.max(failure.retryAfterMs, MIN_RETRY_MS)
            : retryDelay(failures, random);
        patch.nextAttemptAt = nowMs + delay;
      }
    }
    // Fenced by the cursor the cycle started from too: an admin replay while the cycle ran stands, and the loop
    // ends (false); the next pass delivers from the replayed cursor. The cycle started from the previous cycle's
    // cursor, which is stored only once that cycle's write landed: this write waits for it, and is not made when
    // it failed.
    const write = (async () => {
      if (previous !== undefined && !(await previous.write)) return false;
      const ok = await store.writeState(id, holder, patch, now, attempts, d.cursor);
      if (ok && accepted > 0) {
        report.delivered(id, accepted);
        const newest = Date.parse(acceptedWire[acceptedWire.length - 1]!.timestamp);
        if (!Number.isNaN(newest)) report.latency(id, Math.max(0, Date.now() - newest) / 1000);
      }
      return ok;
    })();
    const whole = failure === undefined && !stopped && accepted === wanted.length;
    if (!whole) return (await write.catch(() => false)) && failure === undefined && !stopped;
    // Accepted in full: the next cycle goes on from here while this state is written (a crash before it lands
    // re-delivers this cycle: at least once). Its outcome decides whether the loop goes on.
    const carried: Carried = { cursor: patch.cursor!, write: write.catch(() => false) };
    void carried.write.then((ok) => (carried.written = ok));
    return carried;
  }

  async function send(
    d: DestinationRecord,
    batch: StoredMessage[],
    wire: WireMessage[],
  ): Promise<SendOutcome & { durationMs: number }> {
    const started = performance.now();
    let outcome: SendOutcome;
    if (d.type === 'webhook') {
      const secrets = [d.secret!];
      if (d.previousSecret !== null && d.previousSecretUntil !== null && d.previousSecretUntil > clock.now())
        secrets.push(d.previousSecret);
      outcome = await sendWebhook({
        url: d.config.url!,
        secrets,
        webhookId: webhookIdOf(wire),
        body: bodyOf(wire, d.batch.maxMessages > 1, new Date().toISOString(), scratchOf(d.id)),
        timeoutMs: options.timeoutMs,
        guard: outbound,
        signal: abort.signal,
      });
    } else {
      outcome = await nats.send(d.id, d.config.servers!, d.credentials, batch.length, (i) => {
        const message = batch[i]!;
        const w = pages.format(message);
        return { subject: subjects.of(d.config.subject!, d.productId, message), id: w.id, body: bytesOf(w) };
      });
    }
    const durationMs = performance.now() - started;
    report.attempt(d.id, durationMs / 1000);
    return { ...outcome, durationMs };
  }

  return service;
}

export type DestinationService = ReturnType<typeof createDestinationService>;
