import { describe, expect, it } from 'vitest';
import { runSoak } from '../packages/devtools/src/reliability/soak.js';

// 1,000 concurrent sessions for 2 minutes in CI (the benchmark run: 10 minutes,
// `tiersync bench reliability --scenarios soak`).
const SECONDS = Number(process.env.TIERSYNC_SOAK_SECONDS ?? 120);

describe('reliability: daemon soak', () => {
  it(`1,000 concurrent sessions store, look up, load and delete for ${SECONDS} s: no errors, no corrupt pages, bounded RSS`, async () => {
    const r = await runSoak({ sessions: 1000, seconds: SECONDS, log: (l) => console.log(l) });
    console.log(JSON.stringify(r));
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ corruptPagesServed: 0, hangs: 0, failures: 0 });
    expect(Number(r.details.loaded)).toBeGreaterThan(0);
    // Bounded RSS: the end of the run stays within 5% of the first half's high (a leak climbs past it).
    expect(Number(r.details.rssOverFirstHalfPeakPct)).toBeLessThan(5);
  }, (SECONDS + 120) * 1000);
});
