/** A unit of sweep work and how to run it on a loaded trace (shared by the main thread and the workers). */
import { parsePolicySpec } from '@tiersync/policy';
import { invalid } from './errors.js';
import { runExact, type ExactJob, type ExactResult } from './exact.js';
import { runPlanned, type PlannedJob, type PlannedResult } from './planned.js';
import { runTiered, type TieredJob, type TieredResult } from './tiered.js';
import type { SimTrace } from './trace/types.js';

/** One simulation of a sweep. Plain data, so it can be posted to a worker. */
export type SweepJob = { readonly kind: 'exact'; readonly job: ExactJob } | { readonly kind: 'tiered'; readonly job: TieredJob } | { readonly kind: 'planned'; readonly job: PlannedJob };

/** The result of a {@link SweepJob}, tagged like it. */
export type SweepResult = { kind: 'exact'; result: ExactResult } | { kind: 'tiered'; result: TieredResult } | { kind: 'planned'; result: PlannedResult };

/**
 * The registry names of the policies `job` creates (wrappers left out: they are built in): what a thread must have
 * registered to run it.
 */
export function jobPolicies(job: SweepJob): string[] {
  let specs: readonly (string | undefined)[];
  if (job.kind === 'exact') specs = [job.job.policy];
  else if (job.kind === 'planned') specs = job.job.policy !== undefined ? [job.job.policy] : job.job.config.tiers.map((t) => t.policy);
  else specs = job.job.hierarchy ? job.job.hierarchy.planner.tiers.map((t) => t.policy) : [job.job.policy];
  return [...new Set(specs.map((s) => parsePolicySpec(s ?? 'lru').policy))];
}

/** Runs one job. @throws TierSyncError for bad jobs (tiered and planned modes need an LLM trace) */
export function runJob(trace: SimTrace, job: SweepJob): SweepResult {
  if (job.kind === 'exact') return { kind: 'exact', result: runExact(trace, job.job) };
  if (trace.kind !== 'llm') throw invalid(`${job.kind} simulation needs a request trace (mooncake, azure, multi-round-qa); ${trace.source} is an object trace`);
  if (job.kind === 'planned') return { kind: 'planned', result: runPlanned(trace, job.job) };
  return { kind: 'tiered', result: runTiered(trace, job.job) };
}
