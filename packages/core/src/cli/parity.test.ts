/**
 * Sim and live agree: the bundled Mooncake conversation trace (its first requests) replayed through the live
 * TierSync with real bytes and through the planner by counting, for every built-in policy, three capacity
 * settings, and a three-tier hierarchy (sim HBM, host RAM, an fs folder) in write-through and in write-back, gives
 * identical counters. Also: `tiersync demo --config` and `tiersync sim --config` print the same last line.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { PARITY_CAPACITIES, parityConfig, runParity } from '../replay/index.js';
import { demoCommand } from './demo.js';
import { simCommand } from './sim.js';

const BUILTIN = ['lru', 'fifo', 'clock', 'lfu', 'arc', 's3fifo', 'sieve'];
const dir = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'tiersync-parity-test-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('sim/live parity', () => {
  it('every counter is identical, for every built-in policy x 3 capacities x write-through/write-back', async () => {
    const report = await runParity({ requests: 60, policies: BUILTIN, dir });
    expect(report.cells).toBe(BUILTIN.length * PARITY_CAPACITIES.length * 2);
    const differing = report.results.filter((c) => !c.identical).map((c) => `${c.policy}/${c.capacity}/${c.writeMode}: ${c.differences.join('; ')}`);
    expect(differing).toEqual([]);
    // The cells exercise what they claim to: pages are demoted, evicted on every tier, promoted and hit below HBM.
    const sum = (f: 'demotions' | 'evictions' | 'promotions' | 'hits', tier: number) => report.results.reduce((s, c) => s + c.live.tiers[tier]![f], 0);
    expect(sum('demotions', 0)).toBeGreaterThan(0);
    expect(sum('evictions', 2)).toBeGreaterThan(0);
    expect(sum('promotions', 0)).toBeGreaterThan(0);
    expect(sum('hits', 1) + sum('hits', 2)).toBeGreaterThan(0);
  }, 120_000);

  it('tiersync demo --config and tiersync sim --config print the same counters line', async () => {
    const file = path.join(dir, 'cell.json');
    // 'middle': the fs tier never fills, so its slot count (driver geometry) does not matter to the counters.
    const config = parityConfig('s3fifo', PARITY_CAPACITIES[1]!, 'write-back', '{tmp}');
    fs.writeFileSync(file, JSON.stringify({ ...config, index: { path: ':memory:' } }));
    const lines: string[] = [];
    const spy = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')));
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      expect(await demoCommand.run(['--config', file, '--requests', '40', '--json'])).toBe(0);
      const live = lines.at(-1)!;
      expect(await simCommand.run(['--config', file, '--requests', '40', '--json', '--quiet'])).toBe(0);
      expect(lines.at(-1)).toBe(live);
      expect(JSON.parse(live).counters.requests).toBe(40);
    } finally {
      spy.mockRestore();
      stderr.mockRestore();
    }
  }, 60_000);
});
