import { beforeAll, describe, expect, it } from 'vitest';
import { runPeerFaults } from '../packages/devtools/src/reliability/network-faults.js';
import type { ScenarioResult } from '../packages/devtools/src/reliability/report.js';
import { requireTools } from '../scripts/system-packages.mjs';

describe.skipIf(process.getuid?.() !== 0)('reliability: peer link cut and peer host killed mid-transfer (needs root: ip netns)', () => {
  let r: ScenarioResult;
  beforeAll(async () => {
    requireTools(['ip', 'tc']);
    r = await runPeerFaults({ trials: Number(process.env.TIERSYNC_PEER_TRIALS ?? 6), log: (l) => console.log(l) });
    console.log(JSON.stringify(r));
  }, 300_000);

  it('every load settles by its deadline: delivered byte-exact, reported missing, or a typed error', () => {
    expect(r.faults).toBeGreaterThan(0);
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ corruptPagesServed: 0, hangs: 0 });
  });

  it('a retry through the peer tier succeeds once the link is back or the host restarted', () => {
    expect(r.details.unrecovered ?? 0).toBe(0);
  });
});
