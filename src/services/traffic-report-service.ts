// Reads traffic reports (contract §8): validates the query, aggregates in storage, and shapes the
// response with its meta (range, grouping, totals, provider, freshness, next cursor).
import {
  cursorAfter,
  parseTrafficReportQuery,
  type TrafficDimension,
  type TrafficMetrics,
  type TrafficReportRow,
} from '../domain/traffic-reports.js';
import type { Storage } from '../storage/types.js';

export interface TrafficReport {
  data: TrafficReportRow[];
  meta: {
    from: string;
    to: string;
    group_by: TrafficDimension[];
    totals: TrafficMetrics;
    provider: string | null;
    last_synced_at: string | null;
    next_cursor: string | null;
  };
}

export interface TrafficReportService {
  /** `query` is the parsed query string; throws `validation_error` naming each bad parameter. */
  report(productId: string, query: Record<string, unknown>): Promise<TrafficReport>;
}

export function createTrafficReportService(storage: Storage, now: () => Date = () => new Date()): TrafficReportService {
  return {
    async report(productId, rawQuery) {
      const query = parseTrafficReportQuery(rawQuery, now());
      const [page, source, lastSyncedAt] = await Promise.all([
        storage.traffic.report(productId, query),
        storage.traffic.getSource(productId),
        storage.traffic.lastSucceededAt(productId),
      ]);
      const last = page.rows.at(-1);
      return {
        data: page.rows,
        meta: {
          from: query.from,
          to: query.to,
          group_by: query.groupBy,
          totals: page.totals,
          provider: source?.provider ?? null,
          last_synced_at: lastSyncedAt,
          next_cursor: page.hasMore && last !== undefined ? cursorAfter(query, last) : null,
        },
      };
    },
  };
}
