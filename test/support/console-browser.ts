// What the browser tests (console, Segment/RudderStack SDKs) and the screenshot script share: Chromium's
// path and flags (no background traffic: nothing may leave loopback), and the console build (dist/console, as
// `npm ci` leaves it; built here when it is missing).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export const CHROMIUM = '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-extensions',
  '--disable-default-apps',
  '--disable-domain-reliability',
  '--disable-client-side-phishing-detection',
  '--no-pings',
];

export function ensureConsoleBuilt(): void {
  if (existsSync(`${ROOT}dist/console/index.html`)) return;
  const built = spawnSync(
    process.execPath,
    [`${ROOT}node_modules/vite/bin/vite.js`, 'build', 'console', '--logLevel', 'warn'],
    { cwd: ROOT, stdio: 'inherit' },
  );
  if (built.status !== 0) throw new Error('vite build console failed');
}
