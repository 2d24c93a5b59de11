// The admin API (contract §1, §5, §8; events-out §3–5) as one encapsulated plugin under /admin/v1,
// registered only when INLET_ADMIN_TOKEN is set (without it every admin URL is an unknown route, 404).
// What every admin route shares is said here once, as group hooks, not on each route:
// - onRequest: the admin token (Bearer, compared in constant time), before any body is read;
// - preHandler of every `/products/:product_id…` route: the product, 404 problem+json when there is
//   none, then `request.product` for the handler (after schema validation, as the routes did before);
// - OpenAPI defaults: tag "admin", the adminToken security scheme, the 401 answer and, for product
//   routes, the product_id path parameter and the 404 answer. A route states only what is its own.
// How to add a route: src/http/README.md.
import type { FastifyInstance, preHandlerAsyncHookHandler } from 'fastify';
import type { Services } from '../../services.js';
import { requireAdmin } from '../auth.js';
import { withAdminDefaults } from './context.js';
import { adminDestinationRoutes } from './destinations.js';
import { adminErasureRoutes } from './erasures.js';
import { adminEventRoutes } from './events.js';
import { adminGovernanceRoutes } from './governance.js';
import { adminProductRoutes } from './products.js';
import { adminRejectionRoutes } from './rejections.js';
import { adminStatsRoutes } from './stats.js';
import { adminTrafficRoutes } from './traffic.js';
import { adminTransformationRoutes } from './transformations.js';
import { adminUserRoutes } from './users.js';

export interface AdminPluginOptions {
  services: Services;
  adminToken: string;
}

/** The admin route files; each registers its routes (paths relative to /admin/v1) on the admin context. */
const ADMIN_ROUTES: Array<(app: FastifyInstance, services: Services) => void> = [
  adminProductRoutes,
  adminUserRoutes,
  adminTrafficRoutes,
  adminEventRoutes,
  adminRejectionRoutes,
  adminDestinationRoutes,
  adminGovernanceRoutes,
  adminTransformationRoutes,
  adminStatsRoutes,
  adminErasureRoutes,
];

export async function adminPlugin(app: FastifyInstance, { services, adminToken }: AdminPluginOptions): Promise<void> {
  app.decorateRequest('product', null);
  app.addHook('onRequest', requireAdmin(adminToken));

  const lookupProduct: preHandlerAsyncHookHandler = async function lookupProduct(request) {
    request.product = await services.keys.requireProduct((request.params as { product_id: string }).product_id);
  };
  app.addHook('onRoute', (route) => withAdminDefaults(route, lookupProduct));

  for (const routes of ADMIN_ROUTES) routes(app, services);
}
