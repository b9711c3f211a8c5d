/**
 * Sim/live parity: the same hierarchy config and trace replayed through the live TierSync with real bytes
 * (replay/live-replay.ts) and through the planner by counting (sim/planned.ts) must give identical counters. One
 * cell = one policy x one capacity setting x one write mode, on a three-tier hierarchy (sim HBM, host RAM, an fs
 * folder). Used by the parity test and by `tiersync bench sim` (`parity: {cells, identical}`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ORACLE_POLICIES, policyNames } from '@tiersync/policy';
import { parseConfig, type ResolvedConfig } from '../hierarchy/index.js';
import { bundledTrace, counterDifferences, readMooncake, replayPlanned, workloadPages, type ReplayCounters, type Workload } from '../sim/index.js';
import { replayLive } from './live-replay.js';

/** Tier capacities of one cell, in pages. */
export interface ParityCapacity {
  label: string;
  hbm: number;
  host: number;
  fs: number;
}

/**
 * Three settings on the conversation trace's first requests: everything spills to fs and fs evicts too (tight),
 * HBM and host evict while fs holds the rest (middle), only HBM is under pressure (roomy).
 */
export const PARITY_CAPACITIES: readonly ParityCapacity[] = [
  { label: 'tight', hbm: 32, host: 64, fs: 192 },
  { label: 'middle', hbm: 64, host: 160, fs: 4096 },
  { label: 'roomy', hbm: 160, host: 4096, fs: 4096 },
];

/** Layout of the parity runs: 512-token pages (one per Mooncake block) of 16 KiB, so bytes move quickly. */
export const PARITY_LAYOUT = { tokensPerPage: 512, dtype: 'bf16', groups: [{ name: 'full', layers: 1, attention: { type: 'mha', kvHeads: 1, headDim: 8 } }] };
const PAGE_BYTES = 512 * 2 * 8 * 2;

export type ParityWriteMode = 'write-through' | 'write-back';

/** The hierarchy of one cell; its fs tier lives in `dir`. */
export function parityConfig(policy: string, capacity: ParityCapacity, writeMode: ParityWriteMode, dir: string): ResolvedConfig {
  return parseConfig({
    model: 'tiersync-parity/tiny@1',
    layout: PARITY_LAYOUT,
    tiers: [
      { url: `hbm://sim?capacity=${capacity.hbm * PAGE_BYTES}`, name: 'hbm', policy, highWatermark: 0.95, lowWatermark: 0.8 },
      { url: `host://?capacity=${capacity.host * PAGE_BYTES}`, name: 'host', policy, writeMode, highWatermark: 0.95, lowWatermark: 0.8 },
      // fs slots carry a header each, so the tier holds a few pages less than `fs` (the live count is used).
      { url: `fs://${dir}/fs?capacity=${capacity.fs * PAGE_BYTES}&preallocate=false`, name: 'fs', policy, writeMode },
    ],
  });
}

/** One cell's outcome. */
export interface ParityCell {
  policy: string;
  capacity: string;
  writeMode: ParityWriteMode;
  identical: boolean;
  /** Fields that differ, `field: live vs sim`. */
  differences: string[];
  live: ReplayCounters;
  sim: ReplayCounters;
}

/** Options of {@link runParity}. */
export interface ParityOptions {
  /** Requests of the conversation trace to replay. Default 60. */
  requests?: number;
  /** Default every registered policy. */
  policies?: readonly string[];
  capacities?: readonly ParityCapacity[];
  writeModes?: readonly ParityWriteMode[];
  /** Scratch folder for the fs tiers. Default a temporary folder (on /dev/shm when present: fsyncs are free). */
  dir?: string;
  log?: (line: string) => void;
}

/** The parity summary `tiersync bench sim --json` reports. */
export interface ParityReport {
  requests: number;
  cells: number;
  identical: number;
  results: ParityCell[];
}

function scratch(): string {
  const base = process.platform === 'linux' ? '/dev/shm' : os.tmpdir();
  try {
    return mkdtempSync(path.join(base, 'tiersync-parity-'));
  } catch {
    return mkdtempSync(path.join(os.tmpdir(), 'tiersync-parity-'));
  }
}

/** Replays one cell both ways. */
export async function parityCell(workload: Workload, policy: string, capacity: ParityCapacity, writeMode: ParityWriteMode, dir: string): Promise<ParityCell> {
  const cellDir = mkdtempSync(path.join(dir, `${policy}-${capacity.label}-${writeMode}-`));
  try {
    const config = parityConfig(policy, capacity, writeMode, cellDir);
    const live = await replayLive({ config, workload });
    // The simulator gets the pages each opened driver reports: an fs tier's slot count depends on its on-disk
    // geometry, which only the driver knows (the decisions compared here are the planner's, not the URL parser's).
    const sim = replayPlanned({ config, workload, capacityPages: live.tiers.map((t) => t.capacityPages) }).counters;
    const differences = counterDifferences(live.counters, sim);
    return { policy, capacity: capacity.label, writeMode, identical: differences.length === 0, differences, live: live.counters, sim };
  } finally {
    rmSync(cellDir, { recursive: true, force: true });
  }
}

/** Runs every cell: policies x capacities x write modes. */
export async function runParity(options: ParityOptions = {}): Promise<ParityReport> {
  const requests = options.requests ?? 60;
  const workload = workloadPages(readMooncake(bundledTrace()), PARITY_LAYOUT.tokensPerPage, requests);
  const dir = options.dir ?? scratch();
  const results: ParityCell[] = [];
  try {
    // Oracle policies (opt, opt-size) need the trace's future: a live tier refuses them, so there is nothing to compare.
    for (const policy of options.policies ?? policyNames().filter((p) => !ORACLE_POLICIES.includes(p))) {
      for (const capacity of options.capacities ?? PARITY_CAPACITIES) {
        for (const writeMode of options.writeModes ?? (['write-through', 'write-back'] as const)) {
          const cell = await parityCell(workload, policy, capacity, writeMode, dir);
          options.log?.(`parity ${policy} ${capacity.label} ${writeMode}: ${cell.identical ? 'identical' : cell.differences.join('; ')}`);
          results.push(cell);
        }
      }
    }
  } finally {
    if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  }
  return { requests, cells: results.length, identical: results.filter((c) => c.identical).length, results };
}
