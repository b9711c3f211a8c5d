// The byte layout of llama.cpp's per-sequence state file (llama_state_seq_save_file / llama_state_seq_load_file),
// as written by the llama.cpp bundled with node-llama-cpp 3.21.1 for a llama-architecture model. Sources: llama.cpp's
// public src/llama-context.cpp (llama_state_seq_save_file: magic, version, token list, then state_seq_write_data)
// and src/llama-kv-cache.cpp (llama_kv_cache::state_write / state_write_meta / state_write_data and the matching
// state_read), checked byte for byte against files saved here with known tokens. All fields little-endian:
//
//   u32 magic 'ggsq' (0x67677371)   u32 version (3)   u32 n_token   u32 token[n_token]
//   u32 n_stream                    (1 when the KV cache is unified, else the context's sequence count)
//   per stream s:  u32 cell_count   (0 for every stream but the sequence's own; nothing else follows a 0)
//     cell_count x { i32 pos, u32 n_seq_id (1), i32 seq_id }       (the seq_id is discarded on load)
//     u32 v_trans                   (0 with flash attention: V stored like K, one row per token)
//     u32 n_layer
//     n_layer x { i32 k_type, u64 k_row_bytes, cell_count x k_row_bytes }                        keys
//     v_trans = 0: n_layer x { i32 v_type, u64 v_row_bytes, cell_count x v_row_bytes }           values
//     v_trans = 1: n_layer x { i32 v_type, u32 v_elem_bytes, u32 n_embd_v, n_embd_v x cell_count x v_elem_bytes }
//
// With v_trans = 0 the K and V of token t in layer l are each one contiguous row, so the state of tokens [a, b) is
// 2 x n_layer contiguous runs: that is what lets it be cut into token-range pages and rebuilt for any prefix.
// llama.cpp checks n_stream against its context ("n_stream mismatch") and reads the cells into the destination
// sequence's own stream, so a rebuilt file names the target context's n_stream and fills one stream.
import fs from 'node:fs';
import { TierSyncError } from '@tiersync/core';

export const SEQ_STATE_MAGIC = 0x67677371; // 'ggsq'
export const SEQ_STATE_VERSION = 3;
const GGML_TYPE_BYTES = { 0: 4, 1: 2, 30: 2 }; // f32, f16, bf16

/**
 * Reads the layout of a saved sequence state file: its tokens, n_stream, and for each layer the file offset of
 * its first K row and first V row (rows are `kRowBytes` / `vRowBytes`, one per token, in token order).
 * Only the small headers are read; the KV rows stay in the file.
 * @throws TierSyncError ERR_UNSUPPORTED for a layout it cannot page (transposed V, holes in positions),
 *   ERR_PROTOCOL for a file that is not a sequence state.
 */
export function readSeqStateLayout(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const read = (offset, length) => {
      if (offset + length > size) throw new TierSyncError(`sequence state ${file}: truncated at byte ${offset}`, 'ERR_PROTOCOL');
      const b = Buffer.alloc(length);
      fs.readSync(fd, b, 0, length, offset);
      return b;
    };
    const head = read(0, 12);
    if (head.readUInt32LE(0) !== SEQ_STATE_MAGIC) throw new TierSyncError(`${file} is not a llama.cpp sequence state (magic)`, 'ERR_PROTOCOL');
    const version = head.readUInt32LE(4);
    if (version !== SEQ_STATE_VERSION) throw new TierSyncError(`sequence state version ${version} is not the supported ${SEQ_STATE_VERSION}`, 'ERR_UNSUPPORTED');
    const n = head.readUInt32LE(8);
    let at = 12;
    const tokens = Array.from(new Uint32Array(read(at, 4 * n).buffer.slice(0)));
    at += 4 * n;
    const nStream = read(at, 4).readUInt32LE(0);
    at += 4;
    let cells = 0;
    let layers;
    for (let s = 0; s < nStream; s++) {
      const count = read(at, 4).readUInt32LE(0);
      at += 4;
      if (count === 0) continue;
      if (layers) throw new TierSyncError('sequence state holds cells in more than one stream', 'ERR_UNSUPPORTED');
      cells = count;
      const meta = read(at, 12 * count);
      for (let i = 0; i < count; i++) {
        if (meta.readInt32LE(12 * i) !== i || meta.readUInt32LE(12 * i + 4) !== 1) {
          throw new TierSyncError(`sequence state cell ${i} is not position ${i} of one sequence: only contiguous states from position 0 can be paged`, 'ERR_UNSUPPORTED');
        }
      }
      at += 12 * count;
      const vt = read(at, 8);
      const vTrans = vt.readUInt32LE(0);
      const nLayer = vt.readUInt32LE(4);
      at += 8;
      if (vTrans !== 0) throw new TierSyncError('sequence state stores V transposed (no flash attention): token-range pages need flashAttention: true', 'ERR_UNSUPPORTED');
      layers = [];
      for (let l = 0; l < nLayer; l++) {
        const h = read(at, 12);
        layers.push({ kType: h.readInt32LE(0), kRowBytes: Number(h.readBigUInt64LE(4)), kOffset: at + 12 });
        at += 12 + count * layers[l].kRowBytes;
      }
      for (let l = 0; l < nLayer; l++) {
        const h = read(at, 12);
        Object.assign(layers[l], { vType: h.readInt32LE(0), vRowBytes: Number(h.readBigUInt64LE(4)), vOffset: at + 12 });
        at += 12 + count * layers[l].vRowBytes;
      }
    }
    if (at !== size) throw new TierSyncError(`sequence state ${file}: ${size - at} unexplained trailing bytes`, 'ERR_PROTOCOL');
    if (cells !== n) throw new TierSyncError(`sequence state holds ${n} tokens but ${cells} cells`, 'ERR_UNSUPPORTED');
    return { version, tokens, nStream, cells, layers: layers ?? [], size };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Plans a sequence state file for `tokens` (all of them with KV) in a context of `nStream` streams: the small
 * header regions to write (Buffers with their file offsets) and each layer's K and V row offsets, which the caller
 * fills with `tokens.length` rows each. Rows: `kRowBytes`, `vRowBytes`; types as ggml type ids.
 */
export function planSeqState({ tokens, nStream, nLayer, kType, vType, kRowBytes, vRowBytes }) {
  if (!Number.isInteger(nStream) || nStream < 1) throw new TierSyncError(`nStream must be a positive integer, got ${nStream}`, 'ERR_INVALID_ARGUMENT');
  const n = tokens.length;
  const head = Buffer.alloc(12 + 4 * n + 4 + 4 + 12 * n + 8);
  let at = 0;
  at = head.writeUInt32LE(SEQ_STATE_MAGIC, at);
  at = head.writeUInt32LE(SEQ_STATE_VERSION, at);
  at = head.writeUInt32LE(n, at);
  for (const t of tokens) at = head.writeUInt32LE(t, at);
  at = head.writeUInt32LE(nStream, at);
  at = head.writeUInt32LE(n, at); // the first stream holds the cells; llama.cpp moves them to the sequence's stream
  for (let i = 0; i < n; i++) {
    at = head.writeInt32LE(i, at);
    at = head.writeUInt32LE(1, at);
    at = head.writeInt32LE(0, at);
  }
  at = head.writeUInt32LE(0, at); // v_trans
  at = head.writeUInt32LE(nLayer, at);
  const regions = [{ offset: 0, bytes: head }];
  const layers = [];
  let off = at;
  const rowHeader = (type, rowBytes) => {
    const h = Buffer.alloc(12);
    h.writeInt32LE(type, 0);
    h.writeBigUInt64LE(BigInt(rowBytes), 4);
    regions.push({ offset: off, bytes: h });
    off += 12;
  };
  for (let l = 0; l < nLayer; l++) {
    rowHeader(kType, kRowBytes);
    layers.push({ kOffset: off });
    off += n * kRowBytes;
  }
  for (let l = 0; l < nLayer; l++) {
    rowHeader(vType, vRowBytes);
    layers[l].vOffset = off;
    off += n * vRowBytes;
  }
  // The streams after the first are empty: one u32 0 each.
  if (nStream > 1) {
    regions.push({ offset: off, bytes: Buffer.alloc(4 * (nStream - 1)) });
    off += 4 * (nStream - 1);
  }
  return { regions, layers, size: off };
}

/** Bytes per element of a ggml type id this module pages (f32, f16, bf16), or undefined. */
export function ggmlTypeBytes(type) {
  return GGML_TYPE_BYTES[type];
}
