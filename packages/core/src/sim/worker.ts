/**
 * Sweep worker thread: loads the trace once (from the plain-data source in `workerData`), then runs each job it
 * is sent and posts the result back. Errors travel as `{ message, code }` so the main thread rethrows a
 * TierSyncError with the same code.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runJob, type SweepJob } from './jobs.js';
import { loadTrace, type TraceSource } from './trace/index.js';

interface Request {
  index: number;
  job: SweepJob;
}

const port = parentPort;
if (port) {
  let trace: ReturnType<typeof loadTrace> | undefined;
  let loadError: unknown;
  try {
    trace = loadTrace((workerData as { source: TraceSource }).source);
  } catch (e) {
    loadError = e;
  }
  port.on('message', (msg: Request | 'exit') => {
    if (msg === 'exit') {
      port.close();
      return;
    }
    try {
      if (trace === undefined) throw loadError;
      port.postMessage({ index: msg.index, result: runJob(trace, msg.job) });
    } catch (e) {
      const err = e as { message?: string; code?: string };
      port.postMessage({ index: msg.index, error: { message: err.message ?? String(e), code: err.code } });
    }
  });
}
