// What every traffic provider offers the sync (one method), how its failures look, and the one HTTP
// helper they share: JSON over global fetch, retrying 429/5xx and network failures with exponential
// backoff that honours Retry-After, within a bounded total time. The outbound guard's refusal is not a
// network failure: it fails at once, with the guard's reason.
import type { TrafficRow } from '../domain/traffic-reports.js';
import { fetch, type Dispatcher } from 'undici';
import { guardRefusal, outboundDispatcher } from '../services/outbound-guard.js';

export interface DateRange {
  /** YYYY-MM-DD, inclusive. */
  from: string;
  to: string;
}

export interface TrafficProvider {
  readonly name: 'plausible' | 'ga4';
  /** Every row of the range, mapped to the stored row shape (traffic-providers.md, "Mapping"). */
  fetchRows(range: DateRange): Promise<TrafficRow[]>;
}

/** A provider failed: `reason` is the provider's own message, safe to show to the operator. */
export class ProviderError extends Error {
  readonly provider: string;
  readonly status: number | undefined;
  readonly reason: string;
  readonly retryable: boolean;
  /** The outbound guard refused the provider's address: nothing was sent (the reason names the setting). */
  readonly refused: boolean;

  constructor(
    provider: string,
    reason: string,
    options: { status?: number; retryable?: boolean; attempts?: number; refused?: boolean } = {},
  ) {
    const where = options.status === undefined ? '' : ` (HTTP ${options.status})`;
    const gaveUp =
      options.attempts !== undefined && options.attempts > 1 ? `, gave up after ${options.attempts} attempts` : '';
    super(`${provider}${where}: ${reason}${gaveUp}`);
    this.name = 'ProviderError';
    this.provider = provider;
    this.status = options.status;
    this.reason = reason;
    this.retryable = options.retryable ?? false;
    this.refused = options.refused ?? false;
  }
}

export interface RetryPolicy {
  /** Give up once the next wait would end later than this after the first attempt. */
  maxTotalMs: number;
  /** First backoff; doubles each retry, up to maxDelayMs. */
  initialDelayMs: number;
  maxDelayMs: number;
  /** Timeout of one HTTP request. */
  requestTimeoutMs: number;
  /** The outbound guard's dispatcher (services.ts passes the one of its config); default: public addresses only. */
  dispatcher?: Dispatcher;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxTotalMs: 60_000,
  initialDelayMs: 1_000,
  maxDelayMs: 20_000,
  requestTimeoutMs: 30_000,
};

/** `Retry-After` as delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface JsonRequest {
  provider: string;
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
  policy: RetryPolicy;
  /** Turns an error response body into the provider's reason. */
  reasonOf: (status: number, body: unknown, text: string) => string;
}

/** Sends the request until it succeeds, fails for good (4xx other than 429), or the time budget is spent. */
export async function requestJson(request: JsonRequest): Promise<unknown> {
  const started = Date.now();
  const { policy } = request;
  for (let attempt = 1; ; attempt++) {
    let retryAfterMs: number | undefined;
    let failure: ProviderError;
    try {
      // Through the outbound guard (clarifications §4): only allowed addresses are connected to.
      const response = await fetch(request.url, {
        dispatcher: policy.dispatcher ?? outboundDispatcher(),
        method: request.method ?? 'POST',
        headers: request.headers,
        body: request.body,
        signal: AbortSignal.timeout(policy.requestTimeoutMs),
      });
      const text = await response.text();
      let body: unknown;
      try {
        body = text === '' ? undefined : JSON.parse(text);
      } catch {
        body = undefined;
      }
      if (response.ok) {
        if (body === undefined)
          throw new ProviderError(request.provider, 'the response is not JSON', { status: response.status });
        return body;
      }
      const retryable = response.status === 429 || response.status >= 500;
      failure = new ProviderError(request.provider, request.reasonOf(response.status, body, text), {
        status: response.status,
        retryable,
        attempts: attempt,
      });
      if (!retryable) throw failure;
      retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
    } catch (error) {
      if (error instanceof ProviderError && !error.retryable) throw error;
      const refused = guardRefusal(error);
      if (refused !== undefined)
        throw new ProviderError(request.provider, `refused by the outbound guard: ${refused.message}`, {
          refused: true,
        });
      failure =
        error instanceof ProviderError
          ? error
          : new ProviderError(
              request.provider,
              `request failed: ${error instanceof Error ? error.message : String(error)}`,
              {
                retryable: true,
                attempts: attempt,
              },
            );
    }
    const backoff = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1));
    // Jitter spreads out instances that failed together; Retry-After is a floor, never shortened.
    const delay = retryAfterMs ?? backoff / 2 + Math.random() * (backoff / 2);
    if (Date.now() - started + delay > policy.maxTotalMs) throw failure;
    await sleep(delay);
  }
}

/** `{"error": "..."}` (Plausible, OAuth) or `{"error": {"message", "status"}}` (Google APIs), else the raw text. */
export function errorReason(status: number, body: unknown, text: string): string {
  if (typeof body === 'object' && body !== null && 'error' in body) {
    const error = (body as { error: unknown }).error;
    if (typeof error === 'string') {
      const description = (body as { error_description?: unknown }).error_description;
      return typeof description === 'string' ? `${error}: ${description}` : error;
    }
    if (typeof error === 'object' && error !== null) {
      const { message, status: code } = error as { message?: unknown; status?: unknown };
      if (typeof message === 'string') return typeof code === 'string' ? `${code}: ${message}` : message;
    }
  }
  const trimmed = text.trim().slice(0, 300);
  return trimmed === '' ? `HTTP ${status}` : trimmed;
}
