// The OpenAPI 3.1 document (GET /openapi.json) and its UI (/docs), built from the route schemas.
// Every error answer is documented as problem+json (schemas/common.ts problemResponse); what every route
// with a path parameter can answer is added here, once, to the route's own schema.
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { problemResponse } from '../schemas/common.js';

/**
 * A path parameter longer than the router allows (Fastify's maxParamLength), or than its schema's
 * maxLength, is answered 400 before the handler: a route with a parameter states that 400 unless it
 * documents one of its own.
 */
export function withPathParameterErrors(route: RouteOptions): void {
  if (!route.url.includes('/:')) return;
  const schema = (route.schema ??= {}) as { hide?: boolean; response?: Record<string, unknown> };
  if (schema.hide === true) return;
  const response = schema.response ?? {};
  if (response[400] !== undefined) return;
  // A new object: response maps may be shared by several routes.
  schema.response = { ...response, 400: problemResponse('A path parameter is empty, too long or malformed') };
}

export const openapiPlugin = fp(
  async (app: FastifyInstance) => {
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: {
          title: 'Inlet API',
          version: '1.0.0',
          description:
            'Product events and identity. Write endpoints take an events key (inlet_ev_…), the traffic reports endpoint a reports key (inlet_rp_…), the admin API the operator token. Every error is application/problem+json with a stable `code`.',
        },
        components: {
          securitySchemes: {
            eventsKey: { type: 'http', scheme: 'bearer', description: 'Events API key (inlet_ev_…)' },
            reportsKey: { type: 'http', scheme: 'bearer', description: 'Reports API key (inlet_rp_…)' },
            adminToken: { type: 'http', scheme: 'bearer', description: 'INLET_ADMIN_TOKEN' },
            writeKeyBasic: {
              type: 'http',
              scheme: 'basic',
              description:
                'Segment write key (an events key) as the Basic user name; also X-Write-Key, "writeKey" in the body or ?writeKey=',
            },
          },
        },
        tags: [
          { name: 'events', description: 'Event ingestion' },
          { name: 'identity', description: 'Users: identify and alias' },
          { name: 'admin', description: 'Products and keys (operators)' },
          { name: 'traffic', description: 'Traffic reports and their sources (GA4, Plausible)' },
          { name: 'operations', description: 'Health and metrics' },
          { name: 'segment', description: 'Segment- and RudderStack-compatible ingestion (their SDKs, unchanged)' },
        ],
      },
      refResolver: {
        buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
      },
    });
    app.addHook('onRoute', withPathParameterErrors);
    await app.register(swaggerUi, { routePrefix: '/docs' });
    app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  },
  { name: 'inlet-openapi' },
);
