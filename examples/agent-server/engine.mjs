// node-llama-cpp as resolved from the examples package (tests outside it import the engine through this file).
import { getLlama } from 'node-llama-cpp';
import { ensureModel } from './gguf.mjs';
import { identifyModel } from './session-store.mjs';

let llamaPromise;
/** The CPU llama.cpp runtime (node-llama-cpp's prebuilt binaries), loaded once. */
export function cpuLlama() {
  llamaPromise ??= getLlama({ gpu: false });
  return llamaPromise;
}

/** Writes (or reuses) a generated GGUF model for `spec`, loads it and records its weights digest. */
export async function loadGeneratedModel(spec = 'tiny', dir) {
  const m = ensureModel(spec, dir);
  const llama = await cpuLlama();
  const model = await llama.loadModel({ modelPath: m.file });
  return { model: identifyModel(model, m.sha256), file: m.file, sha256: m.sha256 };
}

/** Greedy (temperature 0) generation of `n` tokens after evaluating `tokens` into `sequence`. */
export async function greedy(sequence, tokens, n) {
  const out = [];
  if (n <= 0) return out;
  for await (const t of sequence.evaluate(tokens, { temperature: 0 })) {
    out.push(t);
    if (out.length >= n) break;
  }
  return out;
}
