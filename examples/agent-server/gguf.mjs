// A small GGUF v3 writer for llama-architecture test models with seeded random weights.
//
// Format: the GGUF specification, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (version 3):
//   header   : magic "GGUF" (u32 0x46554747 LE), version u32 = 3, tensor_count u64, metadata_kv_count u64
//   metadata : key (gguf_string = u64 length + UTF-8 bytes), value_type u32, value
//              (arrays: element type u32, count u64, elements)
//   tensors  : name (gguf_string), n_dims u32, ne[n_dims] u64 (ne[0] = innermost/contiguous), ggml_type u32,
//              offset u64 (from the start of the data section, a multiple of general.alignment = 32)
//   padding to the alignment, then the tensor data.
// Everything little-endian. Tensor names and metadata keys are llama.cpp's (src/llama-arch.cpp, LLM_ARCH_LLAMA).
//
// Models are generated, never committed: `ensureModel(spec)` writes into a cache folder (default
// $TIERSYNC_MODEL_CACHE or <os tmpdir>/tiersync-models) under a name derived from the spec and reuses the file.
//
//   node examples/agent-server/gguf.mjs [tiny|llama3-8b-kv] [OUT_DIR]
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const GGUF_MAGIC = 0x46554747;
const ALIGNMENT = 32;
const T = { UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9 };
const GGML = { F32: 0, F16: 1 };

/** Model sizes: `tiny` is the CI model; `llama3-8b-kv` has Llama-3-8B's KV bytes per token per layer group (16 layers x 16 KV heads x 128). */
export const MODEL_PRESETS = {
  tiny: { layers: 4, width: 512, heads: 8, kvHeads: 4, ffn: 1024, contextLength: 2048, dtype: 'f16', seed: 1 },
  'llama3-8b-kv': { layers: 16, width: 2048, heads: 16, kvHeads: 16, ffn: 2048, contextLength: 4096, dtype: 'f16', seed: 1 },
};

/** The 260-token byte vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>, ▁ (round-trips any text). */
export function byteVocabulary() {
  const tokens = ['<unk>', '<s>', '</s>'];
  const types = [2, 3, 3]; // unknown, control, control
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6); // byte
  }
  tokens.push('\u2581');
  types.push(1); // normal
  return { tokens, types };
}

// ---- byte writer ---------------------------------------------------------------------------------------------
class Writer {
  constructor() {
    this.chunks = [];
    this.length = 0;
  }
  bytes(b) {
    this.chunks.push(b);
    this.length += b.length;
  }
  u32(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.bytes(b);
  }
  i32(v) {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.bytes(b);
  }
  u64(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.bytes(b);
  }
  f32(v) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.bytes(b);
  }
  str(s) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.bytes(b);
  }
  buffer() {
    return Buffer.concat(this.chunks, this.length);
  }
}

function writeValue(w, type, value) {
  switch (type) {
    case T.UINT32:
      return w.u32(value);
    case T.INT32:
      return w.i32(value);
    case T.FLOAT32:
      return w.f32(value);
    case T.BOOL:
      return w.bytes(Buffer.from([value ? 1 : 0]));
    case T.STRING:
      return w.str(value);
    default:
      throw new Error(`gguf: unsupported value type ${type}`);
  }
}

function writeKv(w, key, type, value, elementType) {
  w.str(key);
  w.u32(type);
  if (type === T.ARRAY) {
    w.u32(elementType);
    w.u64(value.length);
    for (const v of value) writeValue(w, elementType, v);
  } else {
    writeValue(w, type, value);
  }
}

// ---- seeded weights ------------------------------------------------------------------------------------------
/** xorshift128+ style 32-bit PRNG (mulberry32), seeded per tensor so files are reproducible. */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);
/** float32 -> IEEE half (round to nearest even; the weights here are small normals, no NaN/Inf handling needed). */
function toHalf(v) {
  f32buf[0] = v;
  const x = u32buf[0];
  const sign = (x >>> 16) & 0x8000;
  let exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp;
    let h = mant >>> shift;
    if ((mant >>> (shift - 1)) & 1 && (mant & ((1 << (shift - 1)) - 1) || h & 1)) h++;
    return sign | h;
  }
  if (exp >= 31) return sign | 0x7c00;
  let h = (exp << 10) | (mant >>> 13);
  if (mant & 0x1000 && (mant & 0xfff || h & 1)) h++;
  return sign | h;
}

function tensorData(ne, dtype, seed, fill) {
  const n = ne.reduce((a, b) => a * b, 1);
  const rnd = mulberry32(seed);
  if (dtype === 'f32') {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = fill ?? (rnd() * 2 - 1) * 0.1;
    return Buffer.from(out.buffer);
  }
  const out = new Uint16Array(n);
  const one = fill === undefined ? 0 : toHalf(fill);
  for (let i = 0; i < n; i++) out[i] = fill === undefined ? toHalf((rnd() * 2 - 1) * 0.1) : one;
  return Buffer.from(out.buffer);
}

// ---- the model -----------------------------------------------------------------------------------------------
function normalize(spec) {
  const s = { ...MODEL_PRESETS.tiny, ...spec };
  if (s.width % s.heads) throw new Error(`gguf: width ${s.width} is not a multiple of heads ${s.heads}`);
  if (s.heads % s.kvHeads) throw new Error(`gguf: heads ${s.heads} is not a multiple of kvHeads ${s.kvHeads}`);
  if (s.dtype !== 'f16' && s.dtype !== 'f32') throw new Error(`gguf: dtype must be f16 or f32, got ${s.dtype}`);
  return s;
}

/** Writes a llama-architecture GGUF v3 file for `spec` to `file`. Norm weights are 1, everything else uniform(+-0.1). */
export function writeLlamaGguf(file, spec = {}) {
  const s = normalize(spec);
  const headDim = s.width / s.heads;
  const kvWidth = headDim * s.kvHeads;
  const vocab = byteVocabulary();
  const nVocab = vocab.tokens.length;

  const meta = new Writer();
  const kvs = [
    ['general.architecture', T.STRING, 'llama'],
    ['general.name', T.STRING, `tiersync-random-${s.layers}x${s.width}-seed${s.seed}`],
    ['general.alignment', T.UINT32, ALIGNMENT],
    ['llama.context_length', T.UINT32, s.contextLength],
    ['llama.embedding_length', T.UINT32, s.width],
    ['llama.block_count', T.UINT32, s.layers],
    ['llama.feed_forward_length', T.UINT32, s.ffn],
    ['llama.attention.head_count', T.UINT32, s.heads],
    ['llama.attention.head_count_kv', T.UINT32, s.kvHeads],
    ['llama.rope.dimension_count', T.UINT32, headDim],
    ['llama.attention.layer_norm_rms_epsilon', T.FLOAT32, 1e-5],
    ['tokenizer.ggml.model', T.STRING, 'llama'],
    ['tokenizer.ggml.tokens', T.ARRAY, vocab.tokens, T.STRING],
    ['tokenizer.ggml.scores', T.ARRAY, vocab.tokens.map(() => 0), T.FLOAT32],
    ['tokenizer.ggml.token_type', T.ARRAY, vocab.types, T.INT32],
    ['tokenizer.ggml.bos_token_id', T.UINT32, 1],
    ['tokenizer.ggml.eos_token_id', T.UINT32, 2],
    ['tokenizer.ggml.unknown_token_id', T.UINT32, 0],
    ['tokenizer.ggml.add_bos_token', T.BOOL, true],
    ['tokenizer.ggml.add_space_prefix', T.BOOL, false],
  ];
  for (const [k, t, v, et] of kvs) writeKv(meta, k, t, v, et);

  // Tensors: [name, ne (innermost first), is a norm].
  const tensors = [
    ['token_embd.weight', [s.width, nVocab], false],
    ['output_norm.weight', [s.width], true],
    ['output.weight', [s.width, nVocab], false],
  ];
  for (let l = 0; l < s.layers; l++) {
    tensors.push(
      [`blk.${l}.attn_norm.weight`, [s.width], true],
      [`blk.${l}.attn_q.weight`, [s.width, s.width], false],
      [`blk.${l}.attn_k.weight`, [s.width, kvWidth], false],
      [`blk.${l}.attn_v.weight`, [s.width, kvWidth], false],
      [`blk.${l}.attn_output.weight`, [s.width, s.width], false],
      [`blk.${l}.ffn_norm.weight`, [s.width], true],
      [`blk.${l}.ffn_gate.weight`, [s.width, s.ffn], false],
      [`blk.${l}.ffn_up.weight`, [s.width, s.ffn], false],
      [`blk.${l}.ffn_down.weight`, [s.ffn, s.width], false],
    );
  }
  const info = new Writer();
  const pad = (n) => (ALIGNMENT - (n % ALIGNMENT)) % ALIGNMENT;
  let offset = 0;
  const layout = tensors.map(([name, ne, norm]) => {
    // Norms stay f32 (llama.cpp keeps 1-D tensors in f32).
    const type = norm || s.dtype === 'f32' ? 'f32' : 'f16';
    const bytes = ne.reduce((a, b) => a * b, 1) * (type === 'f32' ? 4 : 2);
    info.str(name);
    info.u32(ne.length);
    for (const d of ne) info.u64(d);
    info.u32(type === 'f32' ? GGML.F32 : GGML.F16);
    info.u64(offset);
    const at = offset;
    offset += bytes + pad(bytes);
    return { name, ne, norm, type, bytes, at };
  });

  const head = new Writer();
  head.u32(GGUF_MAGIC);
  head.u32(3);
  head.u64(tensors.length);
  head.u64(kvs.length);
  const prefix = Buffer.concat([head.buffer(), meta.buffer(), info.buffer()]);
  const tmp = `${file}.${process.pid}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  const hash = createHash('sha256');
  try {
    const write = (b) => {
      fs.writeSync(fd, b);
      hash.update(b);
    };
    write(prefix);
    write(Buffer.alloc(pad(prefix.length)));
    for (const [i, t] of layout.entries()) {
      write(tensorData(t.ne, t.type, (s.seed * 1_000_003 + i * 7919) >>> 0, t.norm ? 1 : undefined));
      write(Buffer.alloc(pad(t.bytes)));
    }
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  const digest = hash.digest('hex');
  fs.writeFileSync(`${file}.sha256`, `${digest}\n`);
  return { file, sha256: digest, spec: s, bytes: fs.statSync(file).size };
}

/** Name of a spec's file: every field that changes the weights is in it. */
export function modelFileName(spec = {}) {
  const s = normalize(spec);
  return `llama-${s.layers}L-${s.width}w-${s.heads}h-${s.kvHeads}kv-${s.ffn}ff-${s.contextLength}ctx-${s.dtype}-seed${s.seed}.gguf`;
}

/**
 * Returns a model file for `spec` (a preset name or fields over the tiny preset), writing it into `dir` unless it
 * is already there. `sha256` is the digest of the file's bytes (the model fingerprint).
 */
export function ensureModel(spec = 'tiny', dir = process.env.TIERSYNC_MODEL_CACHE ?? path.join(os.tmpdir(), 'tiersync-models')) {
  const s = typeof spec === 'string' ? MODEL_PRESETS[spec] : spec;
  if (!s) throw new Error(`gguf: unknown preset '${spec}' (known: ${Object.keys(MODEL_PRESETS).join(', ')})`);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, modelFileName(s));
  if (fs.existsSync(file) && fs.existsSync(`${file}.sha256`)) {
    return { file, sha256: fs.readFileSync(`${file}.sha256`, 'utf8').trim(), spec: normalize(s), bytes: fs.statSync(file).size };
  }
  return writeLlamaGguf(file, s);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const t0 = performance.now();
  const m = ensureModel(process.argv[2] ?? 'tiny', process.argv[3]);
  console.log(`${m.file}  ${(m.bytes / 2 ** 20).toFixed(1)} MiB  sha256 ${m.sha256.slice(0, 16)}  ${(performance.now() - t0).toFixed(0)} ms`);
}
