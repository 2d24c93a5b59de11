// INLET_DATABASE_URL for PostgreSQL in libpq's form: several hosts, IPv6, ports, target_session_attrs,
// sslmode; start-up errors that name the variable; which host the pool tries next; which errors are
// "unavailable". The pool against a real server: test/system/postgres-pool.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config.js';
import { parsePostgresUrl, postgresSettings } from '../../src/storage/postgres/connection-url.js';
import { HostRing } from '../../src/storage/postgres/pool.js';
import { isConnectionLost, isPostgresUnavailable } from '../../src/storage/postgres/errors.js';
import { openStorage } from '../../src/storage/connect.js';

describe('PostgreSQL URL parsing (libpq form)', () => {
  it('reads the URL pg_autoctl show uri prints', () => {
    const settings = parsePostgresUrl(
      'postgres://postgres@127.0.0.1:6101,127.0.0.1:6102/events?target_session_attrs=read-write&sslmode=prefer',
    );
    assert.deepEqual(settings.hosts, [
      { host: '127.0.0.1', port: 6101 },
      { host: '127.0.0.1', port: 6102 },
    ]);
    assert.equal(settings.user, 'postgres');
    assert.equal(settings.database, 'events');
    assert.equal(settings.targetSessionAttrs, 'read-write');
    assert.equal(settings.sslMode, 'prefer');
  });

  it('one host is a list of one, with libpq defaults (port 5432, any, sslmode prefer)', () => {
    const settings = parsePostgresUrl('postgresql://db.internal/inlet');
    assert.deepEqual(settings.hosts, [{ host: 'db.internal', port: 5432 }]);
    assert.equal(settings.targetSessionAttrs, 'any');
    assert.equal(settings.sslMode, 'prefer');
    assert.equal(settings.user, undefined);
    assert.equal(settings.loadBalanceHosts, 'disable');
  });

  it('table: hosts, IPv6 in brackets, missing ports', () => {
    const cases: Array<[string, Array<{ host: string; port: number }>]> = [
      ['postgres://u@[::1]:5433/db', [{ host: '::1', port: 5433 }]],
      ['postgres://u@[::1]/db', [{ host: '::1', port: 5432 }]],
      [
        'postgres://u@[2001:db8::7],[fe80::1%25eth0]:6000/db',
        [
          { host: '2001:db8::7', port: 5432 },
          { host: 'fe80::1%25eth0', port: 6000 },
        ],
      ],
      [
        'postgres://u@a,b:6000,c/db',
        [
          { host: 'a', port: 5432 },
          { host: 'b', port: 6000 },
          { host: 'c', port: 5432 },
        ],
      ],
      [
        'postgres://u@a:,b/db',
        [
          { host: 'a', port: 5432 },
          { host: 'b', port: 5432 },
        ],
      ],
      ['postgres://u@/db', [{ host: 'localhost', port: 5432 }]],
      [
        'postgres://u@a,b/db?port=7000',
        [
          { host: 'a', port: 7000 },
          { host: 'b', port: 7000 },
        ],
      ],
      [
        'postgres://u@a,b/db?port=7000,7001',
        [
          { host: 'a', port: 7000 },
          { host: 'b', port: 7001 },
        ],
      ],
      ['postgres:///db?host=%2Fvar%2Frun%2Fpostgresql', [{ host: '/var/run/postgresql', port: 5432 }]],
      [
        'postgres://u@ignored/db?host=x,y&port=1,2',
        [
          { host: 'x', port: 1 },
          { host: 'y', port: 2 },
        ],
      ],
    ];
    for (const [url, hosts] of cases) assert.deepEqual(parsePostgresUrl(url).hosts, hosts, url);
  });

  it('user, password and database are percent-decoded; a password may contain : and @ when escaped', () => {
    const settings = parsePostgresUrl('postgres://in%20let:p%40ss:w%2Fd@h/my%20db');
    assert.equal(settings.user, 'in let');
    assert.equal(settings.password, 'p@ss:w/d');
    assert.equal(settings.database, 'my db');
  });

  it('every target_session_attrs and sslmode value of libpq is understood', () => {
    for (const value of ['any', 'read-write', 'primary', 'read-only', 'standby', 'prefer-standby']) {
      assert.equal(parsePostgresUrl(`postgres://h/db?target_session_attrs=${value}`).targetSessionAttrs, value);
    }
    for (const value of ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full']) {
      assert.equal(parsePostgresUrl(`postgres://h/db?sslmode=${value}`).sslMode, value);
    }
  });

  it('connect_timeout is seconds per host, at least 2 as in libpq; 0 means the default', () => {
    assert.equal(parsePostgresUrl('postgres://h/db?connect_timeout=10').connectTimeoutMs, 10_000);
    assert.equal(parsePostgresUrl('postgres://h/db?connect_timeout=1').connectTimeoutMs, 2_000);
    assert.equal(parsePostgresUrl('postgres://h/db?connect_timeout=0').connectTimeoutMs, undefined);
  });

  it('refuses what it cannot honour, with a message that says what is wrong', () => {
    const bad: Array<[string, RegExp]> = [
      ['postgres://h/db?target_session_attrs=readwrite', /target_session_attrs "readwrite" is not one of/],
      ['postgres://h/db?sslmode=on', /sslmode "on" is not one of/],
      ['postgres://h/db?ssl=true', /unknown parameter "ssl" \(use sslmode=require/],
      ['postgres://h/db?target_sesion_attrs=read-write', /unknown parameter "target_sesion_attrs"/],
      ['postgres://h:99999/db', /port "99999" of host h is not a number/],
      ['postgres://h:abc/db', /port "abc"/],
      ['postgres://[::1/db', /IPv6 host is missing its "\]"/],
      ['postgres://[::1]x/db', /unexpected "x" after the IPv6 host/],
      ['postgres://[zz]/db', /is not an IPv6 address/],
      ['postgres://a,b,c/db?port=1,2', /3 hosts/],
      ['postgres://h/db?sslmode=disable&sslmode=require', /more than once/],
      ['postgres://h/db?connect_timeout=soon', /connect_timeout "soon"/],
      ['postgres://h/db?load_balance_hosts=yes', /load_balance_hosts "yes"/],
      ['postgres://h/db#x', /no "#fragment"/],
      ['postgres://h/db?schema=Bad', /invalid PostgreSQL schema name/],
    ];
    for (const [url, message] of bad) assert.throws(() => parsePostgresUrl(url), message, url);
  });

  it('start-up errors name INLET_DATABASE_URL and never show the password', () => {
    const bad = [
      'postgres://u:s3cret@h1:5432,h2:x/db',
      'postgres://u:s3cret@h/db?target_session_attrs=bogus',
      'postgres://u:s3cret@h/db?target_session_attrs=read-only',
      'postgres://u:s3cret@h/db?target_session_attrs=standby',
      'postgres://u:s3cret@[::1/db',
      'postgresx://u:s3cret@h/db',
    ];
    for (const url of bad) {
      assert.throws(
        () => loadConfig({ INLET_DATABASE_URL: url }),
        (error: unknown) =>
          error instanceof ConfigError && /INLET_DATABASE_URL/.test(error.message) && !error.message.includes('s3cret'),
        url,
      );
    }
    const url = 'postgres://u@127.0.0.1:6101,127.0.0.1:6102/events?target_session_attrs=read-write&sslmode=prefer';
    assert.equal(loadConfig({ INLET_DATABASE_URL: url }).databaseUrl, url);
  });

  it('openStorage refuses a read-only target with a message naming INLET_DATABASE_URL', async () => {
    await assert.rejects(
      openStorage('postgres://h/db?target_session_attrs=standby'),
      /INLET_DATABASE_URL: target_session_attrs=standby selects a read-only session/,
    );
  });

  it('the schema option and ?schema= must agree', () => {
    assert.equal(postgresSettings('postgres://h/db?schema=a', 'a').schema, 'a');
    assert.throws(() => postgresSettings('postgres://h/db?schema=a', 'b'), /two PostgreSQL schemas/);
  });
});

describe('host ring: which host and transport the next connection tries', () => {
  it('prefer tries TLS, and a host without TLS is tried in plain from then on', () => {
    const ring = new HostRing(parsePostgresUrl('postgres://a,b/db?sslmode=prefer'));
    assert.notEqual(ring.candidate().ssl, false);
    assert.equal(ring.failed(0, new Error('The server does not support SSL connections')), true);
    assert.deepEqual(ring.candidate(), { index: 0, host: { host: 'a', port: 5432 }, ssl: false });
  });

  it('disable is plain, require and verify-* are TLS only, verify-full checks the name and verify-ca does not', () => {
    assert.equal(new HostRing(parsePostgresUrl('postgres://a/db?sslmode=disable')).candidate().ssl, false);
    assert.equal(new HostRing(parsePostgresUrl('postgres://a/db?sslmode=allow')).candidate().ssl, false);
    const require = new HostRing(parsePostgresUrl('postgres://a/db?sslmode=require'));
    assert.deepEqual(require.candidate().ssl, { rejectUnauthorized: false });
    assert.equal(
      require.failed(0, new Error('The server does not support SSL connections')),
      false,
      'require never falls back',
    );
    const full = new HostRing(parsePostgresUrl('postgres://a/db?sslmode=verify-full')).candidate().ssl;
    assert.deepEqual(full, { rejectUnauthorized: true });
    const ca = new HostRing(parsePostgresUrl('postgres://a/db?sslmode=verify-ca')).candidate().ssl;
    assert.ok(ca !== false && ca.rejectUnauthorized === true && typeof ca.checkServerIdentity === 'function');
  });

  it('a failed host moves the ring to the next one, and round', () => {
    const ring = new HostRing(parsePostgresUrl('postgres://a,b,c/db?sslmode=disable'));
    ring.failed(0, new Error('connect ECONNREFUSED'));
    assert.equal(ring.candidate().host.host, 'b');
    ring.failed(0, new Error('late failure of a connection to a')); // does not skip b
    assert.equal(ring.candidate().host.host, 'b');
    ring.failed(1, new Error('x'));
    ring.failed(2, new Error('x'));
    assert.equal(ring.candidate().host.host, 'a');
  });
});

describe('which errors mean "unavailable, retry" (503)', () => {
  it('table', () => {
    const unavailable = [
      { code: '25006' },
      { code: '57P01' },
      { code: '57P02' },
      { code: '57P03' },
      { code: '08006' },
      { code: '08001' },
      { code: 'ECONNRESET' },
      { code: 'ECONNREFUSED' },
      { code: '53300' },
      { code: '40P01' },
      new Error('Connection terminated unexpectedly'),
      new Error('Client has encountered a connection error and is not queryable'),
      new Error('timeout exceeded when trying to connect'),
      new Error('Query read timeout'),
      Object.assign(new Error('wrapped'), { cause: { code: '57P01' } }),
    ];
    for (const error of unavailable)
      assert.equal(isPostgresUnavailable(error), true, JSON.stringify(error) + String(error));
    const bugs = [
      { code: '23505' },
      { code: '42P01' },
      { code: '22P02' },
      new Error('boom'),
      null,
      undefined,
      'string',
    ];
    for (const error of bugs) assert.equal(isPostgresUnavailable(error), false, String(error));
    assert.equal(isConnectionLost({ code: '53300' }), false, 'too many connections: the connection itself is fine');
  });
});
