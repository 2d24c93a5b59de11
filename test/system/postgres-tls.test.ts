// TLS to PostgreSQL, against a server with TLS of the test's own (issue 16: "libpq's meaning for every
// sslmode value"): a cluster with a certificate signed by a test CA for the name `localhost`, and a role
// that pg_hba lets in over TLS only. Each sslmode is checked by what the session reports
// (pg_stat_ssl), and the verifying modes by what they refuse. PostgreSQL pass of the system tier.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { openStorage } from '../../src/storage/connect.js';
import { dialect } from '../helpers.js';
import { clusterProblem, createCluster, giveToPostgres, type Cluster } from './support/pg-cluster.js';

const skip = dialect !== 'postgres' ? 'runs in the PostgreSQL pass' : clusterProblem();

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: 'ignore', timeout: 60_000 });
}

/** A CA and a certificate it signed for `name` (subjectAltName DNS), in `dir`. */
function certificates(dir: string, prefix: string, name: string): void {
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${prefix}ca.key`,
      '-out',
      `${prefix}ca.crt`,
      '-days',
      '2',
      '-subj',
      `/CN=${prefix}inlet-test-ca`,
    ],
    dir,
  );
  openssl(
    [
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${prefix}server.key`,
      '-out',
      `${prefix}server.csr`,
      '-subj',
      `/CN=${name}`,
    ],
    dir,
  );
  writeFileSync(join(dir, `${prefix}san.ext`), `subjectAltName=DNS:${name}\n`);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `${prefix}server.csr`,
      '-CA',
      `${prefix}ca.crt`,
      '-CAkey',
      `${prefix}ca.key`,
      '-CAcreateserial',
      '-out',
      `${prefix}server.crt`,
      '-days',
      '2',
      '-extfile',
      `${prefix}san.ext`,
    ],
    dir,
  );
}

describe('TLS to PostgreSQL: every sslmode against a server with TLS', { skip, timeout: 180_000 }, () => {
  let cluster: Cluster | undefined;
  let certs: string;
  before(async () => {
    certs = mkdtempSync(join(tmpdir(), 'inlet-pg-tls-'));
    certificates(certs, '', 'localhost');
    certificates(certs, 'other-', 'localhost'); // a CA the server's certificate does not chain to
    cluster = await createCluster({
      settings: { ssl: 'on', ssl_cert_file: join(certs, 'server.crt'), ssl_key_file: join(certs, 'server.key') },
      hba: ['hostnossl all tls_only 127.0.0.1/32 reject', 'hostssl all tls_only 127.0.0.1/32 trust'],
      prepare: () => {
        chmodSync(join(certs, 'server.key'), 0o600);
        giveToPostgres(join(certs, 'server.key'));
        giveToPostgres(join(certs, 'server.crt'));
        chmodSync(certs, 0o755);
      },
    });
    execFileSync(
      'psql',
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(cluster.port),
        '-U',
        'postgres',
        '-d',
        'postgres',
        '-c',
        'CREATE ROLE tls_only LOGIN SUPERUSER',
      ],
      { stdio: 'ignore' },
    );
  });
  after(() => {
    cluster?.remove();
    if (certs !== undefined) rmSync(certs, { recursive: true, force: true });
  });

  /** Opens Inlet's storage on the URL and returns whether its session runs over TLS. */
  async function sessionTls(query: string, { host = '127.0.0.1', user = 'postgres' } = {}): Promise<boolean> {
    const storage = await openStorage(`postgres://${user}@${host}:${cluster!.port}/postgres?${query}`, {
      postgresPoolSize: 1,
    });
    try {
      const { rows } = await sql<{ ssl: boolean }>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`.execute(
        storage.db,
      );
      return rows[0]!.ssl;
    } finally {
      await storage.close();
    }
  }

  const ca = () => join(certs, 'ca.crt');
  const otherCa = () => join(certs, 'other-ca.crt');

  it('disable: plain TCP', async () => {
    assert.equal(await sessionTls('sslmode=disable'), false);
  });
  it('allow: plain first; TLS when the server refuses plain (pg_hba hostnossl reject)', async () => {
    assert.equal(await sessionTls('sslmode=allow'), false);
    assert.equal(await sessionTls('sslmode=allow', { user: 'tls_only' }), true);
  });
  it('prefer (the default): TLS when the server has it', async () => {
    assert.equal(await sessionTls('sslmode=prefer'), true);
    assert.equal(await sessionTls(''), true);
  });
  it('disable against a TLS-only role: refused, with the server’s reason', async () => {
    await assert.rejects(
      sessionTls('sslmode=disable', { user: 'tls_only' }),
      /pg_hba\.conf rejects connection|no encryption/,
    );
  });
  it('require: TLS without checking the certificate (an unknown CA, a name that does not match)', async () => {
    assert.equal(await sessionTls('sslmode=require'), true);
  });
  it('require with sslrootcert acts as verify-ca (libpq): the right CA passes, another is refused', async () => {
    assert.equal(await sessionTls(`sslmode=require&sslrootcert=${encodeURIComponent(ca())}`), true);
    await assert.rejects(
      sessionTls(`sslmode=require&sslrootcert=${encodeURIComponent(otherCa())}`),
      /certificate|self.signed|unable to verify/i,
    );
  });
  it('verify-ca: the chain is checked, the name is not', async () => {
    assert.equal(
      await sessionTls(`sslmode=verify-ca&sslrootcert=${encodeURIComponent(ca())}`),
      true,
      '127.0.0.1 is not the certificate’s name, and passes',
    );
    await assert.rejects(
      sessionTls(`sslmode=verify-ca&sslrootcert=${encodeURIComponent(otherCa())}`),
      /certificate|unable to verify/i,
    );
  });
  it('verify-full: the chain and the name are checked', async () => {
    assert.equal(
      await sessionTls(`sslmode=verify-full&sslrootcert=${encodeURIComponent(ca())}`, { host: 'localhost' }),
      true,
    );
    await assert.rejects(
      sessionTls(`sslmode=verify-full&sslrootcert=${encodeURIComponent(ca())}`),
      /Hostname\/IP does not match|altnames/i,
    );
    await assert.rejects(
      sessionTls(`sslmode=verify-full&sslrootcert=${encodeURIComponent(otherCa())}`, { host: 'localhost' }),
      /certificate|unable to verify/i,
    );
  });
});
