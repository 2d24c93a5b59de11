// Connecting a product's traffic source and syncing it: fetch a date range from the provider, replace
// each (product, date) slice of the range in one transaction, record the run. Used by the admin API,
// the CLI and the scheduler alike. At most one sync per product runs at a time: in this process
// (a set of running products) and across instances (the storage's sync lock). Every provider request
// goes through the outbound guard, and a source whose URLs the guard refuses is refused when connected.
import { AppError, validationError, type FieldError } from '../domain/errors.js';
import { uuidv7 } from '../domain/ids.js';
import { isCalendarDate } from '../domain/timestamps.js';
import {
  addDays,
  datesInRange,
  daysBetween,
  MAX_REPORT_DAYS,
  mergeDuplicateRows,
  truncateDimensions,
  utcDate,
  type TrafficRow,
} from '../domain/traffic-reports.js';
import type {
  Storage,
  SyncRunKind,
  SyncRunRecord,
  TrafficProviderName,
  TrafficSourceRecord,
  TrafficSourceSummary,
} from '../storage/types.js';
import { outboundGuard, OutboundRefused, type OutboundGuard } from '../services/outbound-guard.js';
import { AccessTokenCache, checkServiceAccount, ga4Provider } from './ga4.js';
import { plausibleProvider } from './plausible.js';
import {
  DEFAULT_RETRY_POLICY,
  ProviderError,
  type DateRange,
  type RetryPolicy,
  type TrafficProvider,
} from './provider.js';

/** Days re-synced on every scheduled run: today and the 3 days before it (providers revise recent days). */
export const TRAILING_DAYS = 3;
/** Days fetched by the first sync of a source. */
export const BACKFILL_DAYS = 90;

export interface SyncResult {
  /** `succeeded`, or `already_running` when another sync of the product held the lock (nothing was fetched). */
  status: 'succeeded' | 'already_running';
  from: string;
  to: string;
  /** Rows stored for the range. */
  rows: number;
}

export interface SyncLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

export interface TrafficSyncOptions {
  /** Timing of provider requests; their dispatcher is always the guard's. */
  retry?: RetryPolicy;
  /** The outbound guard (services.ts passes the one of its config); default: public addresses only. */
  guard?: OutboundGuard;
  tokenCache?: AccessTokenCache;
  now?: () => Date;
  /** Rows per provider request; tests make them small to exercise paging. */
  pageSize?: number;
  logger?: SyncLogger;
}

export interface TrafficSyncService {
  /** Validates `input` (the body of PUT …/traffic_source) and stores the source; answers without secrets. */
  connectSource(productId: string, input: unknown): Promise<TrafficSourceSummary>;
  getSource(productId: string): Promise<TrafficSourceSummary | undefined>;
  /**
   * Syncs one product; throws `upstream_error` with the provider's reason when the provider fails, or with
   * the guard's at once when the outbound guard refuses the provider's address.
   */
  syncProduct(productId: string, options?: { from?: string; to?: string; kind?: SyncRunKind }): Promise<SyncResult>;
  listRuns(productId: string, limit?: number): Promise<SyncRunRecord[]>;
}

const silent: SyncLogger = { info() {}, warn() {}, error() {} };

// ---------------------------------------------------------------------------------------------
// Source input (PUT /admin/v1/products/{id}/traffic_source, `inlet traffic connect`)

interface ParsedSource {
  provider: TrafficProviderName;
  config: Record<string, unknown>;
  secret: Record<string, unknown>;
}

function isHttpUrl(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  try {
    const url = new URL(value);
    return url.protocol === 'https:' || url.protocol === 'http:';
  } catch {
    return false;
  }
}

/** The URL fields of a source (`base_url`, `token_url`) the guard refuses, as field errors naming the reason. */
async function refusedUrls(guard: OutboundGuard, config: Record<string, unknown>): Promise<FieldError[]> {
  const errors: FieldError[] = [];
  for (const field of ['base_url', 'token_url']) {
    const url = config[field];
    if (typeof url !== 'string') continue;
    try {
      await guard.checkUrl(url);
    } catch (error) {
      if (!(error instanceof OutboundRefused)) throw error;
      errors.push({ pointer: `/${field}`, message: `refused by the outbound guard: ${error.message}` });
    }
  }
  return errors;
}

async function parseSourceInput(input: unknown): Promise<ParsedSource> {
  const errors: FieldError[] = [];
  const fail = (pointer: string, message: string) => errors.push({ pointer, message });
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw validationError([{ pointer: '', message: 'must be a JSON object' }]);
  const body = input as Record<string, unknown>;
  const text = (name: string, max: number, pattern?: RegExp, hint?: string): string | undefined => {
    const value = body[name];
    if (value === undefined) fail(`/${name}`, 'is required');
    else if (typeof value !== 'string' || value.trim().length === 0) fail(`/${name}`, 'must be a non-empty string');
    else if (value.length > max) fail(`/${name}`, `must be at most ${max} characters`);
    else if (pattern && !pattern.test(value)) fail(`/${name}`, hint ?? `must match ${pattern.source}`);
    else return value.trim();
    return undefined;
  };
  const url = (name: string): string | undefined => {
    const value = body[name];
    if (value === undefined || value === null) return undefined;
    if (!isHttpUrl(value)) fail(`/${name}`, 'must be an http(s) URL');
    return isHttpUrl(value) ? value : undefined;
  };
  const allowOnly = (allowed: string[]) => {
    for (const key of Object.keys(body))
      if (!allowed.includes(key)) fail(`/${key}`, `is not a known field (allowed: ${allowed.join(', ')})`);
  };

  if (body.provider === 'plausible') {
    allowOnly(['provider', 'site_id', 'api_key', 'base_url']);
    const siteId = text('site_id', 255);
    const apiKey = text('api_key', 1024);
    const baseUrl = url('base_url');
    if (errors.length > 0) throw validationError(errors);
    return {
      provider: 'plausible',
      config: { site_id: siteId, ...(baseUrl ? { base_url: baseUrl } : {}) },
      secret: { api_key: apiKey },
    };
  }
  if (body.provider === 'ga4') {
    allowOnly(['provider', 'property_id', 'credentials', 'base_url', 'token_url']);
    const propertyId = text(
      'property_id',
      32,
      /^(properties\/)?\d+$/,
      'must be the numeric GA4 property id, e.g. "123456789"',
    );
    const baseUrl = url('base_url');
    const tokenUrl = url('token_url');
    const credentials = body.credentials;
    let clientEmail: string | undefined;
    let privateKey: string | undefined;
    if (typeof credentials !== 'object' || credentials === null || Array.isArray(credentials)) {
      fail('/credentials', 'must be the service-account key JSON object (with client_email and private_key)');
    } else {
      const c = credentials as Record<string, unknown>;
      if (c.type !== undefined && c.type !== 'service_account') fail('/credentials/type', 'must be "service_account"');
      if (typeof c.client_email !== 'string' || !c.client_email.includes('@'))
        fail('/credentials/client_email', 'must be the service account e-mail');
      else clientEmail = c.client_email;
      if (typeof c.private_key !== 'string') fail('/credentials/private_key', 'is required');
      else {
        try {
          await checkServiceAccount({ client_email: clientEmail ?? '', private_key: c.private_key });
          privateKey = c.private_key;
        } catch {
          fail('/credentials/private_key', 'must be a PEM PKCS#8 RSA private key ("-----BEGIN PRIVATE KEY-----…")');
        }
      }
    }
    if (errors.length > 0) throw validationError(errors);
    return {
      provider: 'ga4',
      config: {
        property_id: propertyId!.replace(/^properties\//, ''),
        client_email: clientEmail,
        ...(baseUrl ? { base_url: baseUrl } : {}),
        ...(tokenUrl ? { token_url: tokenUrl } : {}),
      },
      secret: { credentials: { client_email: clientEmail, private_key: privateKey } },
    };
  }
  throw validationError([{ pointer: '/provider', message: 'must be "plausible" or "ga4"' }]);
}

// ---------------------------------------------------------------------------------------------

function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** The provider of a stored source, its requests timed by `retry` (which carries the guard's dispatcher). */
function providerFor(
  source: TrafficSourceRecord,
  deps: { retry: RetryPolicy; tokenCache: AccessTokenCache; pageSize: number | undefined },
): TrafficProvider {
  const { config, secret } = source;
  const { retry } = deps;
  const pageSize = deps.pageSize === undefined ? {} : { pageSize: deps.pageSize };
  if (source.provider === 'plausible') {
    const baseUrl = str(config.base_url);
    return plausibleProvider({
      siteId: String(config.site_id),
      apiKey: String(secret.api_key),
      retry,
      ...(baseUrl ? { baseUrl } : {}),
      ...pageSize,
    });
  }
  const credentials = secret.credentials as { client_email: string; private_key: string };
  const baseUrl = str(config.base_url);
  const tokenUrl = str(config.token_url);
  return ga4Provider({
    propertyId: String(config.property_id),
    credentials,
    retry,
    tokenCache: deps.tokenCache,
    ...(baseUrl ? { baseUrl } : {}),
    ...(tokenUrl ? { tokenUrl } : {}),
    ...pageSize,
  });
}

/** The range a sync fetches: the one asked for (validated), else the trailing days, or the backfill on a first sync. */
async function rangeFor(
  storage: Storage,
  today: string,
  source: TrafficSourceRecord,
  from: string | undefined,
  to: string | undefined,
): Promise<DateRange> {
  const errors: FieldError[] = [];
  if (from !== undefined && !isCalendarDate(from))
    errors.push({ pointer: '/from', message: 'must be a calendar date YYYY-MM-DD' });
  if (to !== undefined && !isCalendarDate(to))
    errors.push({ pointer: '/to', message: 'must be a calendar date YYYY-MM-DD' });
  if (errors.length > 0) throw validationError(errors);
  if (from === undefined && to === undefined) {
    const synced = await storage.traffic.lastSucceededAt(source.productId, source.provider);
    return { from: addDays(today, -(synced === null ? BACKFILL_DAYS - 1 : TRAILING_DAYS)), to: today };
  }
  const end = to ?? today;
  const start = from ?? addDays(end, -TRAILING_DAYS);
  // Providers report in the property's time zone, which may already be "tomorrow" for UTC.
  if (end > addDays(today, 1)) errors.push({ pointer: '/to', message: 'must not be in the future' });
  if (start > end) errors.push({ pointer: '/from', message: `must not be after to (${end})` });
  else if (daysBetween(start, end) > MAX_REPORT_DAYS)
    errors.push({ pointer: '/to', message: `a sync spans at most ${MAX_REPORT_DAYS} days` });
  if (errors.length > 0) throw validationError(errors);
  return { from: start, to: end };
}

export function createTrafficSyncService(storage: Storage, options: TrafficSyncOptions = {}): TrafficSyncService {
  const now = options.now ?? (() => new Date());
  const guard = options.guard ?? outboundGuard();
  const retry: RetryPolicy = { ...(options.retry ?? DEFAULT_RETRY_POLICY), dispatcher: guard.dispatcher() };
  const tokenCache = options.tokenCache ?? new AccessTokenCache();
  const logger = options.logger ?? silent;
  const running = new Set<string>();

  async function requireProduct(productId: string) {
    if ((await storage.products.get(productId)) === undefined)
      throw new AppError('not_found', `No product with id "${productId}".`);
  }

  async function runSync(source: TrafficSourceRecord, range: DateRange, kind: SyncRunKind): Promise<SyncResult> {
    const runId = uuidv7(); // time-ordered: runs started in the same millisecond still list in order
    const productId = source.productId;
    await storage.traffic.startRun({
      id: runId,
      productId,
      provider: source.provider,
      kind,
      startedAt: now().toISOString(),
      finishedAt: null,
      from: range.from,
      to: range.to,
      rows: null,
      outcome: 'running',
      error: null,
    });
    try {
      const provider = providerFor(source, { retry, tokenCache, pageSize: options.pageSize });
      const fetched = await provider.fetchRows(range);
      const byDate = new Map<string, TrafficRow[]>(datesInRange(range.from, range.to).map((date) => [date, []]));
      for (const row of mergeDuplicateRows(fetched.map(truncateDimensions))) byDate.get(row.date)?.push(row); // rows outside the range are ignored
      const rows = await storage.traffic.replaceSlices(productId, source.provider, byDate);
      await storage.traffic.finishRun(productId, runId, {
        finishedAt: now().toISOString(),
        rows,
        outcome: 'succeeded',
        error: null,
      });
      logger.info({ productId, provider: source.provider, ...range, rows, kind }, 'traffic sync succeeded');
      return { status: 'succeeded', from: range.from, to: range.to, rows };
    } catch (error) {
      const reason = error instanceof ProviderError ? error.message : 'internal error (details are in the server log)';
      await storage.traffic
        .finishRun(productId, runId, { finishedAt: now().toISOString(), rows: null, outcome: 'failed', error: reason })
        .catch(() => {});
      if (error instanceof ProviderError) {
        logger.warn({ productId, provider: source.provider, ...range, kind, reason }, 'traffic sync failed');
        const what = error.refused ? 'was not contacted' : 'failed';
        throw new AppError('upstream_error', `The traffic provider ${what}: ${error.message}`, {
          cause: error,
          extras: {
            provider: error.provider,
            ...(error.status === undefined ? {} : { provider_status: error.status }),
          },
        });
      }
      logger.error({ productId, provider: source.provider, ...range, kind, err: error }, 'traffic sync failed');
      throw error;
    }
  }

  return {
    async connectSource(productId, input) {
      await requireProduct(productId);
      const parsed = await parseSourceInput(input);
      const refused = await refusedUrls(guard, parsed.config);
      if (refused.length > 0) throw validationError(refused);
      const at = now().toISOString();
      await storage.traffic.putSource({ productId, ...parsed, createdAt: at, updatedAt: at });
      const stored = await storage.traffic.getSource(productId);
      const { secret: _secret, ...summary } = stored!;
      return summary;
    },

    async getSource(productId) {
      const source = await storage.traffic.getSource(productId);
      if (source === undefined) return undefined;
      const { secret: _secret, ...summary } = source;
      return summary;
    },

    async syncProduct(productId, request = {}) {
      await requireProduct(productId);
      const source = await storage.traffic.getSource(productId);
      if (source === undefined) {
        throw new AppError(
          'not_found',
          `Product "${productId}" has no traffic source; connect one with PUT /admin/v1/products/${productId}/traffic_source.`,
        );
      }
      const range = await rangeFor(storage, utcDate(now()), source, request.from, request.to);
      const kind = request.kind ?? 'admin';
      const alreadyRunning = async (): Promise<SyncResult> => ({
        status: 'already_running',
        ...range,
        rows: await storage.traffic.countRows(productId, range.from, range.to),
      });
      if (running.has(productId)) return alreadyRunning();
      running.add(productId);
      try {
        const locked = await storage.traffic.withSyncLock(productId, () => runSync(source, range, kind));
        if (!locked.acquired) {
          logger.info({ productId, ...range, kind }, 'traffic sync skipped: another instance is syncing this product');
          return alreadyRunning();
        }
        return locked.value;
      } finally {
        running.delete(productId);
      }
    },

    listRuns(productId, limit = 50) {
      return storage.traffic.listRuns(productId, limit);
    },
  };
}
