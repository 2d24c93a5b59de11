// API-key authentication and per-key rate limiting, run in onRequest: a request without a valid key
// is refused before its body is read. `request.auth` is the one place a keyed route finds its key.
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { createHash, timingSafeEqual } from 'node:crypto';
import { AppError } from '../domain/errors.js';
import { bearerToken, type KeyKind } from '../domain/api-keys.js';
import type { Services } from '../services.js';
import type { AuthContext } from '../services/key-service.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The key that authenticated this request, set by the route's key hook; null on routes without a key. */
    auth: AuthContext | null;
  }
}

/**
 * Declares `request.auth` once for every route (`decorateRequest` with null: Fastify then builds every
 * request object with the property already there, so its shape never changes on the hot path).
 */
export const authPlugin = fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('auth', null);
  },
  { name: 'inlet-auth' },
);

/** The authenticated key of a request whose route required one. */
export function authOf(request: FastifyRequest): AuthContext {
  if (request.auth === null) throw new Error('route has no authentication hook');
  return request.auth;
}

export function requireKey(services: Services, kind: KeyKind): onRequestAsyncHookHandler {
  return async function authenticate(request: FastifyRequest, reply: FastifyReply) {
    request.auth = await services.keys.authenticate(request.headers.authorization, kind);
    const limiter = services.rateLimiter;
    if (!limiter.enabled) return;
    const taken = limiter.take(request.auth.keyId);
    // The in-process limiter answers at once; a shared one (PostgreSQL, Redis) with a promise.
    const decision = taken instanceof Promise ? await taken : taken;
    reply.header('ratelimit-limit', String(decision.limit));
    reply.header('ratelimit-remaining', String(decision.remaining));
    reply.header('ratelimit-reset', String(decision.resetSeconds));
    if (!decision.allowed) {
      services.metrics.rateLimited.inc({ endpoint: request.routeOptions.url ?? 'unknown' });
      throw new AppError(
        'rate_limited',
        `Rate limit of this API key exceeded; retry in ${decision.retryAfterSeconds} s.`,
        {
          headers: { 'retry-after': String(decision.retryAfterSeconds) },
        },
      );
    }
  };
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export function requireAdmin(adminToken: string): onRequestAsyncHookHandler {
  const expected = digest(adminToken);
  return async function authenticateAdmin(request: FastifyRequest) {
    const token = bearerToken(request.headers.authorization);
    // Comparing fixed-length digests keeps the comparison constant-time whatever was sent.
    if (token === undefined || !timingSafeEqual(digest(token), expected)) {
      throw new AppError('unauthorized', 'Send the admin token as "Authorization: Bearer <INLET_ADMIN_TOKEN>".');
    }
  };
}
