// A tiny SVG column chart (no chart library: one series of at most a few hundred days is all the console
// draws). Each column has a <title> (hover, screen readers); the table beside every chart holds the figures.
export function ColumnChart({
  points,
  label,
  unit = '',
}: {
  points: Array<{ x: string; y: number }>;
  label: string;
  unit?: string;
}) {
  const width = 720;
  const height = 200;
  const pad = { top: 12, right: 8, bottom: 28, left: 44 };
  const max = Math.max(1, ...points.map((p) => p.y));
  const step = (width - pad.left - pad.right) / Math.max(points.length, 1);
  const bar = Math.min(28, Math.max(1, step * 0.75));
  const y = (value: number) => pad.top + (height - pad.top - pad.bottom) * (1 - value / max);
  const ticks = [0, max / 2, max].map((t) => Math.round(t));
  const labelEvery = Math.ceil(points.length / 8);
  return (
    <svg
      class="chart"
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      aria-label={`${label}: ${points.length} values, highest ${max}${unit}`}
    >
      {ticks.map((t, i) => (
        <g key={i}>
          <line x1={pad.left} x2={width - pad.right} y1={y(t)} y2={y(t)} class="grid" />
          <text x={pad.left - 6} y={y(t) + 4} text-anchor="end" class="axis">
            {t}
          </text>
        </g>
      ))}
      {points.map((p, i) => (
        <g key={i}>
          <rect
            x={pad.left + i * step + (step - bar) / 2}
            y={y(p.y)}
            width={bar}
            height={Math.max(0, height - pad.bottom - y(p.y))}
            class="bar"
          >
            <title>{`${p.x}: ${p.y}${unit}`}</title>
          </rect>
          {i % labelEvery === 0 && (
            <text x={pad.left + i * step + step / 2} y={height - 8} text-anchor="middle" class="axis">
              {p.x.length === 10 ? p.x.slice(5) : p.x}
            </text>
          )}
        </g>
      ))}
    </svg>
  );
}
