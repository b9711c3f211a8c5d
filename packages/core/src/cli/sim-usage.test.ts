import { afterEach, describe, expect, it, vi } from 'vitest';
import { bundledTrace } from '../sim/index.js';
import { main } from './main.js';
import { planSim, simCommand } from './sim.js';

const trace = bundledTrace();

/** Runs `tiersync sim ARGS` through the CLI's dispatcher: exit code, stdout and stderr. */
async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
  const code = await main(['sim', ...args]);
  return { code, out: out.join('\n'), err: err.join('\n') };
}
afterEach(() => vi.restoreAllMocks());

describe('tiersync sim: a command line it cannot read is a usage error (exit 2, usage printed)', () => {
  const cases: Array<[string[], RegExp]> = [
    [[], /--trace FILE \(or --workload multi-round-qa\) is required/],
    [['--trace', trace, '--objects', '100', '--capacity', '1GiB'], /exactly one of --capacity LIST \(bytes\) or --objects LIST/],
    [['--trace', 'X', '--workload', 'multi-round-qa'], /either --trace or --workload/],
    [['--trace', 'X', '--format', 'bogus'], /--format must be one of/],
    [['--trace', 'X', '--mrc', '--model', 'llama-3-8b'], /--mrc goes with exact mode/],
    [['--trace', 'X', '--mrc-points', '4'], /--mrc-points goes with --mrc/],
    // Options that would be silently ignored are refused as conflicting.
    [['--trace', trace, '--objects', '10', '--host', '1TiB'], /--host goes with --model/],
    [['--trace', trace, '--model', 'llama-3-8b', '--objects', '10'], /--objects goes with exact mode/],
    [['--trace', trace, '--model', 'llama-3-8b', '--capacity', '1GiB'], /--capacity goes with exact mode/],
    [['--workload', 'multi-round-qa', '--format', 'csv', '--objects', '10'], /--format does not go with --workload/],
    [['--trace', trace, '--users', '4', '--objects', '10'], /--users goes with --workload/],
    [['--trace', trace, '--seed', '4', '--objects', '10'], /--seed goes with Azure traces/],
    [['--trace', trace, '--mrc', '--no-bound'], /--no-bound does not go with --mrc/],
    // Counts are whole; a capacity listed twice is refused (not deduplicated: more likely a typo).
    [['--trace', trace, '--objects', '1.5'], /--objects: a count is a whole number of objects, got '1\.5'/],
    [['--trace', trace, '--objects', '100,100'], /--objects lists the same capacity twice \('100' and '100'\)/],
    [['--trace', trace, '--capacity', '1GiB,1024MiB'], /--capacity lists the same capacity twice/],
    [['--trace', trace, '--mrc', '--objects', '10,10'], /--objects lists the same capacity twice/],
    [['--trace', trace, '--model', 'llama-3-8b', '--host', '0,1TiB,1TiB'], /--host lists the same capacity twice/],
    [['--trace', trace, '--objects', '10', '--threads', '0'], /--threads must be an integer >= 1/],
  ];
  it.each(cases)('sim %j', async (args, message) => {
    const { code, err } = await cli([...args, '--quiet']);
    expect(code).toBe(2);
    expect(err).toMatch(message);
    expect(err).toContain('(ERR_INVALID_ARGUMENT)');
    expect(err).toContain(simCommand.usage);
  });

  it('with --json: one {"error":...} object on stdout, exit 2', async () => {
    const { code, out } = await cli(['--trace', 'X', '--format', 'bogus', '--json']);
    expect(code).toBe(2);
    expect(JSON.parse(out)).toEqual({ error: { code: 'ERR_INVALID_ARGUMENT', message: "--format must be one of mooncake, azure, oracleGeneral, csv, got 'bogus'" } });
  });

  it('counts take decimal suffixes when the result is whole', () => {
    const caps = (objects: string) => planSim(['--trace', trace, '--objects', objects, '--no-bound']).plan.jobs.map((j) => j.kind === 'exact' && j.job.capacity);
    expect(caps('1.5k,1.1k,2M,inf')).toEqual([1500, 1100, 2_000_000, Infinity]);
    expect(() => planSim(['--trace', trace, '--objects', '1.0005k'])).toThrow(/whole number/);
  });

  it('a config file that cannot be read stays an error of the file (exit 1), not of the command line', async () => {
    const { code, err } = await cli(['--config', '/nonexistent/tiersync.yaml']);
    expect(code).toBe(1);
    expect(err).not.toContain('Usage:');
  });
});

describe('tiersync sim: a capacity a policy refuses is left out, not the whole sweep', () => {
  it('runs the other points and names the refused one with its reason (text and --json)', async () => {
    const args = ['--trace', trace, '--requests', '2000', '--policy', 'lru,s3fifo', '--objects', '1,100', '--quiet', '--threads', '1'];
    const text = await cli(args);
    expect(text.code).toBe(0);
    const lines = text.out.split('\n');
    expect(lines.filter((l) => /^(lru|s3fifo|opt) /.test(l)).map((l) => l.split(/\s+/).slice(0, 2).join(' '))).toEqual(['lru 1', 'lru 100', 's3fifo 100', 'opt 1', 'opt 100']);
    expect(lines.at(-2)).toBe('left out (the policy refuses the capacity):');
    expect(lines.at(-1)).toMatch(/^ {2}s3fifo +1 {2}.*S3-FIFO.*needs at least 2$/);
    const json = await cli([...args, '--json']);
    const { results, skipped } = JSON.parse(json.out) as { results: Array<{ policy: string; capacityObjects: number }>; skipped: Array<{ policy: string; unit: string; capacity: number; reason: string }> };
    expect(results.map((r) => `${r.policy} ${r.capacityObjects}`)).toEqual(['lru 1', 'lru 100', 's3fifo 100', 'opt 1', 'opt 100']);
    expect(skipped).toEqual([{ policy: 's3fifo', unit: 'objects', capacity: 1, reason: expect.stringMatching(/S3-FIFO.*needs at least 2/) }]);
  });

  it('refuses the command line when no point can run', () => {
    expect(() => planSim(['--trace', trace, '--policy', 's3fifo', '--objects', '1', '--no-bound'])).toThrow(/no policy takes any of these capacities: s3fifo at 1/);
  });
});

describe('tiersync sim: the exact-mode table', () => {
  it('keeps its columns aligned under long policy names', async () => {
    const r = await cli(['--trace', trace, '--policy', 'fifo,prefix-aware:fifo', '--objects', '1000', '--no-bound', '--quiet']);
    expect(r.code).toBe(0);
    const lines = r.out.split('\n').filter((l) => /^(policy|fifo|prefix-aware:fifo) /.test(l));
    expect(lines).toHaveLength(3);
    // Every column ends where the header's does.
    const ends = (l: string) => [...l.matchAll(/\S+/g)].map((m) => m.index! + m[0].length);
    for (const l of lines.slice(1)) expect(ends(l).slice(1, 5)).toEqual(ends(lines[0]!).slice(1, 5));
  });
});
