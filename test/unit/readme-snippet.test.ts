// The README's browser snippet is the one the Chromium test runs (test/system/segment-browser.test.ts).
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { snippet } from '../support/segment-snippet.js';

it('README "Send from your app" shows the snippet the browser test runs', () => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const block = /```html\n(<script>[\s\S]*?<\/script>)\n```/.exec(readme)?.[1];
  assert.ok(block, 'the README has an html block with the snippet');
  assert.equal(block, snippet('https://events.example.com', 'inlet_pk_…'));
});
