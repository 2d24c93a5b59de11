// `inlet catalog list|show` and `inlet plan get|set|draft|violations` (governance.md §1–2). The
// catalogue read here is what the servers have flushed (every INLET_CATALOG_FLUSH_MS, at most 10 s).
import { readFileSync } from 'node:fs';
import { AppError } from '../domain/errors.js';
import { PLAN_MODES } from '../domain/tracking-plan.js';
import {
  catalogEventDetailResource,
  catalogEventResource,
  catalogPropertyResource,
  trackingPlanResource,
  violationResource,
} from '../resources/governance.js';
import { requireOption, table, UsageError, type Command } from './command.js';

function limitOf(value: string | boolean | undefined, fallback: number): number {
  const limit = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(limit) || limit < 1 || limit > 500)
    throw new UsageError('--limit must be a whole number from 1 to 500');
  return limit;
}

function typesText(types: Partial<Record<string, number>>): string {
  return Object.entries(types)
    .map(([type, count]) => `${type}:${count}`)
    .join(' ');
}

export const governanceCommands: Command[] = [
  {
    path: ['catalog', 'list'],
    usage: 'inlet catalog list --product <id> [--sort last_seen|count|name] [--prefix <p>] [--limit <n>] [--json]',
    summary: 'Every event name stored in a product, with counts and property types',
    options: {
      product: { type: 'string' },
      sort: { type: 'string' },
      prefix: { type: 'string' },
      limit: { type: 'string' },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const sort = (values.sort as string | undefined) ?? 'last_seen';
      if (sort !== 'last_seen' && sort !== 'count' && sort !== 'name')
        throw new UsageError('--sort must be last_seen, count or name');
      const limit = limitOf(values.limit, 500);
      await services.keys.requireProduct(productId);
      const { catalog } = services.governance;
      const { events, overflow } = await catalog.listEvents(productId, {
        sort,
        offset: 0,
        limit,
        ...(typeof values.prefix === 'string' ? { prefix: values.prefix } : {}),
      });
      if (json) {
        io.out(JSON.stringify({ data: events.map(catalogEventResource), meta: { overflow } }));
        return 0;
      }
      if (events.length === 0) {
        io.out('no events catalogued yet (servers write the catalogue every few seconds)');
        return 0;
      }
      const rows = [];
      for (const event of events) {
        const detail = await catalog.getEvent(productId, event.canonicalName);
        rows.push({
          ...catalogEventResource(event),
          sources: event.sources.join(','),
          properties: (detail?.properties ?? []).map((p) => `${p.path}=${Object.keys(p.types).join('|')}`).join(' '),
        });
      }
      io.out(table(rows, ['canonical_name', 'count', 'first_seen', 'last_seen', 'sources', 'properties']));
      if (overflow > 0)
        io.out(`overflow: ${overflow} events of names past INLET_CATALOG_MAX_EVENTS were not catalogued`);
      return 0;
    },
  },
  {
    path: ['catalog', 'show'],
    usage: 'inlet catalog show --product <id> (<canonical_name> | --traits) [--json]',
    summary: 'One event name with each property path and its observed JSON types (or the identify traits)',
    options: { product: { type: 'string' }, traits: { type: 'boolean' } },
    async run({ services, values, args, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const { catalog } = services.governance;
      if (values.traits === true) {
        const { paths, overflow } = await catalog.traits(productId);
        const data = paths.map(catalogPropertyResource);
        if (json) io.out(JSON.stringify({ data, meta: { overflow } }));
        else
          io.out(
            data.length === 0
              ? 'no traits catalogued yet'
              : table(
                  data.map((p) => ({ ...p, types: typesText(p.types) })),
                  ['path', 'types', 'first_seen', 'last_seen'],
                ),
          );
        return 0;
      }
      const name = args[0];
      if (name === undefined)
        throw new UsageError('give an event name (canonical, such as order_completed) or --traits');
      const detail = await catalog.getEvent(productId, name);
      if (detail === undefined)
        throw new AppError('not_found', `The event "${name}" was never seen in product "${productId}".`);
      const data = catalogEventDetailResource(detail);
      if (json) {
        io.out(JSON.stringify({ data }));
        return 0;
      }
      io.out(
        `${data.canonical_name}: ${data.count} events, first ${data.first_seen}, last ${data.last_seen}, sources ${data.sources.join(', ')}`,
      );
      io.out(
        table(
          data.properties.map((p) => ({ ...p, types: typesText(p.types) })),
          ['path', 'types', 'first_seen', 'last_seen'],
        ),
      );
      if (data.properties_overflow > 0)
        io.out(`properties_overflow: ${data.properties_overflow} observations past INLET_CATALOG_MAX_PROPERTIES paths`);
      return 0;
    },
  },
  {
    path: ['plan', 'get'],
    usage: 'inlet plan get --product <id> [--json]',
    summary: 'Print the current tracking plan (the document; --json adds its version)',
    options: { product: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const current = await services.governance.plans.get(productId);
      if (current === undefined)
        throw new AppError(
          'not_found',
          `Product "${productId}" has no tracking plan yet: start from "inlet plan draft".`,
        );
      io.out(json ? JSON.stringify({ data: trackingPlanResource(current) }) : JSON.stringify(current.plan, null, 2));
      return 0;
    },
  },
  {
    path: ['plan', 'set'],
    usage: 'inlet plan set --product <id> <file.json> [--mode off|warn|enforce] [--json]',
    summary: 'Store the plan in the file as the next version (--mode overrides its mode)',
    options: { product: { type: 'string' }, mode: { type: 'string' } },
    async run({ services, values, args, io, json }) {
      const productId = requireOption(values, 'product');
      const file = args[0];
      if (file === undefined) throw new UsageError('give the plan file, such as plan.json');
      let document: Record<string, unknown>;
      try {
        document = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      } catch (error) {
        throw new UsageError(`cannot read ${file} as JSON: ${(error as Error).message}`);
      }
      const mode = values.mode as string | undefined;
      if (mode !== undefined) {
        if (!(PLAN_MODES as readonly string[]).includes(mode))
          throw new UsageError('--mode must be off, warn or enforce');
        if (document === null || typeof document !== 'object' || Array.isArray(document))
          throw new UsageError(`${file} is not a JSON object`);
        document = { ...document, mode };
      }
      await services.keys.requireProduct(productId);
      try {
        const stored = await services.governance.plans.put(productId, document);
        io.out(
          json
            ? JSON.stringify({ data: trackingPlanResource(stored) })
            : `stored tracking plan version ${stored.version} (mode ${String(stored.plan.mode)}); running servers apply it within INLET_TRACKING_PLAN_REFRESH_MS`,
        );
        return 0;
      } catch (error) {
        if (!(error instanceof AppError) || json || error.errors === undefined) throw error;
        io.err(
          `inlet: the plan is invalid:\n${error.errors.map((e) => `  ${e.pointer || '/'}: ${e.message}`).join('\n')}`,
        );
        return 1;
      }
    },
  },
  {
    path: ['plan', 'draft'],
    usage: 'inlet plan draft --product <id>',
    summary:
      'Print a draft plan drawn from the catalogue (mode off): observed types, required properties; edit it, then "inlet plan set"',
    options: { product: { type: 'string' } },
    async run({ services, values, io }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      io.out(JSON.stringify(await services.governance.plans.draft(productId), null, 2));
      return 0;
    },
  },
  {
    path: ['plan', 'violations'],
    usage:
      'inlet plan violations --product <id> [--name <canonical_name>] [--code tracking_plan_violation|unplanned_event] [--limit <n>] [--json]',
    summary: 'Tracking plan violations (warnings and refusals), newest first',
    options: {
      product: { type: 'string' },
      name: { type: 'string' },
      code: { type: 'string' },
      limit: { type: 'string' },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const limit = limitOf(values.limit, 50);
      await services.keys.requireProduct(productId);
      const rows = (
        await services.governance.plans.listViolations(productId, {
          limit,
          ...(typeof values.name === 'string' ? { canonicalName: values.name } : {}),
          ...(typeof values.code === 'string' ? { code: values.code } : {}),
        })
      ).map(violationResource);
      if (json) io.out(JSON.stringify({ data: rows }));
      else if (rows.length === 0) io.out('no violations');
      else
        io.out(
          table(
            rows.map((r) => ({ ...r, errors: r.errors.map((e) => `${e.pointer || '/'} ${e.message}`).join('; ') })),
            ['received_at', 'severity', 'code', 'canonical_name', 'plan_version', 'route', 'message_id', 'errors'],
          ),
        );
      return 0;
    },
  },
];
