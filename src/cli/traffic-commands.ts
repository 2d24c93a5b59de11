// CLI commands for traffic reports (contract §8): connect a source, sync now, import a CSV, list runs.
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { AppError } from '../domain/errors.js';
import { syncRunResource, trafficSourceResource } from '../resources/traffic.js';
import { CSV_COLUMNS, CsvImportError, importTrafficCsv } from '../sync/csv-import.js';
import { requireOption, table, UsageError, type Command } from './command.js';

function optional(values: Record<string, string | boolean | undefined>, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
}

export const trafficCommands: Command[] = [
  {
    path: ['traffic', 'connect'],
    usage:
      'inlet traffic connect --product <id> --provider plausible --site-id <domain> --api-key <key> [--base-url <url>]\n' +
      '       inlet traffic connect --product <id> --provider ga4 --property-id <id> --credentials <service-account.json> [--base-url <url>] [--token-url <url>]',
    summary: "Connect (or replace) a product's traffic source; secrets are stored, never printed",
    options: {
      product: { type: 'string' },
      provider: { type: 'string' },
      'site-id': { type: 'string' },
      'api-key': { type: 'string' },
      'property-id': { type: 'string' },
      credentials: { type: 'string' },
      'base-url': { type: 'string' },
      'token-url': { type: 'string' },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const provider = requireOption(values, 'provider');
      const input: Record<string, unknown> = { provider };
      if (provider === 'plausible') {
        input.site_id = requireOption(values, 'site-id');
        input.api_key = requireOption(values, 'api-key');
      } else if (provider === 'ga4') {
        input.property_id = requireOption(values, 'property-id');
        const path = requireOption(values, 'credentials');
        try {
          input.credentials = JSON.parse(readFileSync(path, 'utf8')) as unknown;
        } catch (error) {
          throw new UsageError(
            `--credentials: cannot read the service-account JSON at ${path}: ${(error as Error).message}`,
          );
        }
        const tokenUrl = optional(values, 'token-url');
        if (tokenUrl) input.token_url = tokenUrl;
      } else throw new UsageError('--provider must be plausible or ga4');
      const baseUrl = optional(values, 'base-url');
      if (baseUrl) input.base_url = baseUrl;
      let source;
      try {
        source = trafficSourceResource(await services.traffic.sync.connectSource(productId, input));
      } catch (error) {
        // Name the flag rather than the JSON field of the admin API.
        if (error instanceof AppError && error.code === 'validation_error') {
          const flags: Record<string, string> = {
            site_id: '--site-id',
            api_key: '--api-key',
            property_id: '--property-id',
            credentials: '--credentials',
            base_url: '--base-url',
            token_url: '--token-url',
          };
          const problems = (error.errors ?? []).map((e) => {
            const [field, ...rest] = e.pointer.slice(1).split('/');
            return `${flags[field ?? ''] ?? e.pointer}${rest.length > 0 ? ` (${rest.join('.')})` : ''} ${e.message}`;
          });
          throw new UsageError(problems.join('; ') || error.message);
        }
        throw error;
      }
      io.out(
        json
          ? JSON.stringify({ data: source })
          : `connected ${source.provider} to product ${productId}; run "inlet traffic sync --product ${productId}" to fetch the first 90 days`,
      );
      return 0;
    },
  },
  {
    path: ['traffic', 'sync'],
    usage: 'inlet traffic sync --product <id> [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--json]',
    summary: 'Sync now (default: the trailing 3 days and today; 90 days on the first sync)',
    options: { product: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const from = optional(values, 'from');
      const to = optional(values, 'to');
      const result = await services.traffic.sync.syncProduct(productId, {
        kind: 'cli',
        ...(from ? { from } : {}),
        ...(to ? { to } : {}),
      });
      io.out(
        json
          ? JSON.stringify({ data: result })
          : result.status === 'succeeded'
            ? `synced ${result.from} to ${result.to}: ${result.rows} rows stored`
            : `another sync of this product is running; nothing fetched (${result.rows} rows stored for ${result.from} to ${result.to})`,
      );
      return 0;
    },
  },
  {
    path: ['traffic', 'import'],
    usage: 'inlet traffic import --product <id> <file.csv> [--json]',
    summary: `Import rows from a CSV whose header is ${CSV_COLUMNS.join(',')}; each date in the file replaces that day's rows`,
    options: { product: { type: 'string' } },
    async run({ services, values, args, io, json }) {
      const productId = requireOption(values, 'product');
      const file = args[0];
      if (file === undefined) throw new UsageError('the CSV file is required');
      // Opened before reading starts, so a missing file is a clear error rather than a stream event.
      let handle;
      try {
        handle = await open(file, 'r');
      } catch (error) {
        throw new UsageError(`cannot read ${file}: ${(error as Error).message}`);
      }
      try {
        const result = await importTrafficCsv(services.storage, productId, handle.createReadStream(), {
          progressEvery: 50_000,
          onProgress: (lines) => {
            if (!json) io.err(`… ${lines} lines read`);
          },
        });
        io.out(
          json
            ? JSON.stringify({ data: result })
            : `imported ${result.rows} rows for ${result.dates} date(s) (${result.from ?? '-'} to ${result.to ?? '-'})`,
        );
        return 0;
      } catch (error) {
        if (error instanceof CsvImportError) {
          io.err(
            json
              ? JSON.stringify({ error: error.message, line: error.line, column: error.column ?? null })
              : `inlet: ${file}: ${error.message}; nothing was imported`,
          );
          return 1;
        }
        throw error;
      } finally {
        await handle.close().catch(() => {});
      }
    },
  },
  {
    path: ['traffic', 'runs'],
    usage: 'inlet traffic runs --product <id> [--limit <n>] [--json]',
    summary: 'Past syncs and imports of a product, newest first',
    options: { product: { type: 'string' }, limit: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const limitText = optional(values, 'limit') ?? '20';
      if (!/^\d+$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > 1000)
        throw new UsageError('--limit must be a whole number from 1 to 1000');
      await services.keys.requireProduct(productId);
      const runs = (await services.traffic.sync.listRuns(productId, Number(limitText))).map(syncRunResource);
      io.out(
        json
          ? JSON.stringify({ data: runs })
          : runs.length === 0
            ? 'no syncs yet'
            : table(runs, ['started_at', 'kind', 'provider', 'from', 'to', 'rows', 'outcome', 'error']),
      );
      return 0;
    },
  },
];
