/**
 * Presets for the capacity model: accelerators, storage tiers and model shapes, each from a published datasheet
 * or config (the `source` field; docs/SIMULATION.md cites them and lists every assumption). Figures are per chip
 * and nominal; derating (MFU, link efficiency) happens in the TTFT model, not here.
 */
import { invalid } from '../errors.js';

/** An accelerator chip. */
export interface AcceleratorSpec {
  readonly name: string;
  readonly label: string;
  /** HBM per chip, bytes. */
  readonly hbmBytes: number;
  /** HBM bandwidth per chip, bytes/s. */
  readonly hbmBytesPerSec: number;
  /** Dense bf16 peak per chip, FLOP/s. */
  readonly bf16FlopsPerSec: number;
  /** Host link (PCIe) bandwidth per chip, one direction, bytes/s. */
  readonly hostLinkBytesPerSec: number;
  readonly source: string;
}

const GB = 1e9;
const GiB = 2 ** 30;
const TiB = 2 ** 40;
const MiB = 2 ** 20;
/** PCIe Gen5 x16, one direction: 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s. */
const PCIE5_X16 = 63.0e9;

/** Accelerator presets by name. */
export const ACCELERATORS: Readonly<Record<string, AcceleratorSpec>> = {
  'tpu-v6e': {
    name: 'tpu-v6e',
    label: 'TPU v6e (Trillium)',
    hbmBytes: 32 * GB,
    hbmBytesPerSec: 1638 * GB,
    bf16FlopsPerSec: 918e12,
    hostLinkBytesPerSec: PCIE5_X16,
    source: 'https://cloud.google.com/tpu/docs/v6e (918 TFLOPs bf16, 32 GB HBM, 1638 GBps, PCIe Gen5 host interface)',
  },
  'tpu-v7x': {
    name: 'tpu-v7x',
    label: 'TPU7x (Ironwood)',
    hbmBytes: 192 * GiB,
    hbmBytesPerSec: 7380 * GB,
    bf16FlopsPerSec: 2307e12,
    hostLinkBytesPerSec: PCIE5_X16,
    source: 'https://cloud.google.com/tpu/docs/tpu7x (2307 TFLOPs bf16, 192 GiB HBM, 7.38 TB/s); host link assumed PCIe Gen5 x16',
  },
  h100: {
    name: 'h100',
    label: 'NVIDIA H100 SXM5 80GB',
    hbmBytes: 80 * GB,
    hbmBytesPerSec: 3350 * GB,
    bf16FlopsPerSec: 989e12,
    hostLinkBytesPerSec: PCIE5_X16,
    source: 'NVIDIA H100 Tensor Core GPU datasheet (SXM: 80 GB HBM3, 3.35 TB/s, 1979 TFLOPS bf16 with sparsity = 989 dense, PCIe Gen5 128 GB/s bidirectional)',
  },
  h200: {
    name: 'h200',
    label: 'NVIDIA H200 SXM 141GB',
    hbmBytes: 141 * GB,
    hbmBytesPerSec: 4800 * GB,
    bf16FlopsPerSec: 989e12,
    hostLinkBytesPerSec: PCIE5_X16,
    source: 'NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB HBM3e, 4.8 TB/s, 1979 TFLOPS bf16 with sparsity = 989 dense, PCIe Gen5 128 GB/s bidirectional)',
  },
};

/** A storage (or host memory) tier's performance. Capacity is chosen per simulation. */
export interface StorageSpec {
  readonly name: string;
  readonly label: string;
  /** Sustained read bandwidth, bytes/s. */
  readonly readBytesPerSec: number;
  /** Sustained write bandwidth, bytes/s. */
  readonly writeBytesPerSec: number;
  /** Latency of one request (first byte), seconds. */
  readonly latencySec: number;
  /** Requests in flight at once (each page is one request). */
  readonly parallelism: number;
  readonly source: string;
}

/** Storage presets by name (`host` is the host's DRAM). */
export const STORAGE: Readonly<Record<string, StorageSpec>> = {
  host: {
    name: 'host',
    label: 'host DRAM',
    readBytesPerSec: 200 * GB,
    writeBytesPerSec: 200 * GB,
    latencySec: 5e-6,
    parallelism: 64,
    source: 'assumption: 8+ DDR5 channels (>= 200 GB/s) so the accelerator host link, not DRAM, limits restores',
  },
  'local-nvme': {
    name: 'local-nvme',
    label: 'local NVMe SSD',
    readBytesPerSec: 6.9 * GB,
    writeBytesPerSec: 4.1 * GB,
    latencySec: 80e-6,
    parallelism: 32,
    source: 'Samsung PM9A3 U.2 datasheet (PCIe Gen4: 6,900 MB/s sequential read, 4,100 MB/s write); latency and queue depth assumed',
  },
  filestore: {
    name: 'filestore',
    label: 'Filestore zonal (10 TiB)',
    readBytesPerSec: (10 / 2.5) * 650 * MiB,
    writeBytesPerSec: (10 / 2.5) * 220 * MiB,
    latencySec: 1e-3,
    parallelism: 16,
    source: 'https://cloud.google.com/filestore/docs/service-tiers-zonal (10-100 TiB: 650 MiB/s read and 220 MiB/s write per 2.5 TiB); 1 ms NFS latency assumed',
  },
  gcs: {
    name: 'gcs',
    label: 'Cloud Storage bucket',
    readBytesPerSec: 6 * GB,
    writeBytesPerSec: 3 * GB,
    latencySec: 30e-3,
    parallelism: 64,
    source: 'assumption: many parallel ranged GETs over a 50-100 Gbps VM NIC (https://cloud.google.com/storage/docs/request-rate); 30 ms first-byte latency',
  },
};

/** Multi-head latent attention (DeepSeek-V2/V3): the cache holds one compressed latent plus a RoPE key per token. */
export interface MlaShape {
  readonly kvLoraRank: number;
  readonly qkRopeHeadDim: number;
  readonly qkNopeHeadDim: number;
  readonly vHeadDim: number;
}

/** A transformer's shape, from its published config.json. */
export interface ModelShape {
  readonly name: string;
  readonly label: string;
  readonly layers: number;
  /** Query (attention) heads. */
  readonly qHeads: number;
  /** Key/value heads (GQA). Ignored with `mla`. */
  readonly kvHeads: number;
  /** Head dimension. Ignored with `mla`. */
  readonly headDim: number;
  /** Bytes per cached KV element. Default 2 (bf16). */
  readonly kvDtypeBytes: number;
  /** Bytes per weight as served. */
  readonly weightBytes: number;
  readonly totalParams: number;
  /** Parameters active per token (MoE: shared + routed experts used). */
  readonly activeParams: number;
  readonly mla?: MlaShape;
  readonly source: string;
}

/** Model presets by name. */
export const MODELS: Readonly<Record<string, ModelShape>> = {
  'llama-3-8b': {
    name: 'llama-3-8b', label: 'Llama-3-8B', layers: 32, qHeads: 32, kvHeads: 8, headDim: 128, kvDtypeBytes: 2, weightBytes: 2,
    totalParams: 8.03e9, activeParams: 8.03e9, source: 'https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json',
  },
  'llama-3-70b': {
    name: 'llama-3-70b', label: 'Llama-3-70B', layers: 80, qHeads: 64, kvHeads: 8, headDim: 128, kvDtypeBytes: 2, weightBytes: 2,
    totalParams: 70.6e9, activeParams: 70.6e9, source: 'https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json',
  },
  'qwen3-235b-a22b': {
    name: 'qwen3-235b-a22b', label: 'Qwen3-235B-A22B', layers: 94, qHeads: 64, kvHeads: 4, headDim: 128, kvDtypeBytes: 2, weightBytes: 2,
    totalParams: 235e9, activeParams: 22e9, source: 'https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json',
  },
  'qwen3-coder-480b-a35b': {
    name: 'qwen3-coder-480b-a35b', label: 'Qwen3-Coder-480B-A35B', layers: 62, qHeads: 96, kvHeads: 8, headDim: 128, kvDtypeBytes: 2, weightBytes: 2,
    totalParams: 480e9, activeParams: 35e9, source: 'https://huggingface.co/Qwen/Qwen3-Coder-480B-A35B-Instruct/blob/main/config.json',
  },
  'deepseek-v3': {
    name: 'deepseek-v3', label: 'DeepSeek-V3 (MLA)', layers: 61, qHeads: 128, kvHeads: 128, headDim: 128, kvDtypeBytes: 2, weightBytes: 1,
    totalParams: 671e9, activeParams: 37e9,
    mla: { kvLoraRank: 512, qkRopeHeadDim: 64, qkNopeHeadDim: 128, vHeadDim: 128 },
    source: 'https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (weights released in FP8)',
  },
};

/** KV-cache bytes per token: 2 (K and V) x layers x KV heads x head dim x dtype, or for MLA layers x (latent + RoPE key) x dtype. */
export function kvBytesPerToken(m: ModelShape): number {
  if (m.mla) return m.layers * (m.mla.kvLoraRank + m.mla.qkRopeHeadDim) * m.kvDtypeBytes;
  return 2 * m.layers * m.kvHeads * m.headDim * m.kvDtypeBytes;
}

function lookup<T>(table: Readonly<Record<string, T>>, name: string, what: string): T {
  const v = table[name.toLowerCase()];
  if (v === undefined) throw invalid(`unknown ${what} '${name}'; known: ${Object.keys(table).join(', ')}`);
  return v;
}

/** @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown name */
export function accelerator(name: string): AcceleratorSpec {
  return lookup(ACCELERATORS, name, 'accelerator');
}
/** @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown name */
export function storage(name: string): StorageSpec {
  return lookup(STORAGE, name, 'storage preset');
}
/** @throws TierSyncError ERR_INVALID_ARGUMENT for an unknown name */
export function model(name: string): ModelShape {
  return lookup(MODELS, name, 'model');
}

export { GiB, TiB };
