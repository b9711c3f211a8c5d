import { beforeAll, describe, expect, it } from 'vitest';
import { runS3Faults } from '../packages/devtools/src/reliability/object-faults.js';
import { runRedisRestarts } from '../packages/devtools/src/reliability/redis-faults.js';
import { requireTools } from '../scripts/system-packages.mjs';

describe('reliability: remote services failing', () => {
  it('S3 answering 503, resetting and stalling: every call settles, acknowledged pages survive', async () => {
    const r = await runS3Faults({ operations: 120 });
    console.log(JSON.stringify(r));
    expect(r.faults).toBeGreaterThan(0);
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ lostDurablePages: 0, corruptPagesServed: 0, hangs: 0, failures: 0 });
  }, 300_000);
});

describe('reliability: Redis under the daemons', () => {
  beforeAll(() => requireTools(['redis-server']));
  it('Redis killed and restarted: lookups keep answering, the registry re-registers every time', async () => {
    const r = await runRedisRestarts({ cycles: Number(process.env.TIERSYNC_REDIS_CYCLES ?? 3) });
    console.log(JSON.stringify(r));
    expect(r.notes).toEqual([]);
    expect(r).toMatchObject({ hangs: 0, failures: 0 });
    expect(r.faults).toBeGreaterThan(0);
  }, 300_000);
});
