import { describe, expect, it } from 'vitest';
import { runBitRot, runDiskFull, runIoErrors, runStalledTier } from '../packages/devtools/src/reliability/disk-faults.js';
import type { ScenarioResult } from '../packages/devtools/src/reliability/report.js';

// Each scenario ends every operation in a defined outcome: a fallback (pages reported missing), a typed error, or
// success; never a hang, an untyped error, a corrupt page, or the loss of a page that had a ready fs copy.
function expectClean(r: ScenarioResult) {
  expect(r.notes).toEqual([]);
  expect(r).toMatchObject({ lostDurablePages: 0, corruptPagesServed: 0, hangs: 0, failures: 0 });
}

describe('reliability: storage faults', () => {
  it('fs I/O errors injected through the fault tier', async () => {
    const r = await runIoErrors({ operations: 150 });
    console.log(JSON.stringify(r));
    expect(r.faults).toBeGreaterThan(0);
    expectClean(r);
    expect(r.details.leakedSlots).toBe(0);
  });

  it('bytes flipped on disk are detected and never served', async () => {
    const r = await runBitRot({ operations: 150 });
    console.log(JSON.stringify(r));
    expect(r.faults).toBeGreaterThan(0);
    expect(r.details.checksumFailuresDetected).toBeGreaterThan(0);
    expectClean(r);
  });

  // A full disk is made with a small tmpfs mount, which needs root; elsewhere the test is skipped, with the reason.
  it.skipIf(process.getuid?.() !== 0)('a full disk under the fs tier (needs root: mounts a small tmpfs)', async () => {
    const r = await runDiskFull({ operations: 150 });
    console.log(JSON.stringify(r));
    expect(r.details.skipped).toBeUndefined();
    expect(r.faults).toBeGreaterThan(0);
    expectClean(r);
  });

  it('a load from a tier whose reads stall settles by its deadline and falls back to recompute', async () => {
    const r = await runStalledTier({ loads: 2, deadlineMs: 5_000 });
    expectClean(r);
    expect(r.details.fellBackToRecompute).toBeGreaterThan(0);
  });
});
