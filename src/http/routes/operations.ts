// Health, readiness and metrics (contract §9).
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type {} from '@fastify/swagger';
import { AppError } from '../../domain/errors.js';
import type { Services } from '../../services.js';
import { problemResponse } from '../schemas/common.js';

export function operationsRoutes(app: FastifyInstance, services: Services): void {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['operations'],
        summary: 'The process is alive',
        response: { 200: Type.Object({ data: Type.Object({ status: Type.Literal('ok') }) }) },
      },
    },
    async () => ({ data: { status: 'ok' as const } }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        tags: ['operations'],
        summary: 'Storage is reachable',
        response: {
          200: Type.Object({ data: Type.Object({ status: Type.Literal('ready'), storage: Type.String() }) }),
          503: problemResponse('Storage unreachable'),
        },
      },
    },
    async () => {
      try {
        await services.storage.ping();
      } catch (error) {
        throw new AppError('unavailable', `Storage (${services.storage.dialect}) is not reachable.`, { cause: error });
      }
      return { data: { status: 'ready' as const, storage: services.storage.dialect } };
    },
  );

  app.get('/metrics', { schema: { tags: ['operations'], summary: 'Prometheus metrics (text format)' } }, async (_request, reply) => {
    reply.header('content-type', services.metrics.registry.contentType);
    return services.metrics.registry.metrics();
  });
}
