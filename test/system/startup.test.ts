// Start-up as an operator sees it: the real server process (src/main.ts under tsx). Contract §2.
// Dialect-free: it never reaches a database, so only the SQLite pass of the system tier runs it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ADMIN_TOKEN, dialect } from '../helpers.js';
import { startServerProcess } from '../support/server-process.js';

const skip = dialect === 'sqlite' ? false : 'dialect-free: the SQLite pass runs it';

describe('a bad value stops start-up with a clear message (contract §2)', () => {
  it('the server exits with code 2 naming the variable, before opening anything', { skip }, async () => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(new URL('../../src/main.ts', import.meta.url))],
      {
        env: { ...process.env, PORT: 'eighty', INLET_DATABASE_URL: 'sqlite::memory:' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const [code] = await once(child, 'exit');
    assert.equal(code, 2, output);
    assert.match(output, /PORT/);
    assert.match(output, /eighty/);
    assert.doesNotMatch(output, /\n\s+at /, 'no stack trace');
  });
});

describe('the setting for private targets, under its name and its old one (clarifications §33)', () => {
  /**
   * Starts the server with `guard` (the runner's own guard settings cleared), creates a webhook destination on
   * 127.0.0.1 (checked by the guard, and with no events never called), stops it; answers the status and output.
   */
  async function startAndCreate(guard: Record<string, string>): Promise<{ status: number; output: string }> {
    const dir = mkdtempSync(join(tmpdir(), 'inlet-startup-'));
    const server = await startServerProcess(
      {
        INLET_DATABASE_URL: `sqlite:${join(dir, 'inlet.db')}`,
        INLET_ADMIN_TOKEN: ADMIN_TOKEN,
        INLET_TRAFFIC_SYNC_INTERVAL_MS: '0',
        INLET_OUTBOUND_ALLOW: '',
        INLET_OUTBOUND_ALLOW_PRIVATE: '',
        INLET_DESTINATIONS_ALLOW_PRIVATE: '',
        ...guard,
      },
      60_000,
    );
    try {
      const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
      const product = await fetch(`${server.url}/admin/v1/products`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ name: 'Startup' }),
      });
      const { data } = (await product.json()) as { data: { id: string } };
      const created = await fetch(`${server.url}/admin/v1/products/${data.id}/destinations`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ type: 'webhook', name: 'local', url: 'http://127.0.0.1:1/hook' }),
      });
      await created.arrayBuffer();
      return { status: created.status, output: server.output() };
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('INLET_OUTBOUND_ALLOW_PRIVATE=true allows a loopback target, without a warning', { skip }, async () => {
    const { status, output } = await startAndCreate({ INLET_OUTBOUND_ALLOW_PRIVATE: 'true' });
    assert.equal(status, 201, output);
    assert.doesNotMatch(output, /deprecated/);
  });

  it(
    'INLET_DESTINATIONS_ALLOW_PRIVATE=true still allows it, and start-up warns that the name is deprecated',
    { skip },
    async () => {
      const { status, output } = await startAndCreate({ INLET_DESTINATIONS_ALLOW_PRIVATE: 'true' });
      assert.equal(status, 201, output);
      const warning = output
        .split('\n')
        .filter((line) => line.includes('deprecated'))
        .map((line) => JSON.parse(line) as { level: number; msg: string });
      assert.equal(warning.length, 1, output);
      assert.equal(warning[0]!.level, 40, 'a warning');
      assert.match(warning[0]!.msg, /INLET_DESTINATIONS_ALLOW_PRIVATE is deprecated: set INLET_OUTBOUND_ALLOW_PRIVATE/);
    },
  );

  it('with neither, the loopback target is refused', { skip }, async () => {
    const { status, output } = await startAndCreate({});
    assert.equal(status, 400, output);
  });
});
