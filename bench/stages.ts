// `npm run bench -- --stages`: where the server's time per event goes, stage by stage (issue 11), from V8 CPU
// profiles of the server (node --cpu-prof) cut to the measured runs.
//
// Each sample of the main thread's profile is put in one stage by its call stack, read from the sampled
// function outwards: the first frame that belongs to a stage decides (the statement run inside the event
// writer is "insert", the writer itself around it is too; a JSON serialiser called by Fastify's reply is
// "respond"). Node's socket and stream internals and Fastify's own frames decide only when nothing more
// specific is on the stack. Samples are cut to the measured runs by time: V8's profile clock and
// process.hrtime are both CLOCK_MONOTONIC, so the bench's own timestamps of each run select its samples.
// A profile samples wall time on the thread, so a synchronous fsync inside a commit counts as the commit's
// time although the CPU waits; "idle" is the thread waiting for work (the event loop empty).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface StageWindow {
  label: string;
  /** CLOCK_MONOTONIC microseconds (process.hrtime.bigint() / 1000n). */
  fromUs: number;
  toUs: number;
  /** Events acknowledged in the window. */
  events: number;
}

export const STAGES = [
  'socket + parse',
  'auth + rate limit',
  'validate',
  'draft',
  'accept bookkeeping (ingest service, catalogue, metrics)',
  'insert (SQL statements)',
  'commit (BEGIN/COMMIT, fsync)',
  'WAL checkpoint on the event loop',
  'respond (serialise, write)',
  'logging',
  'framework (Fastify, routing, hooks)',
  'garbage collection',
  'other',
] as const;
export type Stage = (typeof STAGES)[number];

interface CallFrame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** A frame's stage, 'weak' for frames that decide only when no other frame on the stack does, or undefined. */
function frameStage(
  frame: CallFrame,
  parent: CallFrame | undefined,
): Stage | 'weak-socket' | 'weak-framework' | undefined {
  const { functionName: fn, url } = frame;
  if (fn === '(garbage collector)') return 'garbage collection';
  if (fn === '(program)' || fn === '(root)') return undefined;
  // The transaction wrapper's own time is BEGIN and COMMIT (with the fsync); what it calls is the insert.
  if (fn === 'sqliteTransaction' || fn === 'commitTransaction' || fn === 'beginTransaction')
    return 'commit (BEGIN/COMMIT, fsync)';
  if (fn === 'executeQuery' && parent !== undefined && /commitTransaction|beginTransaction/.test(parent.functionName))
    return 'commit (BEGIN/COMMIT, fsync)';
  if (/\/storage\/sqlite\/checkpointer\./.test(url)) return 'WAL checkpoint on the event loop';
  if (/\/(src|dist)\/storage\/|better-sqlite3|\/kysely\/|node_modules\/pg\//.test(url))
    return 'insert (SQL statements)';
  if (
    /\/(src|dist)\/http\/(auth|browser-keys)\.|rate-limit|rate-limiter-flexible|\/services\/(api-keys|key-)|\/domain\/api-keys\./.test(
      url,
    )
  )
    return 'auth + rate limit';
  if (/\/(src|dist)\/http\/validation\.|@sinclair\/typebox|\/domain\/json-values\./.test(url) || /^check_/.test(fn))
    return 'validate';
  if (
    /\/(src|dist)\/http\/plugins\/body\.|secure-json-parse|\/content-type-parser\.|\/segment\/scan|segment-scan/.test(
      url,
    ) ||
    (fn === 'parse' && url === '')
  )
    return 'socket + parse';
  if (/\/(src|dist)\/(domain|http\/routes|http\/segment)\//.test(url)) return 'draft';
  if (/\/(src|dist)\/services\/|prom-client/.test(url))
    return 'accept bookkeeping (ingest service, catalogue, metrics)';
  if (
    /\/fastify\/lib\/(reply|serializer|error-serializer)\.|fast-json-stringify|\/http\/(serializer-cache|events-format)\.|node:_http_outgoing/.test(
      url,
    ) ||
    /^anonymous\d+$/.test(fn)
  )
    return 'respond (serialise, write)';
  if (/pino|sonic-boom|\/http\/plugins\/lifecycle\./.test(url)) return 'logging';
  if (
    /^node:(net|_http_server|_http_common|_http_incoming|internal\/stream|internal\/streams|stream|events|buffer)/.test(
      url,
    ) ||
    fn === 'writev' ||
    fn === 'writeBuffer' ||
    fn === 'writeUtf8String'
  )
    return 'weak-socket';
  if (/fastify|find-my-way|avvio|fastq|light-my-request/.test(url)) return 'weak-framework';
  return undefined;
}

/** Stage of every profile node (by its stack), computed once per node. */
function nodeStages(profile: Profile): Map<number, Stage> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  const stages = new Map<number, Stage>();
  for (const node of profile.nodes) {
    let weak: Stage | undefined;
    let found: Stage | undefined;
    for (let id: number | undefined = node.id; id !== undefined && found === undefined; id = parentOf.get(id)) {
      const here = byId.get(id)!;
      const parentId = parentOf.get(id);
      const stage = frameStage(here.callFrame, parentId === undefined ? undefined : byId.get(parentId)!.callFrame);
      if (stage === 'weak-socket') weak ??= 'socket + parse';
      else if (stage === 'weak-framework') weak ??= 'framework (Fastify, routing, hooks)';
      else if (stage !== undefined) found = stage;
    }
    stages.set(node.id, found ?? weak ?? 'other');
  }
  return stages;
}

export interface StageBreakdown {
  label: string;
  events: number;
  /** Main thread: busy microseconds per event by stage. */
  perEvent: Map<Stage, number>;
  /** Main thread: share of the window it was busy. */
  busyShare: number;
  /** Other threads of the server (the WAL checkpoint thread, the delivery worker): busy µs per event. */
  otherThreadsPerEvent: number;
}

function busyIn(profile: Profile, window: StageWindow, onSample: (nodeId: number, us: number) => void): number {
  let at = profile.startTime;
  let busy = 0;
  const idle = new Set(profile.nodes.filter((n) => n.callFrame.functionName === '(idle)').map((n) => n.id));
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i]!;
    if (at < window.fromUs || at > window.toUs) continue;
    const delta = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i]!;
    const node = profile.samples[i]!;
    if (idle.has(node)) continue;
    busy += delta;
    onSample(node, delta);
  }
  return busy;
}

/**
 * The breakdown of each window from the profiles in `dir` written by the server process `pid` (thread 0 is
 * the main thread; the others are summed apart).
 */
export function stageBreakdowns(dir: string, pid: number, windows: StageWindow[]): StageBreakdown[] {
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile') && f.split('.')[3] === String(pid));
  const main = files.find((f) => f.split('.')[4] === '0');
  if (main === undefined) throw new Error(`no main-thread profile of process ${pid} in ${dir}`);
  const read = (file: string) => JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile;
  const mainProfile = read(main);
  const stages = nodeStages(mainProfile);
  const others = files.filter((f) => f !== main).map(read);
  return windows.map((window) => {
    const totals = new Map<Stage, number>(STAGES.map((s) => [s, 0]));
    const busy = busyIn(mainProfile, window, (node, us) => {
      const stage = stages.get(node)!;
      totals.set(stage, totals.get(stage)! + us);
    });
    const otherBusy = others.reduce((sum, profile) => sum + busyIn(profile, window, () => {}), 0);
    const events = Math.max(1, window.events);
    return {
      label: window.label,
      events: window.events,
      perEvent: new Map([...totals].map(([stage, us]) => [stage, us / events])),
      busyShare: busy / Math.max(1, window.toUs - window.fromUs),
      otherThreadsPerEvent: otherBusy / events,
    };
  });
}

export function formatBreakdowns(breakdowns: StageBreakdown[]): string {
  if (breakdowns.length === 0) return '';
  const width = Math.max(...STAGES.map((s) => s.length), 'other threads of the server (checkpoints, delivery)'.length);
  const head = `${'µs per event, main thread'.padEnd(width)}  ${breakdowns.map((b) => b.label.padStart(14)).join('  ')}`;
  const row = (name: string, values: number[]) =>
    `${name.padEnd(width)}  ${values.map((v) => v.toFixed(1).padStart(14)).join('  ')}`;
  const lines = [head];
  for (const stage of STAGES)
    lines.push(
      row(
        `  ${stage}`,
        breakdowns.map((b) => b.perEvent.get(stage) ?? 0),
      ),
    );
  lines.push(
    row(
      '  total (busy)',
      breakdowns.map((b) => [...b.perEvent.values()].reduce((a, v) => a + v, 0)),
    ),
  );
  lines.push(
    `${'  main thread busy, share of the run'.padEnd(width)}  ${breakdowns.map((b) => `${(b.busyShare * 100).toFixed(0)} %`.padStart(14)).join('  ')}`,
  );
  lines.push(
    row(
      'other threads of the server (checkpoints, delivery)',
      breakdowns.map((b) => b.otherThreadsPerEvent),
    ),
  );
  lines.push(
    `${'events in the measured run'.padEnd(width)}  ${breakdowns.map((b) => b.events.toLocaleString('en-US').padStart(14)).join('  ')}`,
  );
  return lines.join('\n');
}

/** CLOCK_MONOTONIC microseconds, the clock of V8's profiles. */
export const monotonicMicros = (): number => Number(process.hrtime.bigint() / 1000n);
