#!/usr/bin/env node
// Runs the compiled CLI (dist/ is built by `npm install`/`npm ci` through the prepare script).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/cli/bin.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('inlet: not built yet; run "npm run build" in the Inlet folder first\n');
  process.exit(2);
}
await import(entry.href);
