import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from './index.js';

/** Runs the development CLI in this process; returns its exit code and what it printed. */
async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  const code = await main(argv);
  vi.restoreAllMocks();
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('the development CLI (pnpm tiersync)', () => {
  afterEach(() => vi.restoreAllMocks());

  it("is core's CLI with bench added", async () => {
    const help = await cli('--help');
    expect(help.code).toBe(0);
    for (const name of ['bench', 'demo', 'doctor', 'serve', 'sim', 'version']) expect(help.out).toMatch(new RegExp(`^\\s+${name}\\s`, 'm'));
    expect((await cli('bench', '--help')).out).toContain('Usage: tiersync bench <suite>');
    expect((await cli('version', '--json')).code).toBe(0);
  });

  it('bench refuses an unknown suite and a bad size with the usual exit codes', async () => {
    const unknown = await cli('bench', 'no-such-suite');
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain("unknown suite 'no-such-suite'");
    expect(unknown.err).toContain('Usage: tiersync bench <suite>');
    // Under --json the same refusal is one error object on stdout, with the same exit code.
    const json = await cli('bench', 'no-such-suite', '--json');
    expect(json.code).toBe(2);
    expect(JSON.parse(json.out)).toEqual({ error: { code: 'ERR_INVALID_ARGUMENT', message: "unknown suite 'no-such-suite'" } });
    const bad = await cli('bench', 'index', '--pages', 'lots', '--json');
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.out).error).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining('--pages') });
  });
});
