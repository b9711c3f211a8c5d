/**
 * The offline capacity simulator (`tiersync sim`) as a library: trace readers and the multi-round QA generator,
 * exact-mode replay, replay of a hierarchy config through the planner by counting (the live hierarchy's decisions),
 * the tiered TTFT model with its presets, sweeps on worker threads, and the CSV/HTML reports.
 * Intended as the `@tiersync/core/sim` subpath export.
 */
export { loadTrace, firstRequests, guessFormat, checkFormat, streamObjects, isObjectSource, type TraceSource, type ObjectStream, type ObjectChunk } from './trace/index.js';
export { missRatioCurves, mrcCsv, logGrid, StackDistance, runExactStream, chunkOpener, traceChunks, type MrcResult, type MrcCurve, type MrcOptions, type MrcPoint } from './mrc/index.js';
export type { SimTrace, LlmTrace, ObjectTrace, LlmRequest, TraceFormat } from './trace/types.js';
export { readMooncake, parseMooncake, type MooncakeOptions } from './trace/mooncake.js';
export { readAzure, parseAzure, type AzurePrefixOptions } from './trace/azure.js';
export { readOracleGeneral, parseOracleGeneral, readOracleCsv, parseOracleCsv, encodeOracleGeneral } from './trace/oracle-general.js';
export { generateMultiRoundQa, type MultiRoundQaOptions } from './trace/multi-round-qa.js';
export { runExact, replayObjects, replayPages, replayObjectsOracle, replayPagesOracle, nextAccesses, denseKeyBound, type ExactJob, type ExactResult } from './exact.js';
export { runTiered, type TierConfig, type TieredJob, type TieredResult, type TierResult } from './tiered.js';
export { ACCELERATORS, STORAGE, MODELS, kvBytesPerToken, accelerator, storage, model, type AcceleratorSpec, type StorageSpec, type ModelShape } from './model/presets.js';
export { computeSpec, prefillSeconds, loadSeconds, combine, noCacheSeconds, defaultHbmKvBytes, type ComputeSpec } from './model/ttft.js';
export { loadPolicyModules, runSweep, type SweepOptions } from './sweep.js';
export type { SweepJob, SweepResult } from './jobs.js';
export { progressBar, silentProgress, type Progress } from './progress.js';
export { renderHtml, type ReportInput } from './report/html.js';
export { exactCsv, tieredCsv } from './report/csv.js';
export { parseSize, parseBytes, parseCount, parseList, formatSize, round } from './units.js';
export { makePolicy, capacityRefusal, checkPolicies, boundPolicy, isOracle, isChainAware, refuseLiveOracle, checkTierPolicy, withBound, UNBOUNDED, type MakePolicyOptions } from './policies.js';
export { bundledTrace } from './trace/bundled.js';
export { emptyCounters, countersLine, counterDifferences, type ReplayCounters, type TierCounters } from './counters.js';
export { simHierarchy, configLayout, UNLIMITED_PAGES, type SimHierarchy, type SimTier } from './hierarchy.js';
export { retentionHints, checkRetentionModel, type RetentionModel, type RequestRetention } from './retention.js';
export { CountingHierarchy, chainParents, replayPlanned, runPlanned, type PlannedReplayOptions, type PlannedReplayResult, type PlannedJob, type PlannedResult, type PageId } from './planned.js';
export { workloadPages, requestTokens, pagesPerBlock, type Workload } from './workload.js';
