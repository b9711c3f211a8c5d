// examples/disaggregated run small (three processes: prefill, the decode host's daemon, decode): every page the
// prefill computed arrives in the decode process's device memory with the same CRC32C, and the report carries
// the hand-off time beside the raw-TCP baseline of the same run.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const here = path.dirname(fileURLToPath(import.meta.url));
const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };

describe('examples/disaggregated', () => {
  it('hands a context from prefill to decode over the peer tier, bytes exact', async () => {
    const child = spawn(
      process.execPath,
      ['--conditions=source', '--import', path.join(here, 'daemon-source-hooks.mjs'), path.join(here, '../examples/disaggregated/run.mjs'), '--tokens', '1024', '--reps', '2', '--chunk-pages', '8', '--layout', JSON.stringify(layout), '--json'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => {
      const t = setTimeout(() => child.kill('SIGKILL'), 110_000);
      child.on('exit', (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    expect(code, err).toBe(0);
    const report = JSON.parse(out.trim().split('\n').pop()!) as Record<string, number | boolean>;
    expect(report).toMatchObject({ tokens: 1024, pages: 64, pageBytes: 16 * 1024, bytes: 64 * 16 * 1024, reps: 2, bytesVerified: true });
    expect(report.handoffMs).toBeGreaterThan(0);
    expect(report.tcpBaselineMs).toBeGreaterThan(0);
    expect(report.sequentialHandoffMs).toBeGreaterThan(0);
    expect(report.ratio).toBeCloseTo((report.handoffMs as number) / (report.tcpBaselineMs as number), 6);
  }, 120_000);
});
