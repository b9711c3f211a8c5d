import { beforeAll, describe, expect, it } from 'vitest';
import { canUseNetns, runPeerFaults } from '../packages/core/src/reliability/network-faults.js';
import type { ScenarioResult } from '../packages/core/src/reliability/report.js';

describe.skipIf(!canUseNetns())('reliability: peer link cut and peer host killed mid-transfer (root, netns)', () => {
  let r: ScenarioResult;
  beforeAll(async () => {
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
