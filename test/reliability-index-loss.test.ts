import { describe, expect, it } from 'vitest';
import { runIndexLoss } from '../packages/devtools/src/reliability/index-loss.js';

// `tiersync bench reliability --scenarios index-loss` runs 20 cycles; CI runs 5.
const CYCLES = Number(process.env.TIERSYNC_INDEX_LOSS_CYCLES ?? 5);

describe('reliability: the index is rebuilt from the tiers', () => {
  it(`after each of ${CYCLES} kills and index deletions: every acknowledged durable page is found, by key and by prefix, and loads byte-exact; ':memory:' twice keeps them`, async () => {
    const r = await runIndexLoss({ cycles: CYCLES, seed: 7, log: (l) => console.log(l) });
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ runs: CYCLES + 2, faults: 2 * CYCLES, lostDurablePages: 0, corruptPagesServed: 0, hangs: 0, failures: 0 });
    expect(r.details.acknowledgedDurablePages).toBeGreaterThan(0);
    expect(r.details.memoryIndexReopens).toBe(2);
    // The store path records namespace, parent and position with each page: every chain comes back whole.
    expect(r.details.pagesAdoptedWithoutChain).toBe(0);
    expect(r.details.pagesWithRecoveredParentAndPosition).toBe(r.details.acknowledgedDurablePages);
  }, 600_000);
});
