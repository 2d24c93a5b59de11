// Segment's own snippet, pointed at Inlet (clarifications §25): the standalone analytics.js build that
// ships in the @segment/analytics-next npm package, and its lazily loaded chunks, served from here so
// a page loads nothing from Segment's CDN. The snippet sets `analytics._cdn` to Inlet's URL.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../../domain/errors.js';
import { problemResponse } from '../schemas/common.js';

/** The answer is the file's bytes (never serialised); the schema only documents it. */
const script = (description: string) => ({
  description,
  content: { 'application/javascript': { schema: { type: 'string' } } },
});

const BUNDLE_NAME = /^[A-Za-z0-9_-]+\.bundle\.[0-9a-f]+\.js$/;

function distDirectory(): string | undefined {
  try {
    return join(dirname(createRequire(import.meta.url).resolve('@segment/analytics-next/package.json')), 'dist', 'umd');
  } catch {
    return undefined;
  }
}

export function analyticsJsRoutes(app: FastifyInstance): void {
  const dist = distDirectory();
  const files = new Map<string, Promise<Buffer>>();
  const load = (name: string) => {
    let file = files.get(name);
    if (file === undefined) {
      file = readFile(join(dist!, name));
      file.catch(() => files.delete(name));
      files.set(name, file);
    }
    return file;
  };
  const serve = async (name: string, maxAge: number) => {
    if (dist === undefined)
      throw new AppError('not_found', 'The analytics.js build (@segment/analytics-next) is not installed.');
    try {
      return { body: await load(name), maxAge };
    } catch {
      throw new AppError('not_found', `No file ${name}.`);
    }
  };

  app.get<{ Params: { key: string } }>(
    '/analytics.js/v1/:key/analytics.min.js',
    {
      schema: {
        tags: ['segment'],
        summary: "Segment's standalone analytics.js (from @segment/analytics-next); set analytics._cdn to this server",
        response: {
          200: script('analytics.js'),
          404: problemResponse('The analytics.js build (@segment/analytics-next) is not installed'),
        },
      },
    },
    async (_request, reply) => {
      const { body, maxAge } = await serve('standalone.js', 3600);
      return reply
        .type('application/javascript; charset=utf-8')
        .header('cache-control', `public, max-age=${maxAge}`)
        .send(body);
    },
  );
  app.get<{ Params: { file: string } }>(
    '/analytics-next/bundles/:file',
    {
      schema: {
        tags: ['segment'],
        summary: 'A chunk of analytics.js (content-hashed: cached for a year)',
        response: { 200: script('The chunk'), 404: problemResponse('No such bundle') },
      },
    },
    async (request, reply) => {
      if (!BUNDLE_NAME.test(request.params.file)) throw new AppError('not_found', `No bundle ${request.params.file}.`);
      const { body, maxAge } = await serve(request.params.file, 31_536_000);
      return reply
        .type('application/javascript; charset=utf-8')
        .header('cache-control', `public, max-age=${maxAge}, immutable`)
        .send(body);
    },
  );
}
