// A product of the test app to put transformation steps on (transformations.md §3), with what the transformation
// tests read back: its admin requests, `put(steps)` (asserting 200), a native batch, a Segment batch, the stored
// events and the recorded rejections.
import assert from 'node:assert/strict';
import { bearer, productAdmin, type TestContext } from '../helpers.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows read back from JSON answers
type Row = Record<string, any>;

export async function transformedProduct(ctx: TestContext, name: string) {
  const product = await ctx.product(name);
  const admin = productAdmin(ctx.app, product.id);
  const put = async (steps: unknown[]) => {
    const res = await admin('PUT', '/transformation', { steps });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data;
  };
  const batch = (events: unknown[]) =>
    ctx.app.inject({
      method: 'POST',
      url: '/api/v2/events/batch',
      headers: bearer(product.eventsKey),
      payload: { events },
    });
  /** `POST /v1/batch` with the events key as Segment's Basic user name. */
  const segment = (items: unknown[]) =>
    ctx.app.inject({
      method: 'POST',
      url: '/v1/batch',
      headers: { authorization: `Basic ${Buffer.from(`${product.eventsKey}:`).toString('base64')}` },
      payload: { batch: items },
    });
  const events = async () => (await admin('GET', '/events?limit=100')).json().data as Row[];
  const rejections = async () => {
    await ctx.services.rejections.flush();
    return (await admin('GET', '/rejections')).json().data as Row[];
  };
  return { ...product, admin, put, batch, segment, events, rejections };
}
