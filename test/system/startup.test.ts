// Start-up as an operator sees it: the real server process (src/main.ts under tsx). Contract §2.
// Dialect-free: it never reaches a database, so only the SQLite pass of the system tier runs it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { dialect } from '../helpers.js';

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
