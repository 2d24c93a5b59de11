// Issue 35's sustained figure: batches sent until `events` were acknowledged, the rate over the whole run, and the
// rate of its first and of its last window of events (does ingest slow as the table grows?).
import autocannon, { type Result } from 'autocannon';
import { cpuSeconds, machineSeconds } from './processes.js';

/** Issue 35's window: the first and the last 250,000 events of 3 M; a quarter of a shorter run. */
export const SUSTAINED_WINDOW = 250_000;

export interface SustainedOptions {
  url: string;
  path: string;
  headers: Record<string, string>;
  body: () => string;
  connections: number;
  events: number;
  eventsPerRequest: number;
  /** The server's process: its CPU is read at the run's start and at each window's end. */
  serverPid: number | undefined;
  /** The database's CPU seconds so far (PostgreSQL's processes), read with the server's. */
  databaseCpu?: () => number;
}

/**
 * One window of the run: its rate, the server's (and PostgreSQL's) CPU per event, and the machine's idle and stolen
 * shares of its cores. A window that is slower at the same CPU per event lost its time to the machine (the
 * generator, a neighbour, the hypervisor), not to the table's growth.
 */
export interface Window {
  eventsPerSecond: number;
  serverMicrosPerEvent: number | undefined;
  databaseMicrosPerEvent: number | undefined;
  idleShare: number;
  stealShare: number;
}

export interface SustainedResult {
  seconds: number;
  /** Requests answered with the expected status, and all the others. */
  ok: number;
  notOk: number;
  errors: number;
  eventsPerSecond: number;
  /** The server's CPU per event over the whole run, and the database's (PostgreSQL). */
  serverMicrosPerEvent: number | undefined;
  databaseMicrosPerEvent: number | undefined;
  window: number;
  firstWindowRate: number;
  lastWindowRate: number;
  /** Each window of `window` events in turn (the last one may be shorter): a steady slide or a dip at the end. */
  windows: Window[];
}

/** The clock, the server's CPU, the database's and the machine's when `answers` answers had come (the start: 0). */
export interface Mark {
  answers: number;
  /** performance.now() of the last of those answers (of the start for 0). */
  at: number;
  server: number | undefined;
  database: number | undefined;
  machine: ReturnType<typeof machineSeconds>;
}

function markNow(answers: number, at: number, options: SustainedOptions): Mark {
  return {
    answers,
    at,
    server: cpuSeconds(options.serverPid),
    database: options.databaseCpu?.(),
    machine: machineSeconds(),
  };
}

/** CPU microseconds per event between two readings, when both were taken. */
function microsPerEvent(from: number | undefined, to: number | undefined, events: number): number | undefined {
  return from === undefined || to === undefined || events <= 0 ? undefined : ((to - from) * 1e6) / events;
}

/** The window between two marks: its events are the answers between them × events per request. */
export function windowBetween(from: Mark, to: Mark, eventsPerRequest: number): Window {
  const events = (to.answers - from.answers) * eventsPerRequest;
  const ms = to.at - from.at;
  const all = to.machine.all - from.machine.all;
  const share = (part: number) => (all > 0 ? part / all : 0);
  return {
    eventsPerSecond: ms <= 0 ? 0 : (events * 1000) / ms,
    serverMicrosPerEvent: microsPerEvent(from.server, to.server, events),
    databaseMicrosPerEvent: microsPerEvent(from.database, to.database, events),
    idleShare: share(all - (to.machine.busy - from.machine.busy)),
    stealShare: share(to.machine.steal - from.machine.steal),
  };
}

/** The rate of the acknowledged events between the ok answers at index `from` and `to` (their times in ms). */
function rate(times: number[], from: number, to: number, eventsPerRequest: number): number {
  const ms = times[to]! - times[from]!;
  return ms <= 0 ? 0 : ((to - from) * eventsPerRequest * 1000) / ms;
}

export function runSustained(options: SustainedOptions, okStatus: number): Promise<SustainedResult> {
  const requests = Math.ceil(options.events / options.eventsPerRequest);
  const times: number[] = [];
  const perWindow = Math.max(1, Math.floor(Math.min(SUSTAINED_WINDOW, options.events / 4) / options.eventsPerRequest));
  const marks: Mark[] = [markNow(0, performance.now(), options)];
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        amount: requests,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: options.path,
            headers: { 'content-type': 'application/json', ...options.headers },
            setupRequest: (request) => ({ ...request, body: options.body() }),
          },
        ],
      },
      (error, result: Result) => {
        if (error) {
          reject(error);
          return;
        }
        const ok = times.length;
        if (ok > marks[marks.length - 1]!.answers) marks.push(markNow(ok, times[ok - 1]!, options));
        const last = ok - 1;
        const windows = marks.slice(1).map((mark, i) => windowBetween(marks[i]!, mark, options.eventsPerRequest));
        const whole = windowBetween(marks[0]!, marks[marks.length - 1]!, options.eventsPerRequest);
        resolve({
          seconds: (performance.now() - marks[0]!.at) / 1000,
          ok,
          notOk: result.non2xx,
          errors: result.errors + result.timeouts,
          eventsPerSecond: whole.eventsPerSecond,
          serverMicrosPerEvent: whole.serverMicrosPerEvent,
          databaseMicrosPerEvent: whole.databaseMicrosPerEvent,
          window: perWindow * options.eventsPerRequest,
          firstWindowRate: ok > 2 * perWindow ? windows[0]!.eventsPerSecond : 0,
          lastWindowRate: ok > 2 * perWindow ? rate(times, last - perWindow, last, options.eventsPerRequest) : 0,
          windows,
        });
      },
    );
    instance.on('response', (_client: unknown, statusCode: number) => {
      if (statusCode !== okStatus) return;
      const at = performance.now();
      times.push(at);
      if (times.length % perWindow === 0) marks.push(markNow(times.length, at, options));
    });
  });
}
