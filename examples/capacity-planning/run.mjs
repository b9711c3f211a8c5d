// Capacity planning with the tiered TTFT model (docs/SIMULATION.md lists every assumption).
//
// Part 1 reproduces the shape of the claim that motivated tiersync: for Qwen3-235B-A22B and Qwen3-Coder-480B-A35B
// on TPU v7x at low concurrency, how far TTFT falls when a returning conversation's KV is restored from host RAM
// or from storage instead of recomputed (published claim: about 60% and 90%). Workload: the LMCache multi-round
// QA benchmark with long per-user histories, arriving slowly (low concurrency), and an HBM KV pool kept to a few
// sessions so that returning users must come back from a lower tier.
//
// Part 2 sizes host RAM for the Mooncake conversation trace: TTFT and hit ratio against host capacity.
//
//   node examples/capacity-planning/run.mjs [OUT_DIR]      (default OUT_DIR: examples/capacity-planning/out)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { STORAGE, bundledTrace, formatSize, progressBar, renderHtml, runSweep, tieredCsv } from '@tiersync/core/sim';

const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = process.argv[2] ?? path.join(here, 'out');
fs.mkdirSync(outDir, { recursive: true });
const GiB = 2 ** 30;
const TiB = 2 ** 40;
const tier = (preset, capacityBytes) => ({ ...STORAGE[preset], name: preset, capacityBytes });
const hbm = (capacityBytes) => ({ name: 'hbm', capacityBytes, readBytesPerSec: 0, writeBytesPerSec: 0, latencySec: 0, parallelism: 1 });
const pct = (v) => `${(v * 100).toFixed(0)}%`;
const s = (v) => `${v.toFixed(2)} s`;

// ---- Part 1 ----------------------------------------------------------------------------------------------------
const workload = { generator: 'multi-round-qa', options: { users: 8, rounds: 6, qps: 0.1, systemPromptTokens: 2000, historyTokens: 32000, questionTokens: 200, answerTokens: 400 } };
const models = [
  { model: 'qwen3-235b-a22b', chips: 4 },
  { model: 'qwen3-coder-480b-a35b', chips: 8 },
];
// A 2-session HBM pool: most returning users were evicted from HBM since their last turn.
const sessionPages = (model) => (model === 'qwen3-235b-a22b' ? 98566144 : 130023424) * 70;
const scenarios = (model) => [
  { name: 'HBM only (evicted = recompute)', tiers: [hbm(2 * sessionPages(model))] },
  { name: 'restore from host RAM', tiers: [hbm(2 * sessionPages(model)), tier('host', 512 * GiB)] },
  { name: 'restore from local NVMe', tiers: [hbm(2 * sessionPages(model)), tier('local-nvme', 4 * TiB)] },
  { name: 'restore from 8 striped local NVMe', tiers: [hbm(2 * sessionPages(model)), { ...tier('local-nvme', 32 * TiB), name: 'nvme-x8', readBytesPerSec: 8 * STORAGE['local-nvme'].readBytesPerSec, writeBytesPerSec: 8 * STORAGE['local-nvme'].writeBytesPerSec, parallelism: 256 }] },
  { name: 'restore from Filestore', tiers: [hbm(2 * sessionPages(model)), tier('filestore', 10 * TiB)] },
];
const jobs1 = models.flatMap(({ model, chips }) =>
  scenarios(model).map((sc) => ({ kind: 'tiered', job: { policy: 'lru', model, accelerator: 'tpu-v7x', compute: { chips }, tiers: sc.tiers, label: `${model}: ${sc.name}` } })),
);
const part1 = (await runSweep({ source: workload, jobs: jobs1, progress: progressBar(jobs1.length, 'claim') })).map((r) => r.result);
console.log('\nPart 1: TTFT on TPU v7x, multi-round QA (8 users x 6 rounds, 34k-37k token prompts, 0.1 QPS), LRU');
console.log(`${'scenario'.padEnd(58)} ${'TTFT p50'.padStart(9)} ${'no cache'.padStart(9)} ${'p50 fall'.padStart(9)} ${'mean fall'.padStart(9)}  pages from lower tier`);
for (const r of part1) {
  const lower = r.tiers.slice(1).map((t) => `${t.name} ${pct(t.pageHitRatio)}`).join(', ') || '-';
  console.log(`${r.label.padEnd(58)} ${s(r.ttft.p50).padStart(9)} ${s(r.noCacheTtft.p50).padStart(9)} ${pct(r.ttftReductionP50).padStart(9)} ${pct(r.ttftReductionMean).padStart(9)}  ${lower}`);
}

// ---- Part 2 ----------------------------------------------------------------------------------------------------
const hosts = [0, 128 * GiB, 512 * GiB, 1 * TiB, 2 * TiB, 4 * TiB, 8 * TiB];
const jobs2 = ['lru', 's3fifo'].flatMap((policy) =>
  hosts.map((h) => ({
    kind: 'tiered',
    job: { policy, model: 'qwen3-235b-a22b', accelerator: 'tpu-v7x', compute: { chips: 4 }, tiers: [hbm(-1), tier('host', h), tier('local-nvme', 8 * TiB)], label: `${policy} host=${formatSize(h)}` },
  })),
);
const part2 = (await runSweep({ source: { file: bundledTrace('conversation_trace.jsonl.gz'), format: 'mooncake' }, jobs: jobs2, progress: progressBar(jobs2.length, 'sizing') })).map((r) => r.result);
console.log('\nPart 2: Qwen3-235B-A22B on 4 x TPU v7x, Mooncake conversation trace, HBM pool + host RAM + 8 TiB NVMe');
console.log(`${'run'.padEnd(22)} ${'token hit'.padStart(9)} ${'host hit'.padStart(9)} ${'TTFT p50'.padStart(9)} ${'p99'.padStart(8)} ${'mean fall'.padStart(9)}`);
for (const r of part2) {
  console.log(`${r.label.padEnd(22)} ${pct(r.tokenHitRatio).padStart(9)} ${pct(r.tiers[1].pageHitRatio).padStart(9)} ${s(r.ttft.p50).padStart(9)} ${s(r.ttft.p99).padStart(8)} ${pct(r.ttftReductionMean).padStart(9)}`);
}

fs.writeFileSync(path.join(outDir, 'claim.json'), `${JSON.stringify({ results: part1 })}\n`);
fs.writeFileSync(path.join(outDir, 'claim.csv'), tieredCsv(part1));
fs.writeFileSync(path.join(outDir, 'sizing.json'), `${JSON.stringify({ results: part2 })}\n`);
fs.writeFileSync(path.join(outDir, 'sizing.csv'), tieredCsv(part2));
fs.writeFileSync(path.join(outDir, 'sizing.html'), renderHtml({ title: 'Host RAM sizing: Qwen3-235B-A22B on TPU v7x', notes: ['Mooncake conversation trace', 'HBM pool = 90% HBM - weights; 8 TiB local NVMe below host'], tiered: part2 }));
console.log(`\nreports in ${outDir}`);
