// CLI commands for stored events (events-out §3–5): list, show, tail, export. They use the same read
// service, stream tail and export as the admin API, straight on the database (no server needed).
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { createGzip } from 'node:zlib';
import { encodeCursor } from '../domain/event-cursor.js';
import { eventResource } from '../resources/events.js';
import { rejectionResource } from '../resources/rejections.js';
import { exportText, type ExportFormat } from '../resources/event-export.js';
import { EVENTS_MAX_LIMIT, type EventFilterParams } from '../services/event-read-service.js';
import { requireOption, table, UsageError, type Command } from './command.js';

const filterOptions = {
  product: { type: 'string' },
  name: { type: 'string' },
  'event-type': { type: 'string' },
  action: { type: 'string' },
  source: { type: 'string' },
  'key-id': { type: 'string' },
  'subject-type': { type: 'string' },
  'subject-id': { type: 'string' },
  user: { type: 'string' },
  from: { type: 'string' },
  to: { type: 'string' },
} as const;

const FILTER_USAGE =
  '[--name a.b,c.d] [--event-type t] [--action a] [--source s] [--key-id k] [--subject-type t --subject-id id] [--user external_id] [--from RFC3339] [--to RFC3339]';

type Values = Record<string, string | boolean | undefined>;

function str(values: Values, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

function filterParams(values: Values): EventFilterParams {
  return {
    canonical_name: str(values, 'name'),
    event_type: str(values, 'event-type'),
    action: str(values, 'action'),
    source: str(values, 'source'),
    key_id: str(values, 'key-id'),
    subject_type: str(values, 'subject-type'),
    subject_id: str(values, 'subject-id'),
    user: str(values, 'user'),
    received_from: str(values, 'from'),
    received_to: str(values, 'to'),
  };
}

function humanRow(event: ReturnType<typeof eventResource>) {
  return {
    received_at: event.received_at,
    name: event.canonical_name,
    subject: `${event.subject_type}:${event.subject_id}`,
    uuid: event.uuid,
  };
}

export const eventCommands: Command[] = [
  {
    path: ['events', 'list'],
    usage: `inlet events list --product <id> ${FILTER_USAGE} [--order desc|asc] [--limit n] [--cursor c] [--json]`,
    summary: "List a product's events, newest first (one page; --cursor continues)",
    options: { ...filterOptions, order: { type: 'string' }, limit: { type: 'string' }, cursor: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const order = str(values, 'order');
      if (order !== undefined && order !== 'asc' && order !== 'desc')
        throw new UsageError('--order must be desc or asc');
      const limitText = str(values, 'limit');
      if (limitText !== undefined && !/^\d{1,4}$/.test(limitText))
        throw new UsageError(`--limit must be a whole number from 1 to ${EVENTS_MAX_LIMIT}`);
      await services.keys.requireProduct(productId);
      const page = await services.events.reads.list(productId, {
        ...filterParams(values),
        order,
        limit: limitText === undefined ? undefined : Number(limitText),
        cursor: str(values, 'cursor'),
      });
      const data = page.events.map(eventResource);
      if (json) {
        io.out(JSON.stringify({ data, meta: { next_cursor: page.nextCursor } }));
        return 0;
      }
      io.out(data.length === 0 ? 'no events' : table(data.map(humanRow), ['received_at', 'name', 'subject', 'uuid']));
      if (page.nextCursor !== null) io.out(`\nmore: --cursor ${page.nextCursor}`);
      return 0;
    },
  },
  {
    path: ['events', 'show'],
    usage: 'inlet events show --product <id> <uuid> [--json]',
    summary: 'Show one event with all its fields',
    options: { product: { type: 'string' } },
    async run({ services, args, values, io, json }) {
      const productId = requireOption(values, 'product');
      if (args.length !== 1) throw new UsageError('exactly one event uuid is required');
      await services.keys.requireProduct(productId);
      const event = eventResource(await services.events.reads.get(productId, args[0]!));
      io.out(json ? JSON.stringify({ data: event }) : JSON.stringify(event, null, 2));
      return 0;
    },
  },
  {
    path: ['events', 'tail'],
    usage: `inlet events tail --product <id> ${FILTER_USAGE} [--after <cursor>] [--rejections] [--json]`,
    summary:
      'Print events as they are stored (one JSON per line with --json), and with --rejections the rejections as they are recorded, until Ctrl-C',
    options: { ...filterOptions, after: { type: 'string' }, rejections: { type: 'boolean' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const filter = await services.events.reads.resolveFilter(productId, filterParams(values));
      const afterCursor = str(values, 'after');
      const after = afterCursor === undefined ? undefined : services.events.reads.positionOf(afterCursor, '/after');
      let finish: (code: number) => void = () => {};
      const finished = new Promise<number>((resolve) => (finish = resolve));
      const stop = await services.events.streams.open(
        productId,
        filter,
        after,
        {
          send(event) {
            const resource = eventResource(event);
            io.out(
              json
                ? JSON.stringify({ id: encodeCursor(event.position!), data: resource })
                : `${resource.received_at}  ${resource.canonical_name}  ${resource.subject_type}:${resource.subject_id}  ${JSON.stringify(resource.properties)}  ${resource.uuid}`,
            );
          },
          sendRejection(rejection) {
            const resource = rejectionResource(rejection);
            io.out(
              json
                ? JSON.stringify({ rejection: resource })
                : `${resource.received_at}  REJECTED ${resource.code}  ${resource.route}  ${resource.message_id ?? '-'}  ${resource.detail}`,
            );
          },
          lagging: () => false,
          ready: () => Promise.resolve(true),
          close: (reason) => finish(reason === 'shutdown' ? 0 : 1),
        },
        { includeRejections: values.rejections === true },
      );
      if (!json) io.err(`tailing events of ${productId}; Ctrl-C to stop`);
      const onSignal = () => {
        stop();
        finish(0);
      };
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        return await finished;
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    },
  },
  {
    path: ['events', 'export'],
    usage: `inlet events export --product <id> [--format ndjson|csv] ${FILTER_USAGE} [-o file] [--gzip]`,
    summary: "Export a product's events (oldest first) to a file or stdout; progress on stderr when it is a terminal",
    options: {
      ...filterOptions,
      format: { type: 'string' },
      output: { type: 'string', short: 'o' },
      gzip: { type: 'boolean' },
    },
    async run({ services, values, io }) {
      const productId = requireOption(values, 'product');
      const format = (str(values, 'format') ?? 'ndjson') as ExportFormat;
      if (format !== 'ndjson' && format !== 'csv') throw new UsageError('--format must be ndjson or csv');
      await services.keys.requireProduct(productId);
      const filter = await services.events.reads.resolveFilter(productId, filterParams(values));
      const path = str(values, 'output');
      const file = path === undefined ? process.stdout : createWriteStream(path);
      const gzip = values.gzip === true ? createGzip() : undefined;
      if (gzip !== undefined) gzip.pipe(file, { end: file !== process.stdout });
      const sink = gzip ?? file;
      const started = Date.now();
      let lastPrint = 0;
      const tty = process.stderr.isTTY === true;
      const progress = (count: number, final = false) => {
        const now = Date.now();
        if (!tty || (!final && now - lastPrint < 250)) return;
        lastPrint = now;
        const rate = Math.round(count / Math.max((now - started) / 1000, 0.001));
        process.stderr.write(
          `\r${count.toLocaleString('en-US')} events written, ${rate.toLocaleString('en-US')}/s${final ? '\n' : ''}`,
        );
      };
      let total = 0;
      const pages = services.events.reads.exportPages(productId, filter, (count) => {
        total = count;
        progress(count);
      });
      for await (const chunk of exportText(pages, format)) {
        if (!sink.write(chunk)) await once(sink, 'drain');
      }
      progress(total, true);
      if (sink !== process.stdout) {
        const done = file === process.stdout ? once(sink, 'end') : once(file, 'finish');
        sink.end();
        await done;
      }
      if (path !== undefined) io.err(`${total} events written to ${path}`);
      return 0;
    },
  },
];
