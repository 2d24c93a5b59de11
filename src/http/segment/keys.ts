// How a Segment-compatible client presents its write key, in the order of segment-compat "Keys":
// Basic auth username (trailing ':' optional), X-Write-Key, `writeKey` in the body, `writeKey` query.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { bearerToken } from '../../domain/api-keys.js';
import { AppError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { applyKeyPolicy } from '../browser-keys.js';

export function presentedKey(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header !== undefined) {
    const basic = /^Basic[ ]+([A-Za-z0-9+/=_-]+)\s*$/i.exec(header);
    if (basic !== null) {
      const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      const user = colon < 0 ? decoded : decoded.slice(0, colon);
      if (user !== '') return user;
    }
    const bearer = bearerToken(header);
    if (bearer !== undefined) return bearer;
  }
  const header2 = request.headers['x-write-key'];
  if (typeof header2 === 'string' && header2.trim() !== '') return header2.trim();
  const body = request.body as { writeKey?: unknown } | null | undefined;
  if (typeof body === 'object' && body !== null && typeof body.writeKey === 'string' && body.writeKey !== '')
    return body.writeKey;
  const query = (request.query as { writeKey?: unknown } | undefined)?.writeKey;
  if (typeof query === 'string' && query !== '') return query;
  return undefined;
}

/**
 * Authenticates the write key (events or browser key) into `request.auth`, then the key policy:
 * origins, CORS, rate limits.
 */
export async function segmentAuth(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  key: string | undefined,
): Promise<void> {
  if (key === undefined) {
    throw new AppError(
      'unauthorized',
      'Send your write key as Basic auth (the key as user name), X-Write-Key, "writeKey" in the body or ?writeKey=.',
    );
  }
  const auth = await services.keys.authenticateKey(key, ['events', 'browser']);
  request.auth = auth;
  await applyKeyPolicy(services, request, reply, auth);
}
