// Keys in URLs never reach a log line (clarifications §21); INLET_TRUST_PROXY parsing (§23).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redactUrl } from '../../src/http/redact.js';
import { ConfigError, loadConfig } from '../../src/config.js';

describe('redactUrl', () => {
  const key = 'inlet_pk_' + 'A1'.repeat(22);
  const cases: Array<[string, string]> = [
    [`/v1/projects/${key}/settings`, '/v1/projects/[redacted]/settings'],
    [`/v1/projects/not-a-key/settings`, '/v1/projects/[redacted]/settings'],
    [`/beacon/v1/batch?writeKey=${key}&x=1`, '/beacon/v1/batch?writeKey=[redacted]&x=1'],
    [`/sourceConfig/?v=3&writeKey=abc`, '/sourceConfig/?v=3&writeKey=[redacted]'],
    [`/beacon/v1/batch?WRITEKEY=abc`, '/beacon/v1/batch?WRITEKEY=[redacted]'],
    [`/v1/batch?foo=${key}`, '/v1/batch?foo=inlet_pk_[redacted]'],
    ['/api/v2/events', '/api/v2/events'],
  ];
  for (const [url, expected] of cases) it(url.slice(0, 40), () => assert.equal(redactUrl(url), expected));
});

describe('INLET_TRUST_PROXY', () => {
  it('is off by default; takes a hop count or addresses/CIDRs; refuses anything else', () => {
    assert.equal(loadConfig({}).trustProxy, false);
    assert.equal(loadConfig({ INLET_TRUST_PROXY: '1' }).trustProxy, 1);
    assert.deepEqual(loadConfig({ INLET_TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).trustProxy, [
      '10.0.0.0/8',
      '127.0.0.1',
    ]);
    assert.throws(() => loadConfig({ INLET_TRUST_PROXY: 'yes please' }), ConfigError);
  });
});
