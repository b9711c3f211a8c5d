/**
 * Trace replay through the live hierarchy: `replayLive` drives a TierSync with real bytes as an inference engine
 * would (the engine of `tiersync demo`), and `runParity` replays the same requests through the simulator's planner
 * by counting and compares every counter (sim/live parity). Kept out of `@tiersync/core/sim`, which stays free of the
 * native addon and the index.
 */
export { replayLive, fillPage, pageMatches, type LiveReplayOptions, type LiveReplayResult } from './live-replay.js';
export {
  PARITY_CAPACITIES, PARITY_LAYOUT, parityCell, parityConfig, runParity,
  type ParityCapacity, type ParityCell, type ParityOptions, type ParityReport, type ParityWriteMode,
} from './parity.js';
