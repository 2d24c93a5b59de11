// What a key may do from a web page (segment-compat "Keys", "CORS"; clarifications §18–19):
// browser keys (inlet_pk_) only from their allowed origins, with a per-client-IP limit besides the
// per-key one; secret events keys refused when a browser presents them. CORS answers only the
// allowed origin of the key, never `*`, without credentials.
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { bearerToken, originAllowed } from '../domain/api-keys.js';
import { AppError } from '../domain/errors.js';
import type { Services } from '../services.js';
import type { AuthContext } from '../services/key-service.js';
import type { RateLimitDecision } from '../services/rate-limiter.js';

export const CORS_ALLOW_HEADERS =
  'Authorization, Content-Type, Content-Encoding, X-Write-Key, X-Retry-Count, AnonymousId, SentAt, Rsa-Retry-Attempt, Rsa-Since-Last-Attempt, Rsa-Since-First-Attempt, Rsa-Retry-Reason, Rsa-Recovered';

/** The native routes a browser key may call (everything else needs another kind). */
export const BROWSER_NATIVE_ROUTES = ['/api/v2/events', '/api/v2/events/batch', '/api/v2/identify', '/api/v2/alias'];

export function secretKeyInBrowser(): AppError {
  return new AppError(
    'secret_key_in_browser',
    'This is a secret events key, sent from a web page: it has leaked and anyone can read it there. Revoke it, and use a browser key in web pages (inlet keys create --kind browser --origin https://your.app).',
  );
}

function limited(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  decision: RateLimitDecision,
  what: string,
): void {
  if (decision.allowed) return;
  services.metrics.rateLimited.inc({ endpoint: request.routeOptions.url ?? 'unknown' });
  reply.header('retry-after', String(decision.retryAfterSeconds));
  throw new AppError('rate_limited', `Rate limit of ${what} exceeded; retry in ${decision.retryAfterSeconds} s.`, {
    headers: { 'retry-after': String(decision.retryAfterSeconds) },
  });
}

/**
 * After the key is known: the origin rule (403 origin_not_allowed / secret_key_in_browser), the CORS
 * answer for an allowed origin, the per-key rate limit and, for browser keys, the per-IP one.
 */
export function applyKeyPolicy(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  auth: AuthContext,
): void | Promise<void> {
  const origin = request.headers.origin;
  if (auth.kind === 'browser') {
    if (origin !== undefined) {
      if (!originAllowed(origin, auth.allowedOrigins ?? [])) {
        throw new AppError(
          'origin_not_allowed',
          `The origin ${origin} is not on this browser key's allowed origins; add it with PATCH /admin/v1/keys/{key_id}.`,
        );
      }
      reply.header('access-control-allow-origin', origin);
      reply.header('vary', 'Origin');
    }
  } else if (origin !== undefined && auth.kind === 'events') {
    throw secretKeyInBrowser();
  }
  const perIp = () => {
    if (auth.kind === 'browser' && services.browserIpLimiter.enabled) {
      limited(
        services,
        request,
        reply,
        services.browserIpLimiter.take(`${auth.keyId}\u0000${request.ip}`),
        'this browser key from your address',
      );
    }
  };
  const limiter = services.rateLimiter;
  if (!limiter.enabled) return perIp();
  const perKey = (decision: RateLimitDecision) => {
    reply.header('ratelimit-limit', String(decision.limit));
    reply.header('ratelimit-remaining', String(decision.remaining));
    reply.header('ratelimit-reset', String(decision.resetSeconds));
    limited(services, request, reply, decision, 'this key');
    perIp();
  };
  const taken = limiter.take(auth.keyId);
  // The in-process limiter answers at once (no promise on the hot path); a shared one (PostgreSQL, Redis) later.
  return taken instanceof Promise ? taken.then(perKey) : perKey(taken);
}

/** onRequest hook of the native ingest routes: a Bearer events or browser key, then the key policy. */
export function requireIngestKey(services: Services): onRequestAsyncHookHandler {
  return async function authenticateIngest(request, reply) {
    const token = bearerToken(request.headers.authorization);
    if (token === undefined) throw new AppError('unauthorized', 'Send your API key as "Authorization: Bearer <key>".');
    const auth = await services.keys.authenticateKey(token, ['events', 'browser']);
    request.auth = auth;
    await applyKeyPolicy(services, request, reply, auth);
  };
}

/**
 * Preflights carry no key, so they grant nothing: they echo the origin with the allowed methods and
 * headers, and the real request is what is checked.
 */
export function corsPreflight(app: FastifyInstance, paths: string[]): void {
  for (const path of paths) {
    app.options(path, { schema: { hide: true } }, async (request, reply) => {
      const origin = request.headers.origin;
      if (origin !== undefined) {
        reply.header('access-control-allow-origin', origin);
        reply.header('access-control-allow-methods', 'POST, GET, OPTIONS');
        reply.header('access-control-allow-headers', CORS_ALLOW_HEADERS);
        reply.header('access-control-max-age', '86400');
        reply.header('vary', 'Origin');
      }
      reply.code(204);
      return null;
    });
  }
}
