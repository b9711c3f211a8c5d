import { describe, expect, it } from 'vitest';
import { runCrashLoop } from '../packages/devtools/src/reliability/crash-loop.js';

// CI runs 20 kill cycles (the benchmark run: 200, `tiersync bench reliability --scenarios crash`).
const CYCLES = Number(process.env.TIERSYNC_CRASH_CYCLES ?? 20);

describe('reliability: SIGKILL during store, demote and write-through', () => {
  it(`after each of ${CYCLES} kills: the index opens, acknowledged pages load byte-exact, nothing corrupt is served, no slot leaks`, async () => {
    const r = await runCrashLoop({ cycles: CYCLES, seed: 20260, log: (l) => console.log(l) });
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ runs: CYCLES, faults: CYCLES, lostDurablePages: 0, corruptPagesServed: 0, hangs: 0, failures: 0 });
    // The journal must have acknowledged something, or the check proved nothing.
    expect(r.details.acknowledgedDurablePages).toBeGreaterThan(0);
    expect(r.details.leakedSlotsMax).toBe(0);
  }, 600_000);
});
