import { afterAll, describe, expect, it } from 'vitest';
import { TransferEngine } from '@tiersync/native';
import { fuzzDescriptors, fuzzHierarchyConfig, fuzzLayout, fuzzPeerFrames, fuzzResp, fuzzServerConfig, fuzzTierUrls } from '../packages/devtools/src/reliability/fuzz.js';
import type { ScenarioResult } from '../packages/devtools/src/reliability/report.js';

// CI runs a few thousand cases per target; the benchmark run 100,000 (`tiersync bench reliability --scenarios fuzz`).
const CASES = Number(process.env.TIERSYNC_FUZZ_CASES ?? 3000);
const engine = new TransferEngine({ threads: 2 });
afterAll(() => engine.close());

function expectClean(r: ScenarioResult) {
  expect(r.notes).toEqual([]);
  expect(r.failures).toBe(0);
  expect(r.runs).toBe(CASES);
  // Each target must have seen both outcomes, or the generator is not reaching the parser's corners.
  expect(r.faults).toBeGreaterThan(0);
}

describe('reliability: fuzzing (fast-check)', () => {
  it('hierarchy config: parses or ERR_CONFIG', () => expectClean(fuzzHierarchyConfig({ cases: CASES })));
  it('daemon config: parses or ERR_CONFIG', () => expectClean(fuzzServerConfig({ cases: CASES })));
  it('KV layout: parses or a typed error', () => expectClean(fuzzLayout({ cases: CASES })));
  it('tier URLs: a driver or ERR_CONFIG', () => expectClean(fuzzTierUrls(engine, { cases: CASES })));
  it('peer frames: round trip, or ERR_PROTOCOL for damage', () => expectClean(fuzzPeerFrames({ cases: CASES })));
  it('RESP parser: round trip, or ERR_PROTOCOL for damage', () => expectClean(fuzzResp({ cases: CASES })));
  it('native descriptors: exact copies or typed refusals, never out-of-range access', async () => expectClean(await fuzzDescriptors(engine, { cases: CASES })));
});
