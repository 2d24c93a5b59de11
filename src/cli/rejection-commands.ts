// `inlet rejections list`: what clients sent that was not stored (segment-compat "Bodies").
import { rejectionResource } from '../resources/rejections.js';
import { requireOption, table, UsageError, type Command } from './command.js';

export const rejectionCommands: Command[] = [
  {
    path: ['rejections', 'list'],
    usage: 'inlet rejections list --product <id> [--code <code>] [--severity rejected|warning] [--limit <n>] [--json]',
    summary: 'Rejected items and warnings of a product, newest first',
    options: {
      product: { type: 'string' },
      code: { type: 'string' },
      severity: { type: 'string' },
      limit: { type: 'string' },
    },
    async run({ services, values, io, json }) {
      const productId = requireOption(values, 'product');
      const limit = values.limit === undefined ? 50 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 500)
        throw new UsageError('--limit must be a whole number from 1 to 500');
      const severity = values.severity as string | undefined;
      if (severity !== undefined && severity !== 'rejected' && severity !== 'warning')
        throw new UsageError('--severity must be rejected or warning');
      await services.keys.requireProduct(productId);
      const rows = (
        await services.rejections.list(productId, {
          limit,
          ...(typeof values.code === 'string' ? { code: values.code } : {}),
          ...(severity === undefined ? {} : { severity }),
        })
      ).map(rejectionResource);
      if (json) io.out(JSON.stringify({ data: rows }));
      else if (rows.length === 0) io.out('no rejections');
      else
        io.out(
          table(
            rows.map((r) => ({ ...r, item: JSON.stringify(r.item).slice(0, 60) })),
            ['received_at', 'severity', 'code', 'route', 'index', 'message_id', 'key_id', 'detail', 'item'],
          ),
        );
      return 0;
    },
  },
];
