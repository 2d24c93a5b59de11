// `inlet destinations …` (events-out §6): the admin API's destination operations from the shell.
import { deliveryResource, destinationResource } from '../resources/destinations.js';
import { requireOption, table, UsageError, type Command } from './command.js';
import { printInvalid, readJson } from './transformation-commands.js';

const product = { product: { type: 'string' } } as const;

function list(value: string | boolean | undefined): string[] | undefined {
  if (typeof value !== 'string') return undefined;
  return value
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean);
}

function int(value: string | boolean | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (typeof value !== 'string' || !Number.isInteger(n)) throw new UsageError(`--${name} must be a whole number`);
  return n;
}

/** `--transformation <file.json>` ({"steps": […]}), or `none` (null: no transformation). */
function transformationOf(value: string | boolean | undefined): { transformation?: unknown } {
  if (value === undefined) return {};
  if (typeof value !== 'string') throw new UsageError('--transformation needs a file ({"steps": […]}) or none');
  return { transformation: value === 'none' ? null : readJson(value, 'transformation') };
}

function oneId(args: string[]): string {
  if (args.length !== 1) throw new UsageError('give one destination id');
  return args[0]!;
}

/** What `destinations edit` can change (the rest of a destination cannot be edited). */
const EDITABLE = {
  name: { type: 'string' },
  url: { type: 'string' },
  path: { type: 'string' },
  types: { type: 'string' },
  'canonical-names': { type: 'string' },
  sources: { type: 'string' },
  'max-messages': { type: 'string' },
  'max-wait-ms': { type: 'string' },
  transformation: { type: 'string' },
} as const;

const COLUMNS = [
  'id',
  'type',
  'name',
  'status',
  'lag',
  'delivered',
  'consecutive_failures',
  'last_success_at',
  'last_error',
  'disabled_reason',
];

function printOne(io: { out: (line: string) => void }, json: boolean, data: Record<string, unknown>): void {
  if (json) io.out(JSON.stringify({ data }));
  else
    for (const [key, value] of Object.entries(data))
      io.out(
        `${key.padEnd(22)} ${value === null ? '-' : typeof value === 'object' ? JSON.stringify(value) : String(value)}`,
      );
}

export const destinationCommands: Command[] = [
  {
    path: ['destinations', 'create'],
    usage:
      'inlet destinations create --product <id> --type webhook|nats|postgres|parquet --name <name> (--url <url> | --servers <nats://h:p,…> --subject <template> | --url <postgres://…> [--schema <name>] | --path <folder> [--partition hour|day]) [--types t,…] [--canonical-names n,…] [--sources s,…] [--max-messages n] [--max-wait-ms ms] [--transformation <file.json>] [--start now|beginning|<cursor>] [--json]',
    summary: "Create a destination; prints a webhook's signing secret (shown this once)",
    options: {
      ...product,
      ...EDITABLE,
      type: { type: 'string' },
      servers: { type: 'string' },
      subject: { type: 'string' },
      schema: { type: 'string' },
      path: { type: 'string' },
      partition: { type: 'string' },
      start: { type: 'string' },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const filter: Record<string, string[]> = {};
      const types = list(values.types);
      if (types) filter.types = types;
      const names = list(values['canonical-names']);
      if (names) filter.canonical_names = names;
      const sources = list(values.sources);
      if (sources) filter.sources = sources;
      const maxMessages = int(values['max-messages'], 'max-messages');
      const maxWait = int(values['max-wait-ms'], 'max-wait-ms');
      const transformation = transformationOf(values.transformation);
      let created;
      try {
        created = await services.destinations.create(productId, {
          type: values.type,
          name: values.name,
          ...(values.url === undefined ? {} : { url: values.url }),
          ...(values.servers === undefined ? {} : { servers: list(values.servers) }),
          ...(values.subject === undefined ? {} : { subject: values.subject }),
          ...(values.schema === undefined ? {} : { schema: values.schema }),
          ...(values.path === undefined ? {} : { path: values.path }),
          ...(values.partition === undefined ? {} : { partition: values.partition }),
          filter,
          ...(maxMessages === undefined && maxWait === undefined
            ? {}
            : {
                batch: {
                  ...(maxMessages === undefined ? {} : { max_messages: maxMessages }),
                  ...(maxWait === undefined ? {} : { max_wait_ms: maxWait }),
                },
              }),
          ...(values.start === undefined ? {} : { start: values.start }),
          ...transformation,
        });
      } catch (error) {
        return printInvalid(io, error, json);
      }
      const data = {
        ...destinationResource(created.destination),
        ...(created.secret === null ? {} : { secret: created.secret }),
      };
      printOne(io, json, data);
      if (!json && created.secret !== null)
        io.err('The signing secret is shown only now: store it where your receiver can read it.');
      return 0;
    },
  },
  {
    path: ['destinations', 'list'],
    usage: 'inlet destinations list --product <id> [--json]',
    summary: "A product's destinations: status (disabled ones with the reason), lag, last success and error",
    options: product,
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const rows = (await services.destinations.list(productId)).map(destinationResource);
      if (json) io.out(JSON.stringify({ data: rows }));
      else if (rows.length === 0) io.out('no destinations');
      else io.out(table(rows, COLUMNS));
      return 0;
    },
  },
  {
    path: ['destinations', 'show'],
    usage: 'inlet destinations show <destination-id> --product <id> [--json]',
    summary: 'One destination: status, lag, last success, last error, failures, cursor',
    options: product,
    async run({ services, args, values, io, json }) {
      printOne(
        io,
        json,
        destinationResource(await services.destinations.show(requireOption(values, 'product'), oneId(args))),
      );
      return 0;
    },
  },
  ...(['pause', 'resume'] as const).map((verb): Command => ({
    path: ['destinations', verb],
    usage: `inlet destinations ${verb} <destination-id> --product <id> [--json]`,
    summary:
      verb === 'pause'
        ? 'Stop delivering (the cursor stays)'
        : 'Deliver again from the cursor (also re-enables a disabled destination)',
    options: product,
    async run({ services, args, values, io, json }) {
      const updated = await services.destinations.update(requireOption(values, 'product'), oneId(args), {
        status: verb === 'pause' ? 'paused' : 'active',
      });
      printOne(io, json, destinationResource(updated));
      return 0;
    },
  })),
  {
    path: ['destinations', 'edit'],
    usage:
      'inlet destinations edit <destination-id> --product <id> [--name <name>] [--url <url>] [--path <folder>] [--types t,…] [--canonical-names n,…] [--sources s,…] [--max-messages n] [--max-wait-ms ms] [--transformation <file.json>|none] [--json]',
    summary:
      'Change the name, url (webhook, PostgreSQL warehouse), path (Parquet), filter, batching or transformation (none removes it); a filter part given empty ("") is removed',
    options: { ...product, ...EDITABLE },
    async run({ services, args, values, io, json }) {
      const productId = requireOption(values, 'product');
      const id = oneId(args);
      const editable = Object.keys(EDITABLE);
      if (!editable.some((o) => values[o] !== undefined))
        throw new UsageError(`nothing to change: give one or more of ${editable.map((o) => `--${o}`).join(', ')}`);
      // The admin API's PATCH replaces `filter` and `batch` whole; here only the parts given change.
      const current = await services.destinations.show(productId, id);
      const input: Record<string, unknown> = {};
      if (values.name !== undefined) input.name = values.name;
      if (values.url !== undefined) input.url = values.url;
      if (values.path !== undefined) input.path = values.path;
      if (values.types !== undefined || values['canonical-names'] !== undefined || values.sources !== undefined) {
        const filter: Record<string, string[] | undefined> = {
          types: current.filter.types,
          canonical_names: current.filter.canonicalNames,
          sources: current.filter.sources,
        };
        for (const [option, key] of [
          ['types', 'types'],
          ['canonical-names', 'canonical_names'],
          ['sources', 'sources'],
        ] as const) {
          if (values[option] === undefined) continue;
          const given = list(values[option]) ?? [];
          filter[key] = given.length === 0 ? undefined : given;
        }
        input.filter = Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== undefined));
      }
      const maxMessages = int(values['max-messages'], 'max-messages');
      const maxWait = int(values['max-wait-ms'], 'max-wait-ms');
      if (maxMessages !== undefined || maxWait !== undefined) {
        input.batch = {
          max_messages: maxMessages ?? current.batch.maxMessages,
          max_wait_ms: maxWait ?? current.batch.maxWaitMs,
        };
      }
      Object.assign(input, transformationOf(values.transformation));
      try {
        printOne(io, json, destinationResource(await services.destinations.update(productId, id, input)));
      } catch (error) {
        return printInvalid(io, error, json);
      }
      return 0;
    },
  },
  {
    path: ['destinations', 'replay'],
    usage: 'inlet destinations replay <destination-id> --product <id> --from <cursor|beginning|RFC 3339 time> [--json]',
    summary: 'Move the cursor back (or forward): re-deliver from a cursor or a received time',
    options: { ...product, from: { type: 'string' } },
    async run({ services, args, values, io, json }) {
      const updated = await services.destinations.replay(
        requireOption(values, 'product'),
        oneId(args),
        requireOption(values, 'from'),
      );
      printOne(io, json, destinationResource(updated));
      return 0;
    },
  },
  {
    path: ['destinations', 'delete'],
    usage: 'inlet destinations delete <destination-id> --product <id>',
    summary: 'Delete a destination and its delivery log',
    options: product,
    async run({ services, args, values, io, json }) {
      await services.destinations.delete(requireOption(values, 'product'), oneId(args));
      io.out(json ? JSON.stringify({ data: { deleted: args[0] } }) : `deleted ${args[0]}`);
      return 0;
    },
  },
  {
    path: ['destinations', 'rotate-secret'],
    usage: 'inlet destinations rotate-secret <destination-id> --product <id> [--json]',
    summary: 'A new signing secret (shown this once); for 24 h both signatures are sent',
    options: product,
    async run({ services, args, values, io, json }) {
      const rotated = await services.destinations.rotateSecret(requireOption(values, 'product'), oneId(args));
      printOne(io, json, { ...destinationResource(rotated.destination), secret: rotated.secret });
      return 0;
    },
  },
  {
    path: ['destinations', 'deliveries'],
    usage: 'inlet destinations deliveries <destination-id> --product <id> [--limit n] [--json]',
    summary: 'The delivery log, newest first: time, attempt, message ids, status or error, duration',
    options: { ...product, limit: { type: 'string' } },
    async run({ services, args, values, io, json }) {
      const limit = int(values.limit, 'limit') ?? 50;
      if (limit < 1 || limit > 500) throw new UsageError('--limit must be from 1 to 500');
      const rows = (await services.destinations.deliveries(requireOption(values, 'product'), oneId(args), limit)).map(
        deliveryResource,
      );
      if (json) io.out(JSON.stringify({ data: rows }));
      else if (rows.length === 0) io.out('no deliveries');
      else
        io.out(
          table(
            rows.map((r) => ({ ...r, messages: r.message_ids.length, first: r.message_ids[0] })),
            ['attempted_at', 'attempt', 'outcome', 'status', 'duration_ms', 'messages', 'first', 'error'],
          ),
        );
      return 0;
    },
  },
];
