// Health: GET /admin/v1/stats (clarifications §28) every 5 s: ingest rate, rejections, commit latency, the
// database pool, destinations by status. The figures are those of the instance that answered.
import { useEffect, useState } from 'preact/hooks';
import { ColumnChart } from '../chart';
import { get, type Envelope } from '../api';
import { Badge, ErrorLine, Section, time, useLoad } from '../ui';

interface Stats {
  instance: { hostname?: string; pid?: number; started_at: string; uptime_seconds: number };
  ingest: { events_total: Record<string, number>; events_per_second: number; rate_window_seconds: number };
  rejections: { total: number; by_code: Array<{ code: string; severity: string; count: number }> };
  commit: {
    count: number;
    mean_ms: number | null;
    p50_ms: number | null;
    p99_ms: number | null;
    mean_events: number | null;
  };
  pool: { max: number; open: number; idle: number; waiting: number } | null;
  destinations: {
    active: number;
    paused: number;
    disabled: number;
    disabled_destinations: Array<{ id: string; product_id: string; name: string; reason: string | null }>;
  };
}

const ms = (value: number | null) => (value === null ? '—' : value < 1 ? `${value.toFixed(2)} ms` : `≤ ${value} ms`);

export function HealthPage() {
  const stats = useLoad(() => get<Envelope<Stats>>('stats'), []);
  useEffect(() => {
    const timer = setInterval(stats.reload, 5000);
    return () => clearInterval(timer);
  }, [stats.reload]);
  const s = stats.data?.data;
  // The rate of each poll while the page is open (the last 5 minutes), for the chart.
  const [history, setHistory] = useState<Array<{ x: string; y: number }>>([]);
  useEffect(() => {
    if (s === undefined) return;
    setHistory((h) =>
      [
        ...h,
        {
          x: new Date().toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' }),
          y: s.ingest.events_per_second,
        },
      ].slice(-60),
    );
  }, [s]);
  return (
    <>
      <h1>Health</h1>
      <ErrorLine error={stats.error} />
      {s !== undefined && (
        <>
          <p class="note" data-testid="instance">
            These figures are <strong>this instance's own</strong>: the process that answered (
            {s.instance.hostname === undefined ? (
              'this process'
            ) : (
              <>
                host <code>{s.instance.hostname}</code>, pid <code>{s.instance.pid}</code>
              </>
            )}
            , up since {time(s.instance.started_at)}). Behind a load balancer each instance counts only what it served;
            only the destinations are counted across every instance.
          </p>
          <div class="tiles">
            <div class="tile">
              <span class="tile-label">Ingest rate</span>
              <span class="tile-value" data-testid="ingest-rate">
                {s.ingest.events_per_second.toLocaleString()} /s
              </span>
              <span class="hint">events created, last {s.ingest.rate_window_seconds} s</span>
            </div>
            <div class="tile">
              <span class="tile-label">Events since start</span>
              <span class="tile-value">{(s.ingest.events_total.created ?? 0).toLocaleString()}</span>
              <span class="hint">
                {(s.ingest.events_total.duplicate ?? 0).toLocaleString()} duplicates,{' '}
                {(s.ingest.events_total.rejected ?? 0).toLocaleString()} rejected
              </span>
            </div>
            <div class="tile">
              <span class="tile-label">Commit latency</span>
              <span class="tile-value">{s.commit.mean_ms === null ? '—' : `${s.commit.mean_ms} ms`}</span>
              <span class="hint">
                mean; p50 {ms(s.commit.p50_ms)}, p99 {ms(s.commit.p99_ms)}; events per commit:{' '}
                {s.commit.mean_events ?? '—'}
              </span>
            </div>
            <div class="tile">
              <span class="tile-label">Database pool</span>
              <span class="tile-value">
                {s.pool === null ? 'SQLite' : `${s.pool.open - s.pool.idle} / ${s.pool.max} busy`}
              </span>
              <span class="hint">
                {s.pool === null ? 'one connection, no pool' : `${s.pool.waiting} waiting, ${s.pool.idle} idle`}
              </span>
            </div>
            <div class="tile">
              <span class="tile-label">Destinations</span>
              <span class="tile-value">
                <Badge tone="ok">{s.destinations.active} active</Badge>{' '}
                <Badge tone="muted">{s.destinations.paused} paused</Badge>{' '}
                <Badge tone={s.destinations.disabled > 0 ? 'bad' : 'muted'}>{s.destinations.disabled} disabled</Badge>
              </span>
            </div>
          </div>
          <Section title="Ingest rate while this page is open (events/s, every 5 s)">
            <ColumnChart label="Ingest rate" unit=" events/s" points={history} />
          </Section>
          {s.destinations.disabled_destinations.length > 0 && (
            <Section title="Disabled destinations">
              <ul>
                {s.destinations.disabled_destinations.map((d) => (
                  <li key={d.id}>
                    <a href={`#/p/${d.product_id}/destinations`}>{d.name}</a>: {d.reason ?? 'no reason recorded'}
                  </li>
                ))}
              </ul>
            </Section>
          )}
          <Section title="Rejections since start, by code">
            {s.rejections.by_code.length === 0 ? (
              <p class="hint">None.</p>
            ) : (
              <div class="scroll">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Code</th>
                      <th scope="col">Severity</th>
                      <th scope="col" class="num">
                        Count
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {s.rejections.by_code.map((r) => (
                      <tr key={`${r.code}${r.severity}`}>
                        <td>
                          <code>{r.code}</code>
                        </td>
                        <td>{r.severity}</td>
                        <td class="num">{r.count.toLocaleString()}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </Section>
          <p class="hint">
            This instance started {time(s.instance.started_at)}. Refreshed every 5 s. Prometheus metrics:{' '}
            <a href="/metrics">/metrics</a>.
          </p>
        </>
      )}
    </>
  );
}
