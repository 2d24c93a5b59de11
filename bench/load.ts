// One autocannon run against 127.0.0.1, summarised into the figures the report prints.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import autocannon, { type Result } from 'autocannon';
import { cpuSeconds } from './processes.js';
import {
  EVENT_NAMES,
  OCCURRED_AT,
  PROPERTIES_TEMPLATE,
  SEGMENT_CONTEXT_JSON,
  SUBJECTS,
  type IdKind,
} from './workload.js';

export interface LoadOptions {
  url: string;
  path: string;
  headers: Record<string, string>;
  /** Builds the body of the next request (called once per request). */
  body: () => string;
  connections: number;
  durationSeconds: number;
}

export interface LoadResult {
  seconds: number;
  /** Requests answered with the expected status. */
  ok: number;
  statusCounts: Record<string, number>;
  errors: number;
  timeouts: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

let running: { stop(): void } | undefined;

/** Stops a run in progress (Ctrl-C). */
export function stopLoad(): void {
  running?.stop();
}

export function runLoad(options: LoadOptions, okStatus: number): Promise<LoadResult> {
  const headers = { 'content-type': 'application/json', ...options.headers };
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        duration: options.durationSeconds,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: options.path,
            headers,
            setupRequest: (request) => ({ ...request, body: options.body() }),
          },
        ],
      },
      (error, result: Result) => {
        running = undefined;
        if (error) {
          reject(error);
          return;
        }
        const statusCounts: Record<string, number> = {};
        for (const [status, { count }] of Object.entries(result.statusCodeStats ?? {}))
          statusCounts[status] = Number(count);
        const ok = statusCounts[String(okStatus)] ?? 0;
        resolve({
          seconds: result.duration,
          ok,
          statusCounts,
          errors: result.errors,
          timeouts: result.timeouts,
          requestsPerSecond: ok / result.duration,
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
        });
      },
    );
    running = instance;
  });
}

/** A paced load: requests sent at a fixed rate (at most `connections` in flight), not as fast as possible. */
export interface PacedLoad {
  /** Requests sent so far. */
  readonly sent: number;
  /** Stops sending, waits for the answers in flight, and gives the rate achieved in requests a second. */
  stop(): Promise<number>;
}

/**
 * Sends `requestsPerSecond` POST requests a second to `path` until stopped, each answered with `okStatus`
 * (anything else fails the run: a paced load measures latency downstream, not refusals).
 */
export function pacedLoad(
  options: Omit<LoadOptions, 'durationSeconds'> & { requestsPerSecond: number },
  okStatus: number,
): PacedLoad {
  const headers = { 'content-type': 'application/json', ...options.headers };
  const startedAt = performance.now();
  let stopping = false;
  let sent = 0;
  let failure: Error | undefined;
  const done = (async () => {
    const inFlight = new Set<Promise<void>>();
    while (!stopping && failure === undefined) {
      const due = Math.floor(((performance.now() - startedAt) / 1000) * options.requestsPerSecond);
      while (sent < due && inFlight.size < options.connections) {
        sent++;
        const request: Promise<void> = fetch(`${options.url}${options.path}`, {
          method: 'POST',
          headers,
          body: options.body(),
        })
          .then(async (response) => {
            const text = await response.text();
            if (response.status !== okStatus) failure ??= new Error(`answered ${response.status}: ${text}`);
          })
          .catch((error: unknown) => {
            failure ??= error instanceof Error ? error : new Error(String(error));
          })
          .finally(() => inFlight.delete(request));
        inFlight.add(request);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await Promise.all(inFlight);
  })();
  return {
    get sent() {
      return sent;
    },
    async stop() {
      stopping = true;
      await done;
      if (failure !== undefined) throw failure;
      return sent / ((performance.now() - startedAt) / 1000);
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// wrk (Debian's package) with a Lua script that builds every request itself: the issue-11 workload
// (workload.ts) with random uuid v4 / v7 / sequential external ids. One wrk thread: it uses at most one
// core, and its own CPU time is reported (clarifications §7: the generator says what it costs).

export function wrkAvailable(): boolean {
  return spawnSync('wrk', ['--version'], { stdio: 'ignore' }).error === undefined;
}

export interface WrkOptions {
  url: string;
  path: string;
  headers: Record<string, string>;
  /** single: one event per request; batch: `batchSize` events; segment: a /v1/batch of `batchSize` track items. */
  shape: 'single' | 'batch' | 'segment';
  batchSize: number;
  ids: IdKind;
  /** Written into the segment body's writeKey. */
  writeKey?: string;
  connections: number;
  durationSeconds: number;
  /** Where to write the Lua script. */
  scriptPath: string;
}

export interface WrkResult extends LoadResult {
  /** CPU seconds wrk itself used (user + system), sampled from /proc just before it exited. */
  generatorCpuSeconds: number | undefined;
}

const lua = (text: string) => `[==[${text}]==]`;

function wrkScript(options: WrkOptions): string {
  const headers = Object.entries({ 'content-type': 'application/json', ...options.headers })
    .map(([name, value]) => `wrk.headers[ ${lua(name)} ] = ${lua(value)}`)
    .join('\n');
  const [p0, p1, p2, p3] = PROPERTIES_TEMPLATE.split('%s');
  return `-- generated by bench/load.ts
wrk.method = "POST"
wrk.path = ${lua(options.path)}
${headers}
local shape, size, ids = ${lua(options.shape)}, ${options.batchSize}, ${lua(options.ids)}
local random, format, concat, floor = math.random, string.format, table.concat, math.floor
local names = { ${EVENT_NAMES.map(([t, a]) => `{${lua(t)}, ${lua(a)}}`).join(', ')} }
local p0, p1, p2, p3 = ${lua(p0!)}, ${lua(p1!)}, ${lua(p2!)}, ${lua(p3!)}
local context = ${lua(SEGMENT_CONTEXT_JSON)}
local writeKey = ${lua(options.writeKey ?? '')}
local prefix = ""
local counter = 0

function init(args)
  local seed = tonumber(args[1]) or os.time()
  math.randomseed(seed)
  prefix = format("%08x", seed % 4294967296)
end

local function h16() return format("%04x", random(0, 65535)) end

local function uuid4()
  return format("%04x%04x-%04x-4%03x-%x%03x-%04x%04x%04x", random(0, 65535), random(0, 65535), random(0, 65535),
    random(0, 4095), random(8, 11), random(0, 4095), random(0, 65535), random(0, 65535), random(0, 65535))
end

local function uuid7()
  -- Seconds from the clock, the counter below them: ids grow from second to second, like a v7 generator's.
  local ms = os.time() * 1000 + counter % 1000
  return format("%08x-%04x-7%03x-%x%03x-%04x%04x%04x", floor(ms / 65536), ms % 65536, random(0, 4095),
    random(8, 11), random(0, 4095), random(0, 65535), random(0, 65535), random(0, 65535))
end

local function externalId()
  counter = counter + 1
  if ids == "random" then return uuid4() end
  if ids == "v7" then return uuid7() end
  return prefix .. "-" .. counter
end

local function properties()
  return p0 .. h16() .. h16() .. p1 .. h16() .. h16() .. p2 .. h16() .. h16() .. h16() .. h16() .. h16() .. h16() .. h16() .. h16() .. p3
end

local function event()
  local name = names[random(1, #names)]
  return format('{"event_type":"%s","action":"%s","subject_type":"user","subject_id":"user_%d","occurred_at":"${OCCURRED_AT}","external_id":"%s","properties":%s}',
    name[1], name[2], random(0, ${SUBJECTS - 1}), externalId(), properties())
end

local function segmentItem()
  return format('{"type":"track","event":"Project Created","userId":"user_%d","messageId":"node-next-%d-%s","timestamp":"${OCCURRED_AT}","properties":%s,"context":%s,"integrations":{},"_metadata":{"nodeVersion":"20.19.5","jsRuntime":"node"}}',
    random(0, ${SUBJECTS - 1}), os.time() * 1000, uuid4(), properties(), context)
end

function request()
  local body
  if shape == "single" then
    body = event()
  else
    local parts = {}
    local item = shape == "batch" and event or segmentItem
    for i = 1, size do parts[i] = item() end
    if shape == "batch" then
      body = '{"events":[' .. concat(parts, ",") .. ']}'
    else
      body = '{"batch":[' .. concat(parts, ",") .. '],"writeKey":"' .. writeKey .. '","sentAt":"${OCCURRED_AT}"}'
    end
  end
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99)))
end
`;
}

let runningWrk: ChildProcess | undefined;

/** Stops a wrk run in progress (Ctrl-C). */
export function stopWrk(): void {
  runningWrk?.kill('SIGTERM');
}

/** One wrk run; `okStatus` is only for the summary's status counts (wrk counts any non-2xx/3xx as a status error). */
export function runWrk(options: WrkOptions, okStatus: number): Promise<WrkResult> {
  writeFileSync(options.scriptPath, wrkScript(options));
  const seed = Math.floor(Math.random() * 2 ** 31);
  const child = spawn(
    'wrk',
    [
      '-t1',
      `-c${options.connections}`,
      `-d${options.durationSeconds}s`,
      '--timeout',
      '10s',
      '-s',
      options.scriptPath,
      options.url,
      '--',
      String(seed),
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  runningWrk = child;
  let out = '';
  let cpu: number | undefined;
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const sampler = setInterval(() => (cpu = cpuSeconds(child.pid) ?? cpu), 200);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => {
      clearInterval(sampler);
      runningWrk = undefined;
      const line = /WRKJSON (\{.*\})/.exec(out)?.[1];
      if (code !== 0 || line === undefined) {
        reject(new Error(`wrk exited with ${code}: ${out.slice(-2000)}`));
        return;
      }
      const r = JSON.parse(line) as Record<string, number>;
      const seconds = r.duration_us! / 1e6;
      const notOk = r.status!;
      const ok = r.requests! - notOk;
      resolve({
        seconds,
        ok,
        statusCounts: { [String(okStatus)]: ok, ...(notOk > 0 ? { 'non-2xx': notOk } : {}) },
        errors: r.connect! + r.read! + r.write!,
        timeouts: r.timeout!,
        requestsPerSecond: ok / seconds,
        p50Ms: r.p50_us! / 1000,
        p99Ms: r.p99_us! / 1000,
        generatorCpuSeconds: cpu,
      });
    });
  });
}
