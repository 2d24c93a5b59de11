// CLI commands for products, keys, migrations and legacy usage (contract §1, §5).
import { AppError } from '../domain/errors.js';
import { parseExpiry } from '../domain/api-keys.js';
import { apiKeyResource, productResource } from '../resources/admin.js';
import { table, requireOption, UsageError, type Command } from './command.js';

export const coreCommands: Command[] = [
  {
    path: ['migrate'],
    usage: 'inlet migrate',
    summary: 'Apply pending database migrations (the server also does this at start)',
    async run({ services, io, json }) {
      const report = services.storage.migration;
      if (json) io.out(JSON.stringify({ data: report }));
      else
        io.out(
          report && report.applied.length > 0
            ? `applied ${report.applied.map((m) => `${m.version} (${m.name})`).join(', ')}; schema version ${report.current}`
            : `schema is up to date (version ${report?.current ?? 0})`,
        );
      return 0;
    },
  },
  {
    path: ['products', 'create'],
    usage: 'inlet products create <name> [--json]',
    summary: 'Create a product (the tenant that owns events, users and keys)',
    async run({ services, args, io, json }) {
      const name = args.join(' ').trim();
      if (name === '') throw new UsageError('a product name is required');
      const product = productResource(await services.keys.createProduct(name));
      io.out(json ? JSON.stringify({ data: product }) : `created product ${product.id} (${product.name})`);
      return 0;
    },
  },
  {
    path: ['products', 'list'],
    usage: 'inlet products list [--json]',
    summary: 'List products',
    async run({ services, io, json }) {
      const products = (await services.keys.listProducts()).map(productResource);
      io.out(
        json
          ? JSON.stringify({ data: products })
          : products.length === 0
            ? 'no products yet: inlet products create <name>'
            : table(products, ['id', 'name', 'created_at']),
      );
      return 0;
    },
  },
  {
    path: ['keys', 'create'],
    usage:
      'inlet keys create --product <id> --kind events|reports|browser [--origin <https://app.example.com> …] [--name <name>] [--expires-at <RFC 3339>] [--json]',
    summary: 'Create an API key; the secret is printed once (a browser key needs at least one --origin)',
    options: {
      product: { type: 'string' },
      kind: { type: 'string' },
      name: { type: 'string' },
      'expires-at': { type: 'string' },
      origin: { type: 'string', multiple: true },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const kind = requireOption(values, 'kind');
      if (kind !== 'events' && kind !== 'reports' && kind !== 'browser')
        throw new UsageError('--kind must be events, reports or browser');
      const origins = values.origin as string[] | undefined;
      if (kind === 'browser' && (origins === undefined || origins.length === 0))
        throw new UsageError('a browser key needs at least one --origin, such as --origin https://app.example.com');
      if (kind !== 'browser' && origins !== undefined) throw new UsageError('--origin is only for --kind browser');
      let expiresAt: string | null;
      try {
        expiresAt = parseExpiry(values['expires-at'] as string | undefined, '--expires-at');
      } catch (error) {
        if (error instanceof AppError)
          throw new UsageError(`--expires-at ${error.errors?.[0]?.message ?? error.message}`);
        throw error;
      }
      let created;
      try {
        created = await services.keys.createKey(productId, {
          kind,
          name: (values.name as string | undefined) ?? null,
          expiresAt,
          ...(origins === undefined ? {} : { allowedOrigins: origins }),
        });
      } catch (error) {
        if (error instanceof AppError && error.code === 'validation_error')
          throw new UsageError(`--origin ${error.errors?.[0]?.message ?? error.message}`);
        throw error;
      }
      const resource = apiKeyResource(created.record);
      if (json) io.out(JSON.stringify({ data: { ...resource, key: created.key } }));
      else {
        io.out(
          `created ${kind} key ${resource.id} for product ${productId}${expiresAt ? `, expires ${expiresAt}` : ''}`,
        );
        io.out('');
        io.out(`  ${created.key}`);
        io.out('');
        io.out(
          kind === 'browser'
            ? `A browser key is publishable: put it in your web pages. Allowed origins: ${(resource.allowed_origins ?? []).join(', ')}.`
            : 'This is the only time the key is shown: store it in your secret manager now.',
        );
      }
      return 0;
    },
  },
  {
    path: ['keys', 'list'],
    usage: 'inlet keys list --product <id> [--json]',
    summary: "List a product's keys (prefixes only, never secrets)",
    options: { product: { type: 'string' } },
    async run({ services, values, io, json }) {
      const keys = (await services.keys.listKeys(requireOption(values, 'product'))).map(apiKeyResource);
      io.out(
        json
          ? JSON.stringify({ data: keys })
          : keys.length === 0
            ? 'no keys'
            : table(keys, ['id', 'kind', 'prefix', 'name', 'created_at', 'expires_at', 'revoked_at', 'last_used_at']),
      );
      return 0;
    },
  },
  {
    path: ['keys', 'revoke'],
    usage: 'inlet keys revoke <key_id> [--json]',
    summary: 'Revoke a key (running servers refuse it within INLET_KEY_CACHE_TTL_MS)',
    async run({ services, args, io, json }) {
      const keyId = args[0];
      if (keyId === undefined) throw new UsageError('a key id is required');
      const key = apiKeyResource(await services.keys.revokeKey(keyId));
      io.out(json ? JSON.stringify({ data: key }) : `revoked key ${key.id} (${key.prefix}…) at ${key.revoked_at}`);
      return 0;
    },
  },
  {
    path: ['legacy-usage'],
    usage: 'inlet legacy-usage --product <id> [--json]',
    summary: 'Which keys still send legacy flat event names, how often, and when last',
    options: { product: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const usage = await services.ingest.legacyUsage(productId);
      const rows = usage.map((u) => ({
        key_id: u.apiKeyId,
        key_prefix: u.keyPrefix,
        key_name: u.keyName,
        event_name: u.eventName,
        count: u.count,
        first_seen_at: u.firstSeenAt,
        last_seen_at: u.lastSeenAt,
      }));
      io.out(
        json
          ? JSON.stringify({ data: rows })
          : rows.length === 0
            ? 'no legacy flat names received'
            : table(rows, ['key_id', 'key_prefix', 'event_name', 'count', 'last_seen_at']),
      );
      return 0;
    },
  },
];
