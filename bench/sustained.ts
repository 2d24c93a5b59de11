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
  /** The server's process: its CPU is read at each window's end. */
  serverPid?: number;
}

/**
 * What one window cost: the server's CPU per event, and the machine's idle and stolen shares of its cores. A window
 * that is slower at the same CPU per event lost its time to the machine (the generator, a neighbour, the hypervisor),
 * not to the table's growth.
 */
export interface WindowCost {
  serverMicrosPerEvent: number | undefined;
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
  window: number;
  firstWindowRate: number;
  lastWindowRate: number;
  /** The rate of each window in turn (the last one may be shorter): a steady slide or a dip at the end. */
  windowRates: number[];
  /** Each window's cost, in the same order (the last one may be shorter). */
  windowCosts: WindowCost[];
}

/** The server's CPU and the machine's at the end of a window's last answer (`answers` so far). */
export interface Mark {
  answers: number;
  server: number | undefined;
  machine: ReturnType<typeof machineSeconds>;
}

function markNow(answers: number, serverPid: number | undefined): Mark {
  return { answers, server: cpuSeconds(serverPid), machine: machineSeconds() };
}

/** What the window between two marks cost: its events are the answers between them × events per request. */
export function costBetween(from: Mark, to: Mark, eventsPerRequest: number): WindowCost {
  const events = (to.answers - from.answers) * eventsPerRequest;
  const all = to.machine.all - from.machine.all;
  const share = (part: number) => (all > 0 ? part / all : 0);
  return {
    serverMicrosPerEvent:
      from.server === undefined || to.server === undefined || events <= 0
        ? undefined
        : ((to.server - from.server) * 1e6) / events,
    idleShare: share(all - (to.machine.busy - from.machine.busy)),
    stealShare: share(to.machine.steal - from.machine.steal),
  };
}

/** The rate of the acknowledged events between the ok answers at index `from` and `to` (their times in ms). */
function rate(times: number[], from: number, to: number, eventsPerRequest: number): number {
  const ms = times[to]! - times[from]!;
  return ms <= 0 ? 0 : ((to - from) * eventsPerRequest * 1000) / ms;
}

/** The rates of consecutive windows of `perWindow` answers (`times` starts with the run's start). */
function windowRates(times: number[], perWindow: number, eventsPerRequest: number): number[] {
  const rates: number[] = [];
  for (let from = 0; from < times.length - 1; from += perWindow)
    rates.push(rate(times, from, Math.min(from + perWindow, times.length - 1), eventsPerRequest));
  return rates;
}

export function runSustained(options: SustainedOptions, okStatus: number): Promise<SustainedResult> {
  const requests = Math.ceil(options.events / options.eventsPerRequest);
  const times: number[] = [];
  const perWindow = Math.max(1, Math.floor(Math.min(SUSTAINED_WINDOW, options.events / 4) / options.eventsPerRequest));
  const marks: Mark[] = [markNow(0, options.serverPid)];
  const started = performance.now();
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
        if (ok > marks[marks.length - 1]!.answers) marks.push(markNow(ok, options.serverPid));
        const last = ok - 1;
        // The run's start, then each answer: the first window is the first of the windows in turn.
        const answerTimes = [started, ...times];
        const windows = windowRates(answerTimes, perWindow, options.eventsPerRequest);
        resolve({
          seconds: (performance.now() - started) / 1000,
          ok,
          notOk: result.non2xx,
          errors: result.errors + result.timeouts,
          eventsPerSecond: rate(answerTimes, 0, ok, options.eventsPerRequest),
          window: perWindow * options.eventsPerRequest,
          firstWindowRate: ok > 2 * perWindow ? windows[0]! : 0,
          lastWindowRate: ok > 2 * perWindow ? rate(times, last - perWindow, last, options.eventsPerRequest) : 0,
          windowRates: windows,
          windowCosts: marks.slice(1).map((mark, i) => costBetween(marks[i]!, mark, options.eventsPerRequest)),
        });
      },
    );
    instance.on('response', (_client: unknown, statusCode: number) => {
      if (statusCode !== okStatus) return;
      times.push(performance.now());
      if (times.length % perWindow === 0) marks.push(markNow(times.length, options.serverPid));
    });
  });
}
