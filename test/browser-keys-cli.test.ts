// `inlet keys create --kind browser --origin …` (segment-compat "Keys").
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cliTestDatabase } from './support/cli.js';

const { cli } = cliTestDatabase();

describe('inlet keys create --kind browser', () => {
  it('creates a publishable key with its origins; refuses a browser key without --origin and --origin on other kinds', async () => {
    const product = JSON.parse((await cli('products', 'create', 'Web', '--json')).out).data.id as string;
    const created = await cli(
      'keys',
      'create',
      '--product',
      product,
      '--kind',
      'browser',
      '--origin',
      'https://app.example.com',
      '--origin',
      'http://localhost:5173',
      '--json',
    );
    assert.equal(created.code, 0, created.err);
    const data = JSON.parse(created.out).data;
    assert.match(data.key, /^inlet_pk_/);
    assert.deepEqual(data.allowed_origins, ['https://app.example.com', 'http://localhost:5173']);
    const human = await cli(
      'keys',
      'create',
      '--product',
      product,
      '--kind',
      'browser',
      '--origin',
      'https://app.example.com',
    );
    assert.match(human.out, /publishable/);
    assert.equal((await cli('keys', 'create', '--product', product, '--kind', 'browser')).code, 2);
    assert.equal((await cli('keys', 'create', '--product', product, '--kind', 'browser', '--origin', '*')).code, 2);
    assert.equal(
      (await cli('keys', 'create', '--product', product, '--kind', 'events', '--origin', 'https://a.example.com')).code,
      2,
    );
  });
});
