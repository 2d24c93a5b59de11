// What the warehouse destination tests (warehouse-postgres, warehouse-parquet) share: admin requests, events
// sent through the public API, and delivery passes run until nothing is left, all against the test's app.
import { strict as assert } from 'node:assert';
import type { FastifyInstance } from 'fastify';
import { adminHeaders, bearer, type TestContext } from '../helpers.js';

/** The helpers for the app `current()` returns (the test file's context, made in its `before`). */
export function warehouseTestKit(current: () => TestContext) {
  return {
    /** An admin API request (`url` after /admin/v1), to the test's app or to `app`. */
    admin(method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown, app: FastifyInstance = current().app) {
      return app.inject({
        method,
        url: `/admin/v1${url}`,
        headers: adminHeaders(),
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
    },

    /** Sends one event with `key`; returns its uuid. */
    async track(key: string, event: string, subjectId: string, properties: Record<string, unknown> = {}) {
      const res = await current().app.inject({
        method: 'POST',
        url: '/api/v2/events',
        headers: bearer(key),
        payload: { event, subject_type: 'user', subject_id: subjectId, properties },
      });
      assert.equal(res.statusCode, 201, res.body);
      return res.json().data.uuid as string;
    },

    /** Delivery passes until the destinations have nothing left (their batches wait for max_wait_ms 0 here). */
    async deliver(): Promise<void> {
      const destinations = current().services.destinations;
      for (let i = 0; i < 4; i++) {
        await destinations.tick();
        await destinations.idle();
      }
    },
  };
}
