// CLI commands for erasure, suppressions and retention (governance.md §3–4).
import { erasureResource, suppressionResource } from '../resources/erasure.js';
import { productResource } from '../resources/admin.js';
import type { ErasureRecord } from '../storage/types.js';
import { requireOption, table, UsageError, type Command } from './command.js';

function countsLine(job: ErasureRecord): string {
  return Object.entries(job.counts)
    .map(([kind, n]) => `${kind} ${n}`)
    .join(', ');
}

export const erasureCommands: Command[] = [
  {
    path: ['users', 'erase'],
    usage: 'inlet users erase --product <id> <external_id> [--reason <text>] [--wait] [--json]',
    summary:
      'Erase a person: every id linked to them is suppressed at once (ingest refuses it with subject_suppressed), then their events, identity, rejections and violations are deleted. --wait runs the job here and prints its progress; without it the server runs it',
    options: { product: { type: 'string' }, reason: { type: 'string' }, wait: { type: 'boolean' } },
    async run({ services, args, values, io, json }) {
      const productId = requireOption(values, 'product');
      const externalId = args[0];
      if (externalId === undefined || args.length > 1)
        throw new UsageError('exactly one external id is required (quote it if it contains spaces)');
      await services.keys.requireProduct(productId);
      const reason = typeof values.reason === 'string' ? values.reason : null;
      const job = await services.erasure.request(productId, externalId, reason);
      if (!json)
        io.out(`erasure ${job.id}: ${job.counts.ids} linked id(s) suppressed; items for them are refused from now on`);
      if (values.wait !== true) {
        if (json) io.out(JSON.stringify({ data: erasureResource(job) }));
        else io.out(`queued: the server runs it (see: inlet users erasure --product ${productId} ${job.id})`);
        return 0;
      }
      let lastLine = '';
      const done = await services.erasure.runNow(productId, job.id, (progress) => {
        const line = `${progress.status} (${progress.phase}): ${countsLine(progress)}`;
        if (!json && line !== lastLine) io.out(line);
        lastLine = line;
      });
      if (json) io.out(JSON.stringify({ data: erasureResource(done) }));
      else
        io.out(
          done.status === 'done'
            ? `done at ${done.finishedAt}: ${countsLine(done)}`
            : `${done.status}: ${done.error ?? ''}`,
        );
      return done.status === 'done' ? 0 : 1;
    },
  },
  {
    path: ['users', 'erasure'],
    usage: 'inlet users erasure --product <id> <erasure_id> [--json]',
    summary: 'Show one erasure job: status, phase, counts',
    options: { product: { type: 'string' } },
    async run({ services, args, values, io, json }) {
      const productId = requireOption(values, 'product');
      if (args.length !== 1) throw new UsageError('exactly one erasure id is required');
      const job = erasureResource(await services.erasure.get(productId, args[0]!));
      if (json) io.out(JSON.stringify({ data: job }));
      else {
        io.out(
          `erasure ${job.id}  ${job.status} (${job.phase})  requested ${job.requested_at}  finished ${job.finished_at ?? '-'}`,
        );
        io.out(`external_id_hmac ${job.external_id_hmac}`);
        io.out(`reason ${job.reason ?? '-'}`);
        io.out(
          `counts ${Object.entries(job.counts)
            .map(([k, n]) => `${k} ${n}`)
            .join(', ')}`,
        );
      }
      return 0;
    },
  },
  {
    path: ['users', 'erasures'],
    usage: 'inlet users erasures --product <id> [--external-id <id>] [--limit <n>] [--json]',
    summary:
      'The erasure audit, newest first (HMACs of the ids, never the ids); --external-id answers "was this id erased?"',
    options: { product: { type: 'string' }, 'external-id': { type: 'string' }, limit: { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const limit = values.limit === undefined ? 50 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 500)
        throw new UsageError('--limit must be a whole number from 1 to 500');
      const externalId = typeof values['external-id'] === 'string' ? values['external-id'] : undefined;
      const jobs = (await services.erasure.list(productId, { limit, externalId })).map(erasureResource);
      if (json) io.out(JSON.stringify({ data: jobs }));
      else if (jobs.length === 0) io.out('no erasures');
      else
        io.out(
          table(
            jobs.map((j) => ({ ...j, events: j.counts.events, hmac: `${j.external_id_hmac.slice(0, 16)}…` })),
            ['id', 'status', 'requested_at', 'finished_at', 'events', 'hmac', 'reason'],
          ),
        );
      return 0;
    },
  },
  {
    path: ['suppressions', 'list'],
    usage: 'inlet suppressions list --product <id> [--external-id <id>] [--json]',
    summary: 'Suppressed ids of a product (as HMACs); they last until lifted',
    options: { product: { type: 'string' }, 'external-id': { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      await services.keys.requireProduct(productId);
      const externalId = typeof values['external-id'] === 'string' ? values['external-id'] : undefined;
      const rows = (await services.erasure.suppressions(productId, { limit: 500, externalId })).map(
        suppressionResource,
      );
      if (json) io.out(JSON.stringify({ data: rows }));
      else if (rows.length === 0) io.out('no suppressions');
      else io.out(table(rows, ['id', 'created_at', 'erasure_id', 'external_id_hmac']));
      return 0;
    },
  },
  {
    path: ['suppressions', 'lift'],
    usage: 'inlet suppressions lift --product <id> <suppression_id>',
    summary: 'Lift a suppression: items for that id are accepted again',
    options: { product: { type: 'string' } },
    async run({ services, args, values, io }) {
      const productId = requireOption(values, 'product');
      if (args.length !== 1) throw new UsageError('exactly one suppression id is required');
      await services.erasure.lift(productId, args[0]!);
      io.out(`lifted ${args[0]}`);
      return 0;
    },
  },
  {
    path: ['products', 'retention'],
    usage: 'inlet products retention --product <id> --events-days <n|forever> [--json]',
    summary: "Keep a product's events this many days (older ones are deleted in the background), or forever",
    options: { product: { type: 'string' }, 'events-days': { type: 'string' } },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const raw = requireOption(values, 'events-days');
      const days = raw === 'forever' || raw === 'null' ? null : Number(raw);
      if (days !== null && (!Number.isInteger(days) || days < 1))
        throw new UsageError('--events-days must be a whole number of days (1 or more) or "forever"');
      const product = productResource(await services.retention.setEventsDays(productId, days));
      if (json) io.out(JSON.stringify({ data: product }));
      else io.out(`product ${product.id}: events kept ${days === null ? 'forever' : `${days} days`}`);
      return 0;
    },
  },
];
