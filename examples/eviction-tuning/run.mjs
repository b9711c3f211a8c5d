// Eviction tuning on the bundled traces: every built-in policy of @tiersync/policy and the OPT bound at a range of cache sizes,
// replayed exactly (no warm-up), on the Mooncake conversation trace and on the Azure code trace with the seeded
// prefix-sharing model. Prints miss ratios and the best policy per size; writes JSON, CSV and an HTML report.
//
//   node examples/eviction-tuning/run.mjs [OUT_DIR]      (default OUT_DIR: examples/eviction-tuning/out)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ORACLE_POLICIES, policyNames } from '@tiersync/policy';
import { bundledTrace, exactCsv, progressBar, renderHtml, runSweep, withBound } from '@tiersync/core/sim';

const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = process.argv[2] ?? path.join(here, 'out');
// Every online policy, and Belady's OPT beside them: how far the best of them is from the best possible.
const policies = withBound(policyNames().filter((p) => !ORACLE_POLICIES.includes(p)), 'objects');

const traces = [
  // 182,790 distinct 512-token pages; capacities from 1% to 50% of them, and unbounded (the reuse ceiling).
  { name: 'mooncake-conversation', source: { file: bundledTrace('conversation_trace.jsonl.gz'), format: 'mooncake' }, capacities: [2000, 5000, 10000, 20000, 50000, 100000, Infinity] },
  // Azure code trace with 16 system prompts, half the requests continuing a recent conversation (seed 42).
  { name: 'azure-code', source: { file: bundledTrace('AzureLLMInferenceTrace_code.csv.gz'), format: 'azure', azure: { seed: 42 } }, capacities: [200, 500, 1000, 2000, 5000, Infinity] },
];

fs.mkdirSync(outDir, { recursive: true });
for (const t of traces) {
  const jobs = policies.flatMap((policy) => t.capacities.map((capacity) => ({ kind: 'exact', job: { policy, unit: 'objects', capacity } })));
  const results = (await runSweep({ source: t.source, jobs, progress: progressBar(jobs.length, t.name) })).map((r) => r.result);
  console.log(`\n${t.name}: miss ratio (prefix page hit ratio) by cache size in pages`);
  console.log(`${'pages'.padStart(8)}  ${policies.map((p) => p.padStart(15)).join('')}  best`);
  for (const capacity of t.capacities) {
    const row = results.filter((r) => (r.capacityObjects ?? Infinity) === capacity);
    const best = row.filter((r) => !ORACLE_POLICIES.includes(r.policy)).reduce((a, b) => (b.misses < a.misses ? b : a));
    const cells = policies.map((p) => {
      const r = row.find((x) => x.policy === p);
      return `${(r.misses / r.requests).toFixed(3)} (${r.prefixPageHitRatio.toFixed(3)})`.padStart(15);
    });
    console.log(`${String(capacity === Infinity ? 'inf' : capacity).padStart(8)}  ${cells.join('')}  ${capacity === Infinity ? '-' : best.policy}`);
  }
  fs.writeFileSync(path.join(outDir, `${t.name}.json`), `${JSON.stringify({ results })}\n`);
  fs.writeFileSync(path.join(outDir, `${t.name}.csv`), exactCsv(results));
  fs.writeFileSync(path.join(outDir, `${t.name}.html`), renderHtml({ title: `Eviction tuning: ${t.name}`, notes: [`trace: ${t.source.file}`, 'object-count capacities (pages), no warm-up'], exact: results }));
}
console.log(`\nreports in ${outDir}`);
