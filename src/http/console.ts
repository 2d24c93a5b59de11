// The web console (issue 14) at /console: the static single-page app that `vite build console` writes to
// dist/console (run by `npm run build` and by `prepare`, so `npm ci` builds it). It talks to the admin API
// only, with the admin token as a Bearer header; these routes need no token (they are the same files for
// everyone and hold no data).
//
// A handler of its own instead of @fastify/static: the console is a handful of files, read once when the
// app is built and compressed then (brotli and gzip), so a request is a map lookup with no filesystem access;
// ranges, directory listings and file watching would be unused. Hashed assets are cached for a year
// (immutable); index.html is revalidated on every load (no-cache + ETag), so a new build shows at once.
//
// Without the admin API (no INLET_ADMIN_TOKEN) /console answers a page that says so, as does a checkout
// whose console was not built.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** dist/console, both from src/http (tsx) and from dist/http (the build). */
export const CONSOLE_ASSETS_DIR = fileURLToPath(new URL('../../dist/console/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Scripts and styles from /console only, requests to this origin only (the admin API and its stream), no
 * framing, no referrer: a page that holds the admin token loads nothing from anywhere else.
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

interface Asset {
  type: string;
  etag: string;
  cacheControl: string;
  identity: Buffer;
  gzip: Buffer | undefined;
  brotli: Buffer | undefined;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/**
 * Per assets folder, what was read and compressed, kept for the process: compressing the bundle (brotli 11)
 * takes about 110 ms, and the test suites build an app hundreds of times (npm test went from ~80 s to 142 s).
 * Read again when index.html changes (a new build: Vite rewrites it with the new hashed names).
 */
const loaded = new Map<string, { stamp: string; assets: Map<string, Asset> | undefined }>();

export function loadConsoleAssets(dir: string): Map<string, Asset> | undefined {
  const index = join(dir, 'index.html');
  let stamp = 'absent';
  if (existsSync(index)) {
    const stat = statSync(index);
    stamp = `${stat.mtimeMs}:${stat.size}:${stat.ino}`;
  }
  const cached = loaded.get(dir);
  if (cached !== undefined && cached.stamp === stamp) return cached.assets;
  const assets = stamp === 'absent' ? undefined : readAssets(dir);
  loaded.set(dir, { stamp, assets });
  return assets;
}

function readAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const path of filesUnder(dir)) {
    const name = relative(dir, path).split(sep).join('/');
    const identity = readFileSync(path);
    const type = TYPES[extname(path)] ?? 'application/octet-stream';
    const compressible = type.startsWith('text/') || type === 'image/svg+xml' || type === 'application/json';
    assets.set(name, {
      type,
      etag: `"${createHash('sha256').update(identity).digest('base64url').slice(0, 22)}"`,
      // Vite names every file under assets/ by a hash of its content.
      cacheControl: name.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      identity,
      gzip: compressible && identity.length > 512 ? gzipSync(identity, { level: 9 }) : undefined,
      brotli:
        compressible && identity.length > 512
          ? brotliCompressSync(identity, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11 } })
          : undefined,
    });
  }
  return assets;
}

function accepts(request: FastifyRequest, encoding: string): boolean {
  const header = request.headers['accept-encoding'];
  return (
    typeof header === 'string' &&
    header
      .split(',')
      .some((part) => part.trim().split(';')[0]?.trim() === encoding && !/;\s*q=0(?:\.0*)?\s*$/.test(part))
  );
}

function send(request: FastifyRequest, reply: FastifyReply, asset: Asset) {
  reply.headers({
    'content-type': asset.type,
    'cache-control': asset.cacheControl,
    etag: asset.etag,
    vary: 'accept-encoding',
    ...SECURITY_HEADERS,
  });
  if (request.headers['if-none-match'] === asset.etag) return reply.code(304).send();
  const encoded =
    asset.brotli !== undefined && accepts(request, 'br')
      ? { body: asset.brotli, encoding: 'br' }
      : asset.gzip !== undefined && accepts(request, 'gzip')
        ? { body: asset.gzip, encoding: 'gzip' }
        : undefined;
  if (encoded !== undefined) reply.header('content-encoding', encoded.encoding);
  return reply.send(encoded?.body ?? asset.identity);
}

function page(title: string, text: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${title}</title></head><body style="font-family:system-ui,sans-serif;max-width:40rem;margin:10vh auto;padding:0 16px;line-height:1.5;color:#1b1f24"><h1>${title}</h1>${text}</body></html>`;
}

export interface ConsoleOptions {
  /** The admin API is on (INLET_ADMIN_TOKEN set): the console is useless without it. */
  adminApi: boolean;
  /** INLET_CONSOLE; off: /console is an unknown route like any other. */
  enabled: boolean;
  /** Where the built console is (default dist/console). */
  assetsDir?: string;
}

export function consoleRoutes(app: FastifyInstance, options: ConsoleOptions): void {
  if (!options.enabled) return;
  const assets = options.adminApi ? loadConsoleAssets(options.assetsDir ?? CONSOLE_ASSETS_DIR) : undefined;
  const hide = { schema: { hide: true } };

  const explain = (reply: FastifyReply) => {
    // Its one inline style attribute is allowed; nothing else is.
    reply.code(404).headers({
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-cache',
      ...SECURITY_HEADERS,
      'content-security-policy':
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    });
    return options.adminApi
      ? page(
          'Inlet console: not built',
          "<p>The console's files are not in <code>dist/console</code>. Build them with <code>npm run build</code> (<code>npm ci</code> does it too), then restart Inlet.</p>",
        )
      : page(
          'Inlet console: the admin API is off',
          '<p>The console works through the admin API, which is on only when <code>INLET_ADMIN_TOKEN</code> is set (at least 16 characters). Start Inlet with it, for example:</p><pre>INLET_ADMIN_TOKEN=$(openssl rand -hex 24) npm start</pre><p>then open <code>/console</code> again and sign in with that token.</p>',
        );
  };

  // /console and /console/ are the same route (the router ignores a trailing slash): the app's page. Its asset
  // URLs are absolute (/console/assets/…), so no redirect is needed.
  app.get('/console', hide, async (request, reply) =>
    assets === undefined ? explain(reply) : send(request, reply, assets.get('index.html')!),
  );
  app.get('/console/*', hide, async (request, reply) => {
    if (assets === undefined) return explain(reply);
    const name = (request.params as { '*': string })['*'];
    const asset = assets.get(name === '' ? 'index.html' : name);
    if (asset !== undefined) return send(request, reply, asset);
    // An unknown asset is 404; any other path is the app (its routes are in the hash, but a typed URL works too).
    if (name.startsWith('assets/'))
      return reply.code(404).header('content-type', 'text/plain; charset=utf-8').send('Not found');
    return send(request, reply, assets.get('index.html')!);
  });
}
