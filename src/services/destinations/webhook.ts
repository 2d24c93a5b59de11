// Webhook delivery per Standard Webhooks (events-out §6), sent with undici through the outbound guard
// (outbound-guard.ts): a time limit on the whole request, redirects never followed (undici's request()
// does not follow them; a 3xx is a failure).
//
// Signing: the scheme is one HMAC-SHA256 (`v1,` + base64 of HMAC(key, "id.timestamp.body"), the key the
// base64 after `whsec_`). The official `standardwebhooks` package computes it with a SHA-256 written in
// JavaScript, which was 12.6 % of the deliverer's CPU (bench/README.md "Destinations"); node:crypto's
// native HMAC gives the same bytes. test/unit/webhook-signature.test.ts holds the two equal on random
// ids, times, secrets and bodies, and every test receiver verifies with the official package.
import { createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { request } from 'undici';
import type { OutboundGuard } from '../outbound-guard.js';

export interface SendOutcome {
  ok: boolean;
  status: number | null;
  error: string | null;
  /** From Retry-After on 429 and 503. */
  retryAfterMs?: number;
  /** 410 Gone: the receiver asks to stop. */
  gone?: boolean;
}

// package.json is three levels up from both src/services/destinations and dist/services/destinations.
const { version } = createRequire(import.meta.url)('../../../package.json') as { version: string };
export const USER_AGENT = `Inlet/${version}`;

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
  const signals = [AbortSignal.timeout(options.timeoutMs)];
  if (options.signal !== undefined) signals.push(options.signal);
  try {
    const response = await request(options.url, {
      method: 'POST',
      headers,
      body: options.body,
      dispatcher: options.guard.dispatcher(),
      signal: AbortSignal.any(signals),
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
    });
    // The answer's body is not used; read a little of it for the error and drop the rest.
    let text = '';
    for await (const chunk of response.body) {
      if (text.length < 300) text += (chunk as Buffer).toString('utf8');
    }
    const status = response.statusCode;
    if (status >= 200 && status < 300) return { ok: true, status, error: null };
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
    const err = error as Error & { code?: string; cause?: Error & { code?: string } };
    const name =
      err.name === 'TimeoutError' || err.code === 'UND_ERR_HEADERS_TIMEOUT' || err.code === 'UND_ERR_BODY_TIMEOUT'
        ? `timed out after ${options.timeoutMs} ms`
        : err.message;
    const cause = err.cause?.message !== undefined && err.cause.message !== err.message ? `: ${err.cause.message}` : '';
    return { ok: false, status: null, error: `${name}${cause}`.slice(0, 500) };
  }
}
