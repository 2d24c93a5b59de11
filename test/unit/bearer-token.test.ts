// One reading of `Authorization: Bearer <token>` for API keys and the admin token (contract §2).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bearerToken } from '../../src/domain/api-keys.js';

describe('bearerToken', () => {
  const cases: Array<[string | undefined, string | undefined]> = [
    ['Bearer inlet_ev_abc', 'inlet_ev_abc'],
    ['bearer inlet_ev_abc', 'inlet_ev_abc'],
    ['BEARER   inlet_ev_abc  ', 'inlet_ev_abc'],
    [undefined, undefined],
    ['', undefined],
    ['Bearer', undefined],
    ['Bearer ', undefined],
    ['Bearer a b', undefined],
    ['Basic aW5sZXQ6', undefined],
    ['Bearerinlet_ev_abc', undefined],
    ['Bearer\tinlet_ev_abc', undefined],
  ];
  for (const [header, token] of cases) {
    it(`${JSON.stringify(header)} → ${JSON.stringify(token)}`, () => assert.equal(bearerToken(header), token));
  }
});
