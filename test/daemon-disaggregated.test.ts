// examples/disaggregated run small (three processes: prefill, the decode host's daemon, decode): every page the
// prefill computed arrives in the decode process's device memory with the same CRC32C, and the report carries
// the hand-off time beside the raw-TCP baseline of the same run.
import { describe, expect, it } from 'vitest';
import { runExample } from './daemon-helpers.js';

const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };

describe('examples/disaggregated', () => {
  it('hands a context from prefill to decode over the peer tier, bytes exact', async () => {
    const { code, stdout: out, stderr } = await runExample('disaggregated/run.mjs', ['--tokens', '1024', '--reps', '2', '--chunk-pages', '8', '--layout', JSON.stringify(layout), '--json'], 110_000);
    expect(code, stderr).toBe(0);
    const report = JSON.parse(out.trim().split('\n').pop()!) as Record<string, number | boolean>;
    expect(report).toMatchObject({ tokens: 1024, pages: 64, pageBytes: 16 * 1024, bytes: 64 * 16 * 1024, reps: 2, bytesVerified: true });
    expect(report.handoffMs).toBeGreaterThan(0);
    expect(report.tcpBaselineMs).toBeGreaterThan(0);
    expect(report.sequentialHandoffMs).toBeGreaterThan(0);
    expect(report.ratio).toBeCloseTo((report.handoffMs as number) / (report.tcpBaselineMs as number), 6);
  }, 120_000);
});
