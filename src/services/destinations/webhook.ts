// The webhook type (events-out §6): its admin field (`url`), and delivery per Standard Webhooks, sent with
// undici through the outbound guard (outbound-guard.ts): a time limit on the whole request, redirects never
// followed (undici's request() does not follow them; a 3xx is a failure). A destination's messages go in
// batches of max_messages, one request each, each only after the previous one was accepted.
//
// Signing: the scheme is one HMAC-SHA256 (`v1,` + base64 of HMAC(key, "id.timestamp.body"), the key the
// base64 after `whsec_`). The official `standardwebhooks` package computes it with a SHA-256 written in
// JavaScript, which was 12.6 % of the deliverer's CPU (bench/runs/2026-11-destinations.md); node:crypto's
// native HMAC gives the same bytes. test/unit/webhook-signature.test.ts holds the two equal on random
// ids, times, secrets and bodies, and every test receiver verifies with the official package.
import { createHmac, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { request } from 'undici';
import type { FieldError } from '../../domain/errors.js';
import type { DestinationRecord, StoredMessage } from '../../storage/types.js';
import type { OutboundGuard } from '../outbound-guard.js';
import {
  refusedAs,
  type Delivered,
  type DeliveryContext,
  type DestinationKind,
  type DriverOptions,
  type SendOutcome,
} from './kind.js';
import { failedSend } from './kind.js';
import { bodyOf, webhookIdOf, type BodyScratch } from './messages.js';

// package.json is three levels up from both src/services/destinations and dist/services/destinations.
const { version } = createRequire(import.meta.url)('../../../package.json') as { version: string };
export const USER_AGENT = `Inlet/${version}`;

export function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** `v1,<sig>` for each secret, space-separated (both while a rotated secret is still honoured). */
export function signatureHeader(secrets: string[], id: string, timestamp: Date, body: string | Uint8Array): string {
  const seconds = Math.floor(timestamp.getTime() / 1000);
  return secrets
    .map((secret) => {
      const hmac = createHmac('sha256', signingKey(secret));
      // A body already in bytes is hashed as it is (no large string made of it: messages.ts bodyOf).
      if (typeof body === 'string') hmac.update(`${id}.${seconds}.${body}`);
      else hmac.update(`${id}.${seconds}.`).update(body);
      return `v1,${hmac.digest('base64')}`;
    })
    .join(' ');
}

const keys = new Map<string, Buffer>();

/** The HMAC key of a `whsec_…` secret (its base64 part), kept for the few secrets in use. */
function signingKey(secret: string): Buffer {
  let key = keys.get(secret);
  if (key === undefined) {
    key = Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
    if (key.length === 0) throw new Error('empty webhook signing secret');
    if (keys.size >= 1000) keys.clear();
    keys.set(secret, key);
  }
  return key;
}

/** Retry-After as milliseconds: delta seconds or an HTTP date. */
export function parseRetryAfter(value: string | string[] | undefined, nowMs: number): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined) return undefined;
  if (/^\d+$/.test(raw.trim())) return Number(raw.trim()) * 1000;
  const at = Date.parse(raw);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

export async function sendWebhook(options: {
  url: string;
  secrets: string[];
  webhookId: string;
  /** The JSON body, as UTF-8 bytes. */
  body: Uint8Array;
  timeoutMs: number;
  guard: OutboundGuard;
  signal?: AbortSignal;
}): Promise<SendOutcome> {
  // The signature's timestamp is the wall clock: receivers check it against theirs.
  const timestamp = new Date();
  const headers = {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'webhook-id': options.webhookId,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': signatureHeader(options.secrets, options.webhookId, timestamp, options.body),
  };
  const aborting = abortAfter(options.timeoutMs, options.signal);
  try {
    const response = await request(options.url, {
      method: 'POST',
      headers,
      body: options.body,
      dispatcher: options.guard.dispatcher(),
      signal: aborting.signal,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
    });
    const status = response.statusCode;
    // The answer's body is not used: a success's is dropped (dump: no async iterator per request); of a failure's
    // a little is read for the error and the rest dropped.
    if (status >= 200 && status < 300) {
      await response.body.dump();
      return { ok: true, status, error: null };
    }
    let text = '';
    for await (const chunk of response.body) {
      if (text.length < 300) text += (chunk as Buffer).toString('utf8');
    }
    const outcome: SendOutcome = {
      ok: false,
      status,
      error: `HTTP ${status}${text.trim() === '' ? '' : `: ${text.trim().slice(0, 200)}`}`,
    };
    if (status === 429 || status === 503) {
      const retryAfterMs = parseRetryAfter(response.headers['retry-after'], Date.now());
      if (retryAfterMs !== undefined) outcome.retryAfterMs = retryAfterMs;
    }
    if (status === 410) outcome.gone = true;
    if (status >= 300 && status < 400) outcome.error = `HTTP ${status} (redirects are not followed)`;
    return outcome;
  } catch (error) {
    return failedSend('', error, (thrown) => {
      const err = thrown as Error & { code?: string; cause?: Error & { code?: string } };
      const name =
        err.name === 'TimeoutError' || err.code === 'UND_ERR_HEADERS_TIMEOUT' || err.code === 'UND_ERR_BODY_TIMEOUT'
          ? `timed out after ${options.timeoutMs} ms`
          : err.message;
      const cause =
        err.cause?.message !== undefined && err.cause.message !== err.message ? `: ${err.cause.message}` : '';
      return `${name}${cause}`;
    });
  } finally {
    aborting.done();
  }
}

/**
 * A request's signal: aborted after `timeoutMs` (a TimeoutError, as AbortSignal.timeout's) or when `outer` is. One
 * controller and a timer cleared at the end: AbortSignal.any of AbortSignal.timeout cost ~20 µs a request (their
 * weak references and the timers left to run out), 0.2 µs per message of a batch of 100.
 */
function abortAfter(timeoutMs: number, outer: AbortSignal | undefined): { signal: AbortSignal; done(): void } {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    timeoutMs,
  );
  timer.unref();
  const onAbort = () => controller.abort(outer!.reason);
  if (outer?.aborted) controller.abort(outer.reason);
  else outer?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    done() {
      clearTimeout(timer);
      outer?.removeEventListener('abort', onAbort);
    },
  };
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

/** The secrets that sign now: the destination's, and a rotated-out one until its overlap ends. */
function secretsOf(d: DestinationRecord, nowMs: number): string[] {
  const secrets = [d.secret!];
  if (d.previousSecret !== null && d.previousSecretUntil !== null && d.previousSecretUntil > nowMs)
    secrets.push(d.previousSecret);
  return secrets;
}

/**
 * Sends `messages` in batches of max_messages, each only after the previous one was accepted. Each batch is
 * formatted before it is sent, the next one while this one is on its way.
 */
async function deliverBatches(
  d: DestinationRecord,
  messages: StoredMessage[],
  context: DeliveryContext,
  options: DriverOptions & { scratch: BodyScratch },
): Promise<Delivered> {
  const size = d.batch.maxMessages;
  const batches: StoredMessage[][] = [];
  for (let i = 0; i < messages.length; i += size) batches.push(messages.slice(i, i + size));
  let accepted = 0;
  let next = batches[0]!.map(context.format);
  for (const [i, batch] of batches.entries()) {
    const wire = next;
    const started = performance.now();
    const sending = sendWebhook({
      url: d.config.url!,
      secrets: secretsOf(d, options.now()),
      webhookId: webhookIdOf(wire),
      body: bodyOf(wire, size > 1, new Date().toISOString(), options.scratch),
      timeoutMs: options.timeoutMs,
      guard: options.guard,
      signal: context.signal,
    });
    if (i + 1 < batches.length) next = batches[i + 1]!.map(context.format);
    const outcome = await sending;
    context.sent(wire, outcome, performance.now() - started);
    if (!outcome.ok) return { accepted, failure: outcome };
    accepted += batch.length;
    if (!context.goOn()) break;
  }
  return { accepted };
}

export const webhookKind: DestinationKind = {
  label: 'webhook',
  fields: ['url'],
  editable: ['url'],
  newSecret,
  parse(input, errors) {
    const url = parseUrl(input.url, errors);
    return { config: url === undefined ? {} : { url }, credentials: null };
  },
  edit(current, input, errors) {
    if (input.url === undefined) return undefined;
    const url = parseUrl(input.url, errors);
    return url === undefined ? undefined : { ...current, url };
  },
  check: (config, { guard }) => refusedAs('/url', () => guard.checkUrl(config.url!)),
  driver(options) {
    /** Per destination: the memory its bodies are written into (bodyOf), kept while it delivers here. */
    const scratches = new Map<string, BodyScratch>();
    const scratchOf = (id: string): BodyScratch => {
      let scratch = scratches.get(id);
      if (scratch === undefined) scratches.set(id, (scratch = { buffer: Buffer.alloc(0) }));
      return scratch;
    };
    return {
      batchSize: (d) => d.batch.maxMessages,
      deliver: (d, messages, context) => deliverBatches(d, messages, context, { ...options, scratch: scratchOf(d.id) }),
      async prune(_present, held) {
        for (const id of scratches.keys()) if (!held.has(id)) scratches.delete(id);
      },
      async forget() {},
      async close() {},
    };
  },
};
