// What the admin plugin gives each of its routes: `request.product` and the OpenAPI defaults. Kept
// apart from index.ts so route files can import it without importing the plugin that imports them.
import type { FastifyRequest, preHandlerAsyncHookHandler, RouteOptions } from 'fastify';
import type { ProductRecord } from '../../storage/types.js';
import { ProductIdParams, problemResponse } from '../schemas/common.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The product of an admin `/products/:product_id…` route, found before its handler runs; null elsewhere. */
    product: ProductRecord | null;
  }
}

/** The product of a `/products/:product_id…` admin route (its lookup ran before the handler). */
export function productOf(request: FastifyRequest): ProductRecord {
  if (!request.product) throw new Error('route has no :product_id, or is outside the admin plugin');
  return request.product;
}

/** The defaults every admin route gets unless it states its own; product routes also get the product lookup. */
export function withAdminDefaults(route: RouteOptions, lookupProduct: preHandlerAsyncHookHandler): void {
  const schema = (route.schema ??= {}) as Record<string, unknown>;
  schema.tags ??= ['admin'];
  schema.security ??= [{ adminToken: [] }];
  const response = (schema.response ??= {}) as Record<number, unknown>;
  response[401] ??= problemResponse('Missing or wrong admin token');
  if (!route.url.includes('/:product_id')) return;
  schema.params ??= ProductIdParams;
  response[404] ??= problemResponse('No such product');
  // Fastify runs onRoute again for the HEAD twin of a GET route, with these options copied: add once.
  const preHandler =
    route.preHandler === undefined ? [] : Array.isArray(route.preHandler) ? route.preHandler : [route.preHandler];
  if (!preHandler.includes(lookupProduct)) route.preHandler = [lookupProduct, ...preHandler];
}
