// examples/eviction-tuning and examples/capacity-planning run end to end from the sources, and what they report holds:
// Belady's OPT never misses more than an online policy, and the capacity-planning README's table of TTFT falls is
// the one the model computes (the table is that example's claim, so it must move when the model does).
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { runExample } from './daemon-helpers.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = mkdtempSync(path.join(os.tmpdir(), 'tiersync-examples-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

/** Runs an example's run.mjs with `dir` as its OUT_DIR; resolves with its stdout once it exited 0. */
async function runIn(name: string, dir: string): Promise<string> {
  const { code, stdout, stderr } = await runExample(`${name}/run.mjs`, [dir], 170_000);
  expect(code, stderr).toBe(0);
  return stdout;
}

interface ExactResult {
  policy: string;
  capacityObjects: number | null;
  requests: number;
  misses: number;
}

describe('examples/eviction-tuning', () => {
  it('sweeps every online policy with the OPT bound beside them, on both bundled traces', async () => {
    const dir = path.join(out, 'eviction');
    const stdout = await runIn('eviction-tuning', dir);
    for (const trace of ['mooncake-conversation', 'azure-code']) {
      expect(readdirSync(dir)).toEqual(expect.arrayContaining([`${trace}.json`, `${trace}.csv`, `${trace}.html`]));
      expect(stdout).toContain(`${trace}: miss ratio`);
      const { results } = JSON.parse(readFileSync(path.join(dir, `${trace}.json`), 'utf8')) as { results: ExactResult[] };
      const capacities = [...new Set(results.map((r) => r.capacityObjects))];
      expect(capacities.length).toBeGreaterThan(3);
      for (const capacity of capacities) {
        const row = results.filter((r) => r.capacityObjects === capacity);
        const opt = row.find((r) => r.policy === 'opt')!;
        expect(row.length).toBeGreaterThan(10);
        for (const r of row) {
          expect(r.requests).toBe(opt.requests);
          expect(r.misses, `${r.policy} at ${capacity} pages`).toBeGreaterThanOrEqual(opt.misses);
        }
      }
    }
  }, 180_000);
});

describe('examples/capacity-planning', () => {
  it("computes the README's table of TTFT falls, and writes its reports", async () => {
    const dir = path.join(out, 'capacity');
    await runIn('capacity-planning', dir);
    expect(readdirSync(dir)).toEqual(expect.arrayContaining(['claim.json', 'claim.csv', 'sizing.json', 'sizing.csv', 'sizing.html']));
    const { results } = JSON.parse(readFileSync(path.join(dir, 'claim.json'), 'utf8')) as { results: Array<{ label: string; model: string; ttftReductionP50: number }> };
    // Part 1's table: one row per scenario, the p50 fall of each model in its columns, in the run's order.
    const readme = readFileSync(path.join(here, '../examples/capacity-planning/README.md'), 'utf8');
    const table = readme.slice(readme.indexOf('| scenario |'));
    const lines = table.split('\n');
    const rows = lines.slice(2, lines.findIndex((l) => !l.startsWith('|'))).map((l) => l.split('|').slice(2, 4).map((c) => Number(c.trim().replace('%', ''))));
    const models = [...new Set(results.map((r) => r.model))];
    expect(models).toHaveLength(2);
    const computed = models.map((m) => results.filter((r) => r.model === m).map((r) => Math.round(r.ttftReductionP50 * 100)));
    expect(rows).toHaveLength(computed[0]!.length);
    expect(rows).toEqual(computed[0]!.map((fall, i) => [fall, computed[1]![i]]));
  }, 180_000);
});
