/**
 * The sandbox's thread (started by sandbox.ts): holds the compiled functions and runs them one request at a
 * time. It tells the host, through shared memory, when user code started on which item, so that the host can
 * end this thread when a call outlives its limit inside one long built-in, where QuickJS does not stop it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { QuickJsFunction, type FunctionLimits } from './quickjs-function.js';
import type { WorkerReply, WorkerRequest } from './sandbox.js';

const port = parentPort!;
const { progress: progressBuffer, limits } = workerData as { progress: SharedArrayBuffer; limits: FunctionLimits };
/** [0]: when user code started on the current item (ms since the epoch; 0 when none runs), [1]: request id, [2]: item. */
const progress = new Float64Array(progressBuffer);
const functions = new Map<number, QuickJsFunction>();

let request = 0;
function watch(item: number | null): void {
  if (item === null) {
    progress[0] = 0;
    return;
  }
  progress[1] = request;
  progress[2] = item;
  progress[0] = performance.timeOrigin + performance.now();
}

async function handle(message: WorkerRequest): Promise<WorkerReply | undefined> {
  request = message.id;
  if (message.type === 'compile') {
    const { outcome, fn } = await QuickJsFunction.compile(message.source, limits, watch);
    if (fn) functions.set(message.fn, fn);
    return { id: message.id, type: 'compiled', outcome };
  }
  if (message.type === 'run') {
    const fn = functions.get(message.fn);
    if (!fn) return { id: message.id, type: 'ran', chunks: [{ error: 'the function is not compiled' }] };
    return { id: message.id, type: 'ran', chunks: await fn.run(message.docs, message.meta, message.count) };
  }
  functions.get(message.fn)?.dispose();
  functions.delete(message.fn);
  return undefined;
}

// One request at a time, in order: the shared progress describes one call.
let queue = Promise.resolve();
port.on('message', (message: WorkerRequest) => {
  queue = queue.then(async () => {
    let reply: WorkerReply | undefined;
    try {
      reply = await handle(message);
    } catch (error) {
      reply = { id: message.id, type: 'failed', message: (error as Error).message };
    }
    if (reply) port.postMessage(reply);
  });
});
