// Contract §2: configuration from the environment, validated once, defaults, clear errors.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ConfigError, loadConfig } from '../../src/config.js';

describe('loadConfig defaults (contract §2, §5, §7)', () => {
  const config = loadConfig({});
  const defaults: Array<[string, unknown, unknown]> = [
    ['PORT', config.port, 3000],
    ['HOST', config.host, '127.0.0.1'],
    ['INLET_DATABASE_URL', config.databaseUrl, 'sqlite:./data/inlet.db'],
    ['INLET_ADMIN_TOKEN', config.adminToken, undefined],
    ['INLET_LOG_LEVEL', config.logLevel, 'info'],
    ['INLET_LEGACY_FLAT', config.legacyFlat, 'accept'],
    ['INLET_RATE_LIMIT_RPS', config.rateLimitRps, 2000],
    ['INLET_RATE_LIMIT_BURST', config.rateLimitBurst, 4000],
    ['max body bytes', config.maxBodyBytes, 5 * 1024 * 1024],
    ['max event bytes', config.maxEventBytes, 32 * 1024],
    ['max batch events', config.maxBatchEvents, 1000],
    ['INLET_TRANSFORM_FUNCTION_CPU_MS', config.transformFunctionCpuMs, 50],
    ['INLET_TRANSFORM_FUNCTION_MEMORY_MB', config.transformFunctionMemoryMb, 32],
    ['INLET_GEOIP_DATABASE', config.geoipDatabase, undefined],
    ['INLET_DESTINATIONS_WORKER_NICE', config.destinationsWorkerNice, 10],
  ];
  for (const [name, actual, expected] of defaults) {
    it(`${name} defaults to ${String(expected)}`, () => assert.equal(actual, expected));
  }

  it('does not read process.env when given an environment', () => {
    const saved = process.env.PORT;
    process.env.PORT = '1234';
    try {
      assert.equal(loadConfig({}).port, 3000);
    } finally {
      if (saved === undefined) delete process.env.PORT;
      else process.env.PORT = saved;
    }
  });
});

describe('loadConfig values', () => {
  const cases: Array<[Record<string, string>, (c: ReturnType<typeof loadConfig>) => unknown, unknown]> = [
    [{ PORT: '8080' }, (c) => c.port, 8080],
    [{ HOST: '0.0.0.0' }, (c) => c.host, '0.0.0.0'],
    [{ INLET_DATABASE_URL: 'postgres://u@h:5432/db' }, (c) => c.databaseUrl, 'postgres://u@h:5432/db'],
    [{ INLET_DATABASE_URL: 'postgresql://u@h/db' }, (c) => c.databaseUrl, 'postgresql://u@h/db'],
    [{ INLET_DATABASE_URL: 'sqlite:/tmp/x.db' }, (c) => c.databaseUrl, 'sqlite:/tmp/x.db'],
    [{ INLET_ADMIN_TOKEN: 'a-long-enough-secret-token' }, (c) => c.adminToken, 'a-long-enough-secret-token'],
    [{ INLET_ADMIN_TOKEN: '' }, (c) => c.adminToken, undefined],
    [{ INLET_LOG_LEVEL: 'debug' }, (c) => c.logLevel, 'debug'],
    [{ INLET_LEGACY_FLAT: 'reject' }, (c) => c.legacyFlat, 'reject'],
    [{ INLET_RATE_LIMIT_RPS: '0' }, (c) => c.rateLimitRps, 0],
    [{ INLET_RATE_LIMIT_RPS: '50' }, (c) => c.rateLimitBurst, 100],
    [{ INLET_RATE_LIMIT_RPS: '50', INLET_RATE_LIMIT_BURST: '70' }, (c) => c.rateLimitBurst, 70],
  ];
  for (const [env, pick, expected] of cases) {
    it(`${JSON.stringify(env)} → ${String(expected)}`, () => assert.equal(pick(loadConfig(env)), expected));
  }
});

describe('loadConfig errors name the variable and the bad value', () => {
  const bad: Array<[string, string]> = [
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['INLET_DATABASE_URL', 'mysql://localhost/db'],
    ['INLET_DATABASE_URL', 'sqlite:'],
    ['INLET_ADMIN_TOKEN', 'short'],
    ['INLET_LOG_LEVEL', 'verbose'],
    ['INLET_LEGACY_FLAT', 'maybe'],
    ['INLET_RATE_LIMIT_RPS', 'fast'],
    ['INLET_RATE_LIMIT_RPS', '-5'],
    ['INLET_RATE_LIMIT_BURST', '1e3'],
    ['INLET_TRANSFORM_FUNCTION_CPU_MS', '0'],
    ['INLET_TRANSFORM_FUNCTION_MEMORY_MB', '8'],
    ['INLET_GEOIP_DATABASE', 'no/such/GeoLite2-City.mmdb'],
    ['INLET_DESTINATIONS_WORKER_NICE', '20'],
    ['INLET_DESTINATIONS_WORKER_NICE', '-5'],
  ];
  for (const [name, value] of bad) {
    it(`${name}=${JSON.stringify(value)}`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError, String(error));
          assert.match(error.message, new RegExp(name));
          if (name !== 'INLET_ADMIN_TOKEN' && value !== 'sqlite:')
            assert.ok(error.message.includes(value), error.message);
          return true;
        },
      );
    });
  }
});

describe('every setting is documented (contract §2: "every one is listed in the README")', () => {
  const source = readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
  const names = new Set([...source.matchAll(/env(?:\.|, ')([A-Z][A-Z0-9_]+)/g)].map((m) => m[1]!));

  it('each environment variable read by loadConfig appears in the README', async () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    for (const required of [
      'PORT',
      'HOST',
      'INLET_DATABASE_URL',
      'INLET_ADMIN_TOKEN',
      'INLET_LOG_LEVEL',
      'INLET_LEGACY_FLAT',
      'INLET_RATE_LIMIT_RPS',
      'INLET_RATE_LIMIT_BURST',
    ]) {
      assert.ok(names.has(required), `loadConfig does not read ${required}`);
    }
    const missing = [...names].filter((name) => !new RegExp(`\\b${name}\\b`).test(readme));
    assert.deepEqual(missing, []);
  });

  it('each one has a row, with its default and meaning, in docs/configuration.md', () => {
    const reference = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
    const missing = [...names].filter(
      (name) => !new RegExp(`^\\| \`${name}\` \\| [^|]+ \\| [^|]`, 'm').test(reference),
    );
    assert.deepEqual(missing, []);
  });
});

describe('limits are configurable (contract §7)', () => {
  const cases: Array<[string, string, (c: ReturnType<typeof loadConfig>) => number]> = [
    ['INLET_MAX_BODY_BYTES', '1048576', (c) => c.maxBodyBytes],
    ['INLET_MAX_EVENT_BYTES', '4096', (c) => c.maxEventBytes],
    ['INLET_MAX_BATCH_EVENTS', '50', (c) => c.maxBatchEvents],
  ];
  for (const [name, value, pick] of cases) {
    it(`${name}=${value}`, () => {
      assert.equal(pick(loadConfig({ [name]: value })), Number(value));
      assert.throws(() => loadConfig({ [name]: 'lots' }), new RegExp(name));
    });
  }
});

describe('slow and idle clients: receive and keep-alive timeouts (issue 9, clarifications §12)', () => {
  it('defaults suit a public ingest endpoint: 10 s for headers, 30 s for a whole request, 72 s keep-alive', () => {
    const config = loadConfig({});
    assert.equal(config.headersTimeoutMs, 10_000);
    assert.equal(config.requestTimeoutMs, 30_000);
    assert.equal(config.keepAliveTimeoutMs, 72_000);
  });

  it('each is a setting', () => {
    const config = loadConfig({
      INLET_HEADERS_TIMEOUT_MS: '2000',
      INLET_REQUEST_TIMEOUT_MS: '5000',
      INLET_KEEP_ALIVE_TIMEOUT_MS: '9000',
    });
    assert.deepEqual([config.headersTimeoutMs, config.requestTimeoutMs, config.keepAliveTimeoutMs], [2000, 5000, 9000]);
  });

  for (const [name, value] of [
    ['INLET_HEADERS_TIMEOUT_MS', 'soon'],
    ['INLET_HEADERS_TIMEOUT_MS', '0'],
    ['INLET_HEADERS_TIMEOUT_MS', '300001'],
    ['INLET_REQUEST_TIMEOUT_MS', '-1'],
    ['INLET_REQUEST_TIMEOUT_MS', '99'],
  ] as const) {
    it(`${name}=${JSON.stringify(value)} stops start-up naming the variable`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) =>
          error instanceof ConfigError && error.message.includes(name) && error.message.includes(value),
      );
    });
  }

  it('a request timeout shorter than the headers timeout stops start-up naming both', () => {
    assert.throws(
      () => loadConfig({ INLET_HEADERS_TIMEOUT_MS: '20000', INLET_REQUEST_TIMEOUT_MS: '15000' }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /INLET_REQUEST_TIMEOUT_MS \(15000\).*INLET_HEADERS_TIMEOUT_MS \(20000\)/.test(error.message),
    );
  });
});

describe('INLET_OUTBOUND_ALLOW_PRIVATE and its old name (clarifications §33)', () => {
  it('is off by default, with nothing to warn about', () => {
    const config = loadConfig({});
    assert.equal(config.outboundAllowPrivate, false);
    assert.deepEqual(config.deprecations, []);
  });

  it('INLET_OUTBOUND_ALLOW_PRIVATE sets it', () => {
    for (const [value, expected] of [
      ['true', true],
      ['on', true],
      ['false', false],
    ] as const) {
      const config = loadConfig({ INLET_OUTBOUND_ALLOW_PRIVATE: value });
      assert.equal(config.outboundAllowPrivate, expected, value);
      assert.deepEqual(config.deprecations, []);
    }
    assert.throws(() => loadConfig({ INLET_OUTBOUND_ALLOW_PRIVATE: 'maybe' }), /INLET_OUTBOUND_ALLOW_PRIVATE.*maybe/);
  });

  it('INLET_DESTINATIONS_ALLOW_PRIVATE still sets it, with a deprecation warning naming the new name', () => {
    const config = loadConfig({ INLET_DESTINATIONS_ALLOW_PRIVATE: 'true' });
    assert.equal(config.outboundAllowPrivate, true);
    assert.equal(config.deprecations.length, 1);
    assert.match(
      config.deprecations[0]!,
      /INLET_DESTINATIONS_ALLOW_PRIVATE is deprecated: set INLET_OUTBOUND_ALLOW_PRIVATE/,
    );
    assert.equal(loadConfig({ INLET_DESTINATIONS_ALLOW_PRIVATE: 'false' }).outboundAllowPrivate, false);
  });

  it('both names: the same value warns that the old one is not needed; different values stop start-up', () => {
    const same = loadConfig({ INLET_OUTBOUND_ALLOW_PRIVATE: 'true', INLET_DESTINATIONS_ALLOW_PRIVATE: 'yes' });
    assert.equal(same.outboundAllowPrivate, true);
    assert.match(same.deprecations.join('\n'), /INLET_DESTINATIONS_ALLOW_PRIVATE is deprecated.*remove it/);
    assert.throws(
      () => loadConfig({ INLET_OUTBOUND_ALLOW_PRIVATE: 'false', INLET_DESTINATIONS_ALLOW_PRIVATE: 'true' }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /INLET_OUTBOUND_ALLOW_PRIVATE=false and its deprecated name INLET_DESTINATIONS_ALLOW_PRIVATE=true disagree/.test(
          error.message,
        ),
    );
  });
});
