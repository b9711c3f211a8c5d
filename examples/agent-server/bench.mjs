// `tiersync bench agent`: time to first token of a long conversation's next turn on llama.cpp (node-llama-cpp, CPU),
// recomputing the whole prompt against restoring its KV through tiersync (PrefixStore: token-range pages plus the
// conversation's tail, the same path the agent server takes) from host RAM and from an fs tier read cold.
//
// Model: the generated `llama3-8b-kv` preset, whose KV bytes per token are Llama-3-8B's (16 layers x 16 KV heads x
// 128 x f16 = 128 KiB per token, the same bytes as 32 layers x 8 KV heads). Weights are random (seeded): the figures
// measure moving and rebuilding state, and prefill compute of a model of that width.
//
// Each repetition runs the three paths back to back (A B C, repeated): recompute = evaluate the whole prompt in an
// empty sequence until the first token; host / fs = restore the prompt's first N-1 tokens from a hierarchy whose
// only tier is host RAM / an fs folder, then evaluate the last token until the first token. Before every fs run the
// tier's files are synced and dropped from the page cache (posix_fadvise DONTNEED through `dd iflag=nocache
// count=0`, per file: a global drop_caches would also evict the mmapped model and slow the token after it).
// Every run's greedy continuation (8 tokens) must equal the recompute's: `identical` says so.
//
//   node examples/agent-server/bench.mjs [--json] [--tokens 2000] [--model llama3-8b-kv] [--repetitions 3]
//        [--threads 1] [--dir DIR] [--tokens-per-page 16]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { TierSyncError } from '@tiersync/core';
import { loadGeneratedModel } from './engine.mjs';
import { MODEL_PRESETS } from './gguf.mjs';
import { PrefixStore } from './prefix-store.mjs';

const CONTINUATION = 8;
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const round = (x, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** A deterministic multi-turn conversation of exactly `n` tokens. */
function conversation(model, n) {
  const lines = [];
  let tokens = [];
  for (let i = 0; tokens.length < n; i++) {
    lines.push(
      i % 2
        ? `Assistant: step ${i}: the page of turn ${i * 7} moves from host RAM to the fs tier when the watermark ${(i * 13) % 97}% is crossed.\n`
        : `User: turn ${i}, please check tool output #${(i * 31) % 1009} and summarize what changed since turn ${i - 2}.\n`,
    );
    tokens = model.tokenize(lines.join(''));
  }
  return tokens.slice(0, n);
}

/** Evaluates `tokens` in `sequence` and generates CONTINUATION greedy tokens; ms until the first one. */
async function firstToken(sequence, tokens, t0) {
  const out = [];
  let ttft;
  for await (const t of sequence.evaluate(tokens, { temperature: 0 })) {
    ttft ??= performance.now() - t0;
    out.push(t);
    if (out.length >= CONTINUATION) break;
  }
  return { ttft, out };
}

function dropFromPageCache(folder) {
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files.push(p);
    }
  };
  walk(folder);
  if (files.length) execFileSync('sync', files); // dirty pages cannot be dropped: write them first
  for (const f of files) execFileSync('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none']);
  return files.length;
}

export async function runAgentBench({ tokens = 2000, model: preset = 'llama3-8b-kv', repetitions = 3, threads = 1, dir = os.tmpdir(), tokensPerPage = 16, log = () => undefined } = {}) {
  if (!Number.isInteger(tokens) || tokens < 2) throw new TierSyncError(`tokens must be an integer >= 2, got ${tokens}`, 'ERR_INVALID_ARGUMENT');
  if (!Number.isInteger(repetitions) || repetitions < 1) throw new TierSyncError(`repetitions must be a positive integer, got ${repetitions}`, 'ERR_INVALID_ARGUMENT');
  if (!Number.isInteger(threads) || threads < 1) throw new TierSyncError(`threads must be a positive integer, got ${threads}`, 'ERR_INVALID_ARGUMENT');
  if (!MODEL_PRESETS[preset]) throw new TierSyncError(`unknown model preset '${preset}' (known: ${Object.keys(MODEL_PRESETS).join(', ')})`, 'ERR_INVALID_ARGUMENT');
  const spec = MODEL_PRESETS[preset];
  let t0 = performance.now();
  const { model, file } = await loadGeneratedModel(preset);
  log(`model ${path.basename(file)} (${(fs.statSync(file).size / 2 ** 20).toFixed(0)} MiB) ready in ${(performance.now() - t0).toFixed(0)} ms`);
  const work = fs.mkdtempSync(path.join(dir, 'tiersync-agent-bench-'));
  const contextSize = Math.ceil((tokens + CONTINUATION + 64) / 256) * 256;
  if (contextSize > spec.contextLength) throw new TierSyncError(`--tokens ${tokens} needs a context of ${contextSize}, over the model's ${spec.contextLength}`, 'ERR_OUT_OF_RANGE');
  const context = await model.createContext({ contextSize, sequences: 1, threads, flashAttention: true });
  const stores = [];
  try {
    const prompt = conversation(model, tokens);
    const head = prompt.slice(0, -1);
    const headDim = spec.width / spec.heads;
    const kvBytesPerToken = 2 * spec.layers * spec.kvHeads * headDim * 2;
    const stateBytes = head.length * kvBytesPerToken;
    const capacity = `${Math.ceil((stateBytes * 1.25) / 2 ** 20) + 16}MiB`;
    const host = await PrefixStore.open(context, { tiers: [{ url: `host://?capacity=${capacity}` }], tokensPerPage });
    stores.push(host);
    const fsFolder = path.join(work, 'fs-tier');
    const fsTier = await PrefixStore.open(context, { tiers: [{ url: `fs://${fsFolder}?capacity=${capacity}` }], tokensPerPage });
    stores.push(fsTier);

    // The conversation so far, evaluated once and parked in both hierarchies (as the server parks a session).
    log(`prefill of ${head.length} tokens to park (${(stateBytes / 2 ** 20).toFixed(0)} MiB of KV), ${threads} llama.cpp thread(s)`);
    let seq = context.getSequence();
    t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(head);
    const prefillMs = performance.now() - t0;
    const saveHost = await host.save(seq);
    const saveFs = await fsTier.save(seq);
    await fsTier.tierSync.flush();
    seq.dispose();
    log(`parked: host ${JSON.stringify(saveHost.timings)} ms, fs ${JSON.stringify(saveFs.timings)} ms`);

    const runs = { recompute: [], host: [], fs: [] };
    const parts = { host: [], fs: [] };
    let reference;
    let identical = true;
    const restoreRun = async (store, tier) => {
      const s = context.getSequence();
      try {
        const start = performance.now();
        const r = await store.restore(s, head);
        if (!r || r.tokens !== head.length) throw new TierSyncError(`the ${tier} tier restored ${r?.tokens ?? 0} of ${head.length} tokens`, 'ERR_NOT_FOUND');
        const afterRestore = performance.now();
        const { ttft, out } = await firstToken(s, prompt.slice(r.tokens), start);
        return { ttft, out, parts: { ...r.timings, firstToken: start + ttft - afterRestore }, byTier: r.byTier };
      } finally {
        s.dispose();
      }
    };
    // Warm-up (JIT, allocations, the model's pages): one untimed restore.
    await restoreRun(host, 'host');
    let droppedFiles = 0;
    for (let i = 0; i < repetitions; i++) {
      seq = context.getSequence();
      t0 = performance.now();
      const rc = await firstToken(seq, prompt, t0);
      seq.dispose();
      runs.recompute.push(rc.ttft);
      reference ??= rc.out;
      identical &&= rc.out.join() === reference.join();
      for (const [tier, store] of [
        ['host', host],
        ['fs', fsTier],
      ]) {
        if (tier === 'fs') droppedFiles = dropFromPageCache(fsFolder);
        const r = await restoreRun(store, tier);
        if (!r.byTier[tier]) throw new TierSyncError(`the ${tier} restore was served by ${JSON.stringify(r.byTier)}`, 'ERR_PROTOCOL');
        runs[tier].push(r.ttft);
        parts[tier].push(r.parts);
        identical &&= r.out.join() === reference.join();
      }
      log(`rep ${i + 1}/${repetitions}: recompute ${rc.ttft.toFixed(0)} ms, host ${runs.host.at(-1).toFixed(0)} ms, fs ${runs.fs.at(-1).toFixed(0)} ms`);
    }
    const recomputeMs = median(runs.recompute);
    const figure = (tier) => {
      const ttft = median(runs[tier]);
      const keys = Object.keys(parts[tier][0]);
      return {
        tier,
        ttftMs: round(ttft),
        speedup: round(recomputeMs / ttft, 2),
        runsMs: runs[tier].map((x) => round(x)),
        // Medians of each leg; pagesToFile + loadFile is the file detour node-llama-cpp's API imposes.
        breakdownMs: Object.fromEntries(keys.map((k) => [k, round(median(parts[tier].map((p) => p[k])), 2)])),
        fileDetourMs: round(median(parts[tier].map((p) => p.pagesToFile + p.loadFile)), 2),
      };
    };
    return {
      suite: 'agent',
      date: new Date().toISOString(),
      machine: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB`,
      loadAverage: round(os.loadavg()[0], 2),
      model: `${preset}: ${spec.layers} layers, width ${spec.width}, ${spec.kvHeads} KV heads x ${headDim}, f16 KV (random weights)`,
      kvBytesPerToken,
      promptTokens: tokens,
      restoredTokens: head.length,
      stateBytes,
      tokensPerPage,
      llamaThreads: threads,
      repetitions,
      recomputeMs: round(recomputeMs),
      recomputeRunsMs: runs.recompute.map((x) => round(x)),
      restore: [figure('host'), figure('fs')],
      fsCacheDrop: `sync + posix_fadvise(DONTNEED) on the fs tier's ${droppedFiles} file(s) (dd iflag=nocache count=0) before each fs run`,
      park: { prefillMs: round(prefillMs), hostMs: saveHost.timings, fsMs: saveFs.timings },
      identical,
    };
  } finally {
    for (const s of stores) await s.close().catch(() => undefined);
    await context.dispose();
    await model.dispose();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const { values } = parseArgs({
    options: {
      json: { type: 'boolean' },
      tokens: { type: 'string' },
      model: { type: 'string' },
      repetitions: { type: 'string' },
      threads: { type: 'string' },
      dir: { type: 'string' },
      'tokens-per-page': { type: 'string' },
    },
  });
  const int = (v, name) => {
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) throw new TierSyncError(`--${name} must be a positive integer, got '${v}'`, 'ERR_INVALID_ARGUMENT');
    return Number(v);
  };
  const opts = {
    ...(values.tokens ? { tokens: int(values.tokens, 'tokens') } : {}),
    ...(values.model ? { model: values.model } : {}),
    ...(values.repetitions ? { repetitions: int(values.repetitions, 'repetitions') } : {}),
    ...(values.threads ? { threads: int(values.threads, 'threads') } : {}),
    ...(values.dir ? { dir: values.dir } : {}),
    ...(values['tokens-per-page'] ? { tokensPerPage: int(values['tokens-per-page'], 'tokens-per-page') } : {}),
    log: (line) => console.error(`[bench agent] ${line}`),
  };
  const report = await runAgentBench(opts);
  if (values.json) console.log(JSON.stringify(report));
  else {
    console.log(`agent: ${report.promptTokens}-token conversation, ${report.model}, ${report.llamaThreads} llama.cpp thread(s)`);
    console.log(`recompute  TTFT ${report.recomputeMs} ms`);
    for (const r of report.restore) console.log(`${r.tier.padEnd(10)} TTFT ${r.ttftMs} ms  speedup ${r.speedup}x  (file detour ${r.fileDetourMs} ms; ${JSON.stringify(r.breakdownMs)})`);
    console.log(`identical continuations: ${report.identical}`);
  }
  process.exitCode = report.identical ? 0 : 1;
}
