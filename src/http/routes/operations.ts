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
          200: Type.Object({
            data: Type.Object({
              status: Type.Literal('ready'),
              storage: Type.String(),
              destinations: Type.Object(
                {
                  active: Type.Integer(),
                  paused: Type.Integer(),
                  disabled: Type.Integer(),
                  disabled_destinations: Type.Array(
                    Type.Object({
                      id: Type.String(),
                      product_id: Type.String(),
                      name: Type.String(),
                      reason: Type.Union([Type.String(), Type.Null()]),
                    }),
                  ),
                },
                { description: 'Disabled destinations are shown here, not as a failed check (clarifications §28)' },
              ),
            }),
          }),
          503: problemResponse('Storage unreachable'),
        },
      },
    },
    async () => {
      let summary: Awaited<ReturnType<typeof services.destinations.summary>>;
      try {
        await services.storage.ping();
        summary = await services.destinations.summary();
      } catch (error) {
        throw new AppError('unavailable', `Storage (${services.storage.name}) is not reachable.`, { cause: error });
      }
      const { byStatus, disabled } = summary;
      return {
        data: {
          status: 'ready' as const,
          storage: services.storage.name,
          destinations: { ...byStatus, disabled_destinations: disabled },
        },
      };
    },
  );

  app.get(
    '/metrics',
    { schema: { tags: ['operations'], summary: 'Prometheus metrics (text format)' } },
    async (_request, reply) => {
      reply.header('content-type', services.metrics.registry.contentType);
      return services.metrics.registry.metrics();
    },
  );
}
