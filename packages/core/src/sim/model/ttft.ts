/**
 * Time to first token: prefill compute for the tokens not found in the cache, plus loading the found pages from
 * each tier, overlapped layer by layer. Every assumption is listed in docs/SIMULATION.md; in short: one request at
 * a time (no queueing, no batching), compute at `mfu` of the chips' dense bf16 peak, restores from below HBM
 * share the chips' host links at `linkEfficiency`, HBM-resident pages cost nothing to use.
 */
import { configError } from '../errors.js';
import { kvBytesPerToken, type AcceleratorSpec, type ModelShape } from './presets.js';

/** The serving setup a TTFT is computed for. */
export interface ComputeSpec {
  readonly model: ModelShape;
  readonly accelerator: AcceleratorSpec;
  /** Chips serving one model replica (tensor/expert parallel). Default: the fewest whose HBM holds the weights with 20% spare. */
  readonly chips: number;
  /** Model FLOPs utilisation of prefill, in (0, 1]. Default 0.5. */
  readonly mfu: number;
  /** Achieved fraction of the nominal host-link bandwidth, in (0, 1]. Default 0.8. */
  readonly linkEfficiency: number;
  /** Overlap loading layer l+1 with computing layer l. Default true. */
  readonly layerwise: boolean;
  /** Fixed per-request overhead (scheduling, first decode step), seconds. Default 0. */
  readonly overheadSec: number;
}

/** Fills defaults and checks ranges. @throws TierSyncError ERR_CONFIG */
export function computeSpec(
  model: ModelShape,
  acc: AcceleratorSpec,
  o: Partial<Omit<ComputeSpec, 'model' | 'accelerator'>> = {},
): ComputeSpec {
  const weights = model.totalParams * model.weightBytes;
  const chips = o.chips ?? Math.max(1, Math.ceil((weights * 1.2) / acc.hbmBytes));
  const spec = { model, accelerator: acc, chips, mfu: o.mfu ?? 0.5, linkEfficiency: o.linkEfficiency ?? 0.8, layerwise: o.layerwise ?? true, overheadSec: o.overheadSec ?? 0 };
  if (!Number.isSafeInteger(spec.chips) || spec.chips < 1) throw configError(`chips must be a positive integer, got ${spec.chips}`);
  if (!(spec.mfu > 0 && spec.mfu <= 1)) throw configError(`mfu must be in (0, 1], got ${spec.mfu}`);
  if (!(spec.linkEfficiency > 0 && spec.linkEfficiency <= 1)) throw configError(`linkEfficiency must be in (0, 1], got ${spec.linkEfficiency}`);
  if (!(spec.overheadSec >= 0)) throw configError(`overheadSec must be >= 0, got ${spec.overheadSec}`);
  return spec;
}

/** Weight bytes of the model as served. */
export function weightBytes(m: ModelShape): number {
  return m.totalParams * m.weightBytes;
}

/**
 * Default KV pool in HBM: 90% of the chips' HBM (the rest for activations and runtime) minus the weights.
 * @throws TierSyncError ERR_CONFIG when the weights do not fit
 */
export function defaultHbmKvBytes(c: ComputeSpec): number {
  const free = c.chips * c.accelerator.hbmBytes * 0.9 - weightBytes(c.model);
  if (free <= 0) throw configError(`${c.model.label} weights (${(weightBytes(c.model) / 1e9).toFixed(0)} GB) do not fit in ${c.chips} x ${c.accelerator.label}; raise --chips`);
  return Math.floor(free);
}

/** Attention FLOPs per (query token, context token) pair: QK^T and AV, 2 FLOPs per multiply-add. */
function attentionFlopsPerPair(m: ModelShape): number {
  if (m.mla) return 2 * m.layers * m.qHeads * (m.mla.qkNopeHeadDim + m.mla.qkRopeHeadDim + m.mla.vHeadDim);
  return 4 * m.layers * m.qHeads * m.headDim;
}

/** Prefill FLOPs of `tokens` new tokens after `cached` cached ones (causal attention). */
export function prefillFlops(m: ModelShape, tokens: number, cached: number): number {
  return 2 * m.activeParams * tokens + attentionFlopsPerPair(m) * tokens * (cached + (tokens + 1) / 2);
}

/** Seconds to prefill `tokens` new tokens after `cached` cached ones. */
export function prefillSeconds(c: ComputeSpec, tokens: number, cached: number): number {
  return prefillFlops(c.model, tokens, cached) / (c.chips * c.accelerator.bf16FlopsPerSec * c.mfu);
}

/** A tier as the load model sees it. */
export interface LoadPath {
  readBytesPerSec: number;
  latencySec: number;
  parallelism: number;
}

/**
 * Seconds to bring `pages` pages of `bytes` bytes from a tier below HBM into HBM: the transfer at the lesser of
 * the tier's read bandwidth and the chips' combined host links, plus one latency per wave of `parallelism`
 * requests.
 */
export function loadSeconds(c: ComputeSpec, tier: LoadPath, pages: number, bytes: number): number {
  if (pages === 0) return 0;
  const link = c.chips * c.accelerator.hostLinkBytesPerSec * c.linkEfficiency;
  const bw = Math.min(tier.readBytesPerSec, link);
  return bytes / bw + tier.latencySec * Math.ceil(pages / tier.parallelism);
}

/**
 * Combines compute and load. With layer-wise overlap the L layers form a pipeline:
 * `load/L + (L-1) * max(compute/L, load/L) + compute/L`; without it, `compute + load`.
 */
export function combine(c: ComputeSpec, computeSec: number, loadSec: number): number {
  if (!c.layerwise || loadSec === 0 || computeSec === 0) return computeSec + loadSec + c.overheadSec;
  const L = c.model.layers;
  return loadSec / L + ((L - 1) * Math.max(computeSec, loadSec)) / L + computeSec / L + c.overheadSec;
}

/** TTFT with no cache at all: prefill of the whole prompt. */
export function noCacheSeconds(c: ComputeSpec, inputTokens: number): number {
  return prefillSeconds(c, Math.max(1, inputTokens), 0) + c.overheadSec;
}

export { kvBytesPerToken };
