// What the admin plugin (src/http/admin/index.ts) promises every admin route, checked on every route the
// app actually has (read from its OpenAPI document), so a route added later is covered without being
// listed here: the admin token before anything else (401 problem+json with WWW-Authenticate, the body
// never read), the unknown product of a /products/{product_id} route as 404 problem+json, the route
// documented with the adminToken scheme and those answers, and no admin route at all without
// INLET_ADMIN_TOKEN (contract §1, §5).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adminHeaders, bearer, createTestApp, problemOf, type TestContext } from './helpers.js';

interface AdminOperation {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** The OpenAPI path, e.g. /admin/v1/products/{product_id}/events/{uuid}. */
  path: string;
  operation: {
    security?: Array<Record<string, unknown>>;
    responses: Record<string, unknown>;
    parameters?: Array<{ in: string; name: string }>;
  };
}

const MISSING_PRODUCT = 'prd_does_not_exist';

/** The path with every parameter filled: the product one with a product that does not exist. */
function urlOf(path: string): string {
  return path.replace(/\{([^}]+)\}/g, (_match, name: string) => (name === 'product_id' ? MISSING_PRODUCT : 'x'));
}

let ctx: TestContext;
let operations: AdminOperation[];

before(async () => {
  ctx = await createTestApp();
  const document = (await ctx.app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
    paths: Record<string, Record<string, AdminOperation['operation']>>;
  };
  operations = Object.entries(document.paths)
    .filter(([path]) => path.startsWith('/admin/v1/'))
    .flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, operation]) => ({
        method: method.toUpperCase() as AdminOperation['method'],
        path,
        operation,
      })),
    );
});
after(() => ctx.close());

describe('the admin plugin, on every admin route', () => {
  it('the app has the admin routes of every area (products, keys, users, traffic, events, rejections)', () => {
    const paths = new Set(operations.map((o) => o.path));
    for (const path of [
      '/admin/v1/products',
      '/admin/v1/keys/{key_id}',
      '/admin/v1/products/{product_id}/users/{external_id}',
      '/admin/v1/products/{product_id}/traffic_source',
      '/admin/v1/products/{product_id}/events/stream',
      '/admin/v1/products/{product_id}/rejections',
    ]) {
      assert.ok(paths.has(path), `${path} is documented`);
    }
  });

  it('every admin route is documented with the adminToken scheme and a 401; product routes with product_id and a 404', () => {
    for (const { method, path, operation } of operations) {
      assert.deepEqual(operation.security, [{ adminToken: [] }], `${method} ${path}`);
      assert.ok('401' in operation.responses, `${method} ${path} documents 401`);
      if (path.includes('{product_id}')) {
        assert.ok('404' in operation.responses, `${method} ${path} documents 404`);
        assert.ok(
          operation.parameters?.some((p) => p.in === 'path' && p.name === 'product_id'),
          `${method} ${path} documents product_id`,
        );
      }
    }
  });

  it('every admin route answers 401 problem+json with WWW-Authenticate to a missing, wrong or API-key token, before reading the body', async () => {
    const product = await ctx.product('admin-plugin');
    const refused = [
      {},
      { authorization: 'Bearer wrong-token-0123456789abcdef' },
      bearer(product.eventsKey),
      { authorization: 'Basic dGVzdC1hZG1pbi10b2tlbg==' },
    ];
    for (const { method, path } of operations) {
      for (const headers of refused) {
        // A body that is not JSON: were it read before the token check, the answer would be 415 or 400.
        const res = await ctx.app.inject({
          method,
          url: urlOf(path),
          headers: { ...headers, 'content-type': 'text/plain' },
          ...(method === 'GET' || method === 'DELETE' ? {} : { payload: 'not json' }),
        });
        assert.equal(res.statusCode, 401, `${method} ${path} with ${JSON.stringify(headers)}: ${res.body}`);
        assert.equal(problemOf(res).code, 'unauthorized');
        assert.equal(res.headers['www-authenticate'], 'Bearer');
      }
    }
  });

  it('every GET or DELETE of a /products/{product_id} route answers 404 problem+json naming the missing product', async () => {
    // POST/PUT/PATCH validate their body first (400 before the product lookup), so they are not asked here.
    const productRoutes = operations.filter(
      (o) => o.path.includes('{product_id}') && (o.method === 'GET' || o.method === 'DELETE'),
    );
    assert.ok(productRoutes.length >= 10, `found ${productRoutes.length} product routes`);
    for (const { method, path } of productRoutes) {
      const res = await ctx.app.inject({ method, url: urlOf(path), headers: adminHeaders() });
      assert.equal(res.statusCode, 404, `${method} ${path}: ${res.body}`);
      const problem = problemOf(res);
      assert.equal(problem.code, 'not_found');
      assert.match(problem.detail, new RegExp(MISSING_PRODUCT));
    }
  });
});

describe('without INLET_ADMIN_TOKEN', () => {
  let off: TestContext;
  before(async () => {
    off = await createTestApp({ adminToken: undefined });
  });
  after(() => off.close());

  it('no admin route exists: every one is 404 problem+json, whatever token is sent, and none is documented', async () => {
    for (const { method, path } of operations) {
      const res = await off.app.inject({ method, url: urlOf(path), headers: adminHeaders() });
      assert.equal(res.statusCode, 404, `${method} ${path}: ${res.body}`);
      assert.equal(problemOf(res).code, 'not_found');
    }
    const document = (await off.app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, unknown>;
    };
    assert.deepEqual(
      Object.keys(document.paths).filter((path) => path.startsWith('/admin/')),
      [],
    );
  });
});
