// What the browser SDKs fetch before sending: Segment's project settings (analytics-next) and
// RudderStack's source config. Both point the SDK at this server and switch its extras off.
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { applyKeyPolicy } from '../browser-keys.js';
import { authOf } from '../auth.js';
import { presentedKey } from './keys.js';
import { problemResponse } from '../schemas/common.js';

const unknownKey = { 404: problemResponse('No such write key (an unknown, revoked or expired key, or none)') };

const SegmentSettings = Type.Object(
  {
    integrations: Type.Object({
      'Segment.io': Type.Object({ apiKey: Type.String(), apiHost: Type.String(), protocol: Type.String() }),
    }),
    metrics: Type.Object({ sampleRate: Type.Number() }),
    plan: Type.Object({}),
    enabledMiddleware: Type.Object({}),
  },
  { description: "The project's settings: the Segment.io integration pointed at this server, metrics off" },
);

const RudderSourceConfig = Type.Object(
  {
    source: Type.Object({
      id: Type.String(),
      name: Type.String(),
      enabled: Type.Boolean(),
      config: Type.Object({}),
      destinations: Type.Array(Type.Unknown()),
      workspaceId: Type.String(),
    }),
  },
  { description: 'The source of this write key (its product), with no destinations' },
);

/** The public base URL of this server: INLET_PUBLIC_URL, else the request's Host (never 0.0.0.0). */
export function publicBase(services: Services, request: FastifyRequest): { protocol: 'http' | 'https'; host: string } {
  const configured = services.config.publicUrl;
  if (configured !== undefined) {
    const url = new URL(configured);
    return {
      protocol: url.protocol === 'https:' ? 'https' : 'http',
      host: url.host + url.pathname.replace(/\/+$/, ''),
    };
  }
  const host = request.host.startsWith('0.0.0.0') ? request.host.replace('0.0.0.0', '127.0.0.1') : request.host;
  return { protocol: request.protocol === 'https' ? 'https' : 'http', host };
}

/** The write key of a settings request into `request.auth`; an unknown key is 404, as Segment's CDN answers. */
async function settingsKey(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  key: string | undefined,
): Promise<void> {
  if (key === undefined) throw new AppError('not_found', 'No such write key.');
  let auth;
  try {
    auth = await services.keys.authenticateKey(key, ['events', 'browser']);
  } catch (error) {
    if (error instanceof AppError && (error.code === 'unauthorized' || error.code === 'forbidden'))
      throw new AppError('not_found', 'No such write key.');
    throw error;
  }
  request.auth = auth;
  await applyKeyPolicy(services, request, reply, auth);
}

export function settingsRoutes(app: FastifyInstance, services: Services): void {
  app.get<{ Params: { key: string } }>(
    '/v1/projects/:key/settings',
    {
      schema: {
        tags: ['segment'],
        summary: "analytics.js settings for a write key (points the SDK's Segment.io integration here)",
        response: { 200: SegmentSettings, ...unknownKey },
      },
    },
    async (request, reply) => {
      const key = request.params.key;
      await settingsKey(services, request, reply, key);
      const { protocol, host } = publicBase(services, request);
      reply.header('cache-control', 'public, max-age=300');
      return {
        integrations: { 'Segment.io': { apiKey: key, apiHost: `${host}/v1`, protocol } },
        metrics: { sampleRate: 0 },
        plan: {},
        enabledMiddleware: {},
      };
    },
  );
  app.get(
    '/sourceConfig',
    {
      schema: {
        tags: ['segment'],
        summary: 'RudderStack source config for a write key',
        response: { 200: RudderSourceConfig, ...unknownKey },
      },
    },
    async (request, reply) => {
      await settingsKey(services, request, reply, presentedKey(request));
      const auth = authOf(request);
      reply.header('cache-control', 'public, max-age=300');
      return {
        source: {
          id: auth.productId,
          name: auth.productId,
          enabled: true,
          config: {},
          destinations: [],
          workspaceId: auth.productId,
        },
      };
    },
  );
}
