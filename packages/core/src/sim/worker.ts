/**
 * Sweep worker thread: imports the policy modules it is given, loads the trace once (from the plain-data source in
 * `workerData`), says which policies it has (`{ ready: names }`), then runs each job it is sent and posts the
 * result back. Errors travel as `{ message, code }` so the main thread rethrows a
 * TierSyncError with the same code (`{ message }` alone for an untyped error, rethrown untyped).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { TierSyncError } from '@tiersync/native/errors';
import { policyNames } from '@tiersync/policy';
import { runJob, type SweepJob } from './jobs.js';
import { loadTrace, type TraceSource } from './trace/index.js';

interface Request {
  index: number;
  job: SweepJob;
}

const port = parentPort;
if (port) {
  const data = workerData as { source: TraceSource; policyModules?: readonly string[] };
  let trace: ReturnType<typeof loadTrace> | undefined;
  let loadError: unknown;
  try {
    // Custom policies first (file URLs, already loaded once by the calling thread), then the trace.
    for (const url of data.policyModules ?? []) await import(url);
    trace = loadTrace(data.source);
  } catch (e) {
    loadError = e;
  }
  // The policies this thread has: the calling thread keeps the jobs naming others.
  port.postMessage({ ready: policyNames() });
  port.on('message', (msg: Request | 'exit') => {
    if (msg === 'exit') {
      port.close();
      return;
    }
    try {
      if (trace === undefined) throw loadError;
      port.postMessage({ index: msg.index, result: runJob(trace, msg.job) });
    } catch (e) {
      // Only a TierSyncError's code travels: any other error (a Node error's code is not one of ours) stays untyped,
      // so the caller sees what running on its own thread would give.
      const message = e instanceof Error ? e.message : String(e);
      port.postMessage({ index: msg.index, error: e instanceof TierSyncError ? { message, code: e.code } : { message } });
    }
  });
}
