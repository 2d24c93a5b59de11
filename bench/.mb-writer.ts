import BetterSqlite3 from 'better-sqlite3';
import { openStorage } from '../src/storage/connect.js';
import { ROW_COLUMNS, rowValues, ExternalIds } from './workload.js';
const path = `/tmp/mb/w-${Date.now()}.db`;
const s = await openStorage(`sqlite:${path}`); await s.close();
const db = new BetterSqlite3(path); db.pragma('journal_mode = WAL'); db.pragma('synchronous = OFF');
db.prepare("INSERT INTO products VALUES ('p','p','x')").run();
const cols = ROW_COLUMNS.join(', ');
const one = db.prepare(`INSERT INTO events (${cols}) VALUES (${ROW_COLUMNS.map(() => '?').join(',')}) ON CONFLICT DO NOTHING`);
const K = 50;
const many = db.prepare(`INSERT INTO events (${cols}) VALUES ${Array.from({length:K},()=>`(${ROW_COLUMNS.map(() => '?').join(',')})`).join(',')} ON CONFLICT DO NOTHING RETURNING id`);
const ids = new ExternalIds('x');
function gen(n: number) { return Array.from({ length: n }, (_, i) => rowValues('p', 'k', 'api', ids.take(), i)); }
const perRow = db.transaction((rows: unknown[][]) => { for (const r of rows) one.run(r); });
const multi = db.transaction((rows: unknown[][]) => { for (let i = 0; i < rows.length; i += K) { many.all(rows.slice(i, i + K).flat()); } });
for (const round of [1, 2, 3]) for (const [name, fn] of [['per-row', perRow], ['multi', multi]] as const) {
  let cpu = 0; const N = 40;
  for (let g = 0; g < N; g++) { const rows = gen(1000); const c = process.cpuUsage(); fn(rows); const d = process.cpuUsage(c); cpu += d.user + d.system; }
  console.log(round, name, (cpu / (N * 1000)).toFixed(2), 'µs/row');
}
