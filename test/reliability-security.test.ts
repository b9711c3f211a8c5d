import { describe, expect, it } from 'vitest';
import { runSecurity } from '../packages/devtools/src/reliability/security.js';

describe('reliability: security', () => {
  it('refuses wrong peer secrets, hostile page keys, cross-tenant access, wrong tokens and unauthenticated RESP', async () => {
    const r = await runSecurity();
    console.log(JSON.stringify(r));
    expect(r.notes).toEqual([]);
    expect(r.failures).toBe(0);
    expect(r.faults).toBe(r.runs - 1); // every attempt refused; one is the right-secret round trip
  }, 120_000);
});
