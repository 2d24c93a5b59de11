// `inlet transformation get|set|test|versions` (transformations.md §3, §6): the same service as the admin API,
// run against the database the server uses. A new version reaches running servers within
// INLET_TRACKING_PLAN_REFRESH_MS.
import { readFileSync } from 'node:fs';
import { AppError } from '../domain/errors.js';
import { transformationResource } from '../resources/transformations.js';
import { translateTestItems } from '../services/transformations/test-items.js';
import { requireOption, table, UsageError, type Command, type CliIo } from './command.js';

export function readJson(file: string | undefined, what: string): Record<string, unknown> {
  if (file === undefined) throw new UsageError(`give the ${what} file, such as transformation.json`);
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new UsageError(`cannot read ${file} as JSON: ${(error as Error).message}`);
  }
  if (document === null || typeof document !== 'object' || Array.isArray(document))
    throw new UsageError(`${file} is not a JSON object`);
  return document as Record<string, unknown>;
}

/** An invalid document: each problem on its own line with its pointer (the API's 400), exit 1. */
export function printInvalid(io: CliIo, error: unknown, json: boolean): number {
  if (!(error instanceof AppError) || json || error.errors === undefined) throw error;
  io.err(`inlet: ${error.errors.map((e) => `\n  ${e.pointer || '/'}: ${e.message}`).join('')}`);
  return 1;
}

export const transformationCommands: Command[] = [
  {
    path: ['transformation', 'get'],
    usage: 'inlet transformation get --product <id> [--json]',
    summary: 'Print the product\'s transformation in force ({"steps": […]}; --json adds its version)',
    options: { product: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const current = await services.transformations.get(productId);
      if (json) io.out(JSON.stringify({ data: current === undefined ? null : transformationResource(current) }));
      else if (current === undefined) io.err(`Product "${productId}" has no transformation.`);
      else io.out(JSON.stringify({ steps: current.steps }, null, 2));
      return 0;
    },
  },
  {
    path: ['transformation', 'set'],
    usage: 'inlet transformation set --product <id> <file.json> [--json]',
    summary: 'Store the steps in the file ({"steps": […]}) as the next version',
    options: { product: { type: 'string' } },
    async run({ services, values, args, io, json }) {
      const productId = requireOption(values, 'product');
      const document = readJson(args[0], 'transformation');
      await services.keys.requireProduct(productId);
      try {
        const stored = await services.transformations.put(productId, document);
        io.out(
          json
            ? JSON.stringify({ data: transformationResource(stored) })
            : `stored transformation version ${stored.version} (${stored.steps.length} steps); running servers apply it within INLET_TRACKING_PLAN_REFRESH_MS`,
        );
        return 0;
      } catch (error) {
        return printInvalid(io, error, json);
      }
    },
  },
  {
    path: ['transformation', 'test'],
    usage: 'inlet transformation test --product <id> <file.json>',
    summary:
      'Run steps on sample items without storing anything: the file is {"steps"?, "items": […], "route"?: "v2"|"segment"|"stored"} (no steps: the version in force; stored: events as read)',
    options: { product: { type: 'string' } },
    async run({ services, values, args, io, json }) {
      const productId = requireOption(values, 'product');
      const document = readJson(args[0], 'test');
      const { items, route = 'v2' } = document;
      if (!Array.isArray(items) || items.length === 0 || items.length > 100)
        throw new UsageError('the file needs "items": an array of 1 to 100 items');
      if (route !== 'v2' && route !== 'segment' && route !== 'stored')
        throw new UsageError('"route" must be "v2", "segment" or "stored"');
      await services.keys.requireProduct(productId);
      try {
        const data = await services.transformations.test(
          productId,
          document.steps,
          translateTestItems(items, route, 'cli'),
          { product_id: productId, key_id: null, route },
        );
        io.out(JSON.stringify(json ? { data } : data, null, json ? undefined : 2));
        return 0;
      } catch (error) {
        return printInvalid(io, error, json);
      }
    },
  },
  {
    path: ['transformation', 'versions'],
    usage: 'inlet transformation versions --product <id> [--json]',
    summary: "Every version of the product's transformation, newest first",
    options: { product: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const versions = (await services.transformations.versions(productId)).map(transformationResource);
      if (json) io.out(JSON.stringify({ data: versions }));
      else
        io.out(
          table(
            versions.map((v) => ({
              version: v.version,
              created_at: v.created_at,
              steps: v.steps.map((s) => s.kind).join(','),
            })),
            ['version', 'created_at', 'steps'],
          ),
        );
      return 0;
    },
  },
];
