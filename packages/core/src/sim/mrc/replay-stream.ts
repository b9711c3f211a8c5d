/**
 * Exact mode over a streamed object trace: every job's policy advances chunk by chunk in one pass over the file,
 * so a trace of any length replays in the memory of its policies (plus the reader's few MiB and the id map), and
 * the file is read and decoded once for the whole sweep. Counts are those of {@link runExact} on the loaded trace
 * (same loop, `replayObjects`, same dense ids).
 */
import { replayObjects, row, type ExactJob, type ExactResult } from '../exact.js';
import { policyFailure } from '../errors.js';
import { makePolicy } from '../policies.js';
import type { ObjectStream } from '../trace/index.js';
import type { ObjectTrace } from '../trace/types.js';

/** Dense-key bound of streamed replays: ids are dense but their count is known only at the end (the map grows). */
const STREAM_DENSE_BOUND = 1 << 30;

/**
 * Replays `stream` through every job in one pass; results in job order.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a bad job or malformed trace, or a policy that fails
 */
export function runExactStream(stream: ObjectStream, jobs: readonly ExactJob[]): ExactResult[] {
  try {
    return replayStream(stream, jobs);
  } catch (e) {
    throw policyFailure(e, 'ERR_INVALID_ARGUMENT');
  }
}

function replayStream(stream: ObjectStream, jobs: readonly ExactJob[]): ExactResult[] {
  const runs = jobs.map((job) => ({
    job,
    policy: makePolicy(job.policy, job.capacity, job.unit, { denseKeyBound: STREAM_DENSE_BOUND }),
    misses: 0,
    bytesRequested: 0,
    bytesMissed: 0,
  }));
  let requests = 0;
  for (const chunk of stream.chunks) {
    // replayObjects reads keys, sizes and length only.
    const view = chunk as unknown as ObjectTrace;
    for (const run of runs) {
      const r = replayObjects(run.policy, view);
      run.misses += r.misses;
      run.bytesRequested += r.bytesRequested;
      run.bytesMissed += r.bytesMissed;
    }
    requests += chunk.length;
  }
  return runs.map(({ job, misses, bytesRequested, bytesMissed }) => ({ ...row(job), requests, misses, bytesRequested, bytesMissed }));
}
