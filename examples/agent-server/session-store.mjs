// Saves a llama.cpp sequence's KV state into tiersync pages and restores it, through node-llama-cpp.
//
// node-llama-cpp exposes sequence state only through files (LlamaContextSequence.saveStateToFile /
// loadStateFromFile), so each direction takes one file detour, kept as short as the API allows:
//   save:    saveStateToFile(tmp on tmpfs)  ->  native engine copies tmp -> host arena pages (CRC32C on the way)
//            ->  TierSync.store(pages)       (the state bytes never pass through JavaScript)
//   restore: TierSync.lookup/load -> host arena pages -> native engine copies pages -> tmp (CRC32C checked)
//            ->  loadStateFromFile(tmp)
// Each leg is timed separately (`timings` in the results) so the file detour's cost is visible.
//
// Keys and fingerprint. The TierSync namespace is bound to the engine identity: the model's weights digest
// (SHA-256 of the GGUF file), the context size, the KV cache types and flash attention (which decides whether V is
// stored transposed), and a KV layout built from the model's metadata. A state saved under one identity is
// refused (TierSyncError ERR_GEOMETRY_MISMATCH) for a sequence of another before anything is loaded, let alone
// handed to llama.cpp (which may crash on a foreign state). Page 0 also carries a header with the identity, the
// token count, a digest of the tokens, the state's length and CRC32C, all checked after loading.
//
// A saved state is one blob (llama.cpp's per-sequence state file: its token list, cell metadata, then per layer
// K rows and V rows), so its pages are keyed by a digest of the whole token prefix rather than by token ranges:
// page i's key token run is [magic, n, digest(tokens)...] for page 0 and [i, ...] after it, chained by tiersync.
// Keying by token ranges would let two sessions that share only their first page of tokens share a page whose
// bytes differ (the blob's first page holds the whole token list). Prefix sharing needs the state cut into
// token-range pages: see README.md.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FileHandle, HostArena, TierSync, TierSyncError, TransferBatch } from '@tiersync/core';

const HEADER_BYTES = 4096;
const MAGIC = 0x31535354; // 'TSS1'
const VERSION = 1;

const modelDigests = new WeakMap();

/** Records the weights digest of a loaded node-llama-cpp model (e.g. `ensureModel(...).sha256`): part of its identity. */
export function identifyModel(model, sha256) {
  if (typeof sha256 !== 'string' || !/^[0-9a-f]{16,128}$/.test(sha256)) throw new TierSyncError(`model digest must be hex, got ${sha256}`, 'ERR_INVALID_ARGUMENT');
  modelDigests.set(model, sha256);
  return model;
}

/** The weights digest recorded by identifyModel for `model`. @throws TierSyncError ERR_INVALID_ARGUMENT when none was. */
export function modelDigestOf(model) {
  const digest = modelDigests.get(model);
  if (!digest) throw new TierSyncError('model is not identified: call identifyModel(model, sha256) after loading it', 'ERR_INVALID_ARGUMENT');
  return digest;
}

/** SHA-256 of a file, streamed (for models not written by gguf.mjs, which leaves a .sha256 beside the file). */
export async function fileDigest(file) {
  try {
    return fs.readFileSync(`${file}.sha256`, 'utf8').trim();
  } catch {
    const h = createHash('sha256');
    for await (const chunk of fs.createReadStream(file, { highWaterMark: 4 << 20 })) h.update(chunk);
    return h.digest('hex');
  }
}

/**
 * The weights digest (identifyModel) and KV geometry (GGUF metadata) of `context`'s model.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a model not identified, ERR_UNSUPPORTED for metadata lacking the geometry.
 */
export function modelGeometry(context) {
  const model = context.model;
  const digest = modelDigestOf(model);
  const a = model.fileInfo.architectureMetadata ?? {};
  const layers = a.block_count;
  const heads = a.attention?.head_count;
  const kvHeads = a.attention?.head_count_kv ?? heads;
  const width = a.embedding_length;
  if (!layers || !heads || !width) throw new TierSyncError('model metadata lacks block_count / head_count / embedding_length', 'ERR_UNSUPPORTED');
  return { digest, layers, kvHeads, headDim: width / heads };
}

/**
 * The engine identity of a context: what must match for a saved state to be loadable. `fingerprint` is the
 * TierSync model string; `layout` its KV layout (one group of the model's layers).
 */
export function engineIdentity(context, options = {}) {
  const { digest, layers, kvHeads, headDim } = modelGeometry(context);
  const kvType = options.kvCacheType ?? 'f16';
  const shape = `ctx${context.contextSize}-kv${kvType}-fa${String(context.flashAttention)}`;
  return {
    fingerprint: `gguf-sha256:${digest.slice(0, 32)}/${shape}`,
    layout: { layers, kvHeads, headDim, dtype: kvType === 'f32' ? 'fp32' : 'fp16', tokensPerPage: options.tokensPerPage ?? 16 },
  };
}

export function tmpDir() {
  try {
    if (fs.statSync('/dev/shm').isDirectory()) return '/dev/shm';
  } catch {
    /* no tmpfs */
  }
  return os.tmpdir();
}

function tokenDigest(tokens) {
  return createHash('sha256').update(Buffer.from(Uint32Array.from(tokens).buffer)).digest();
}

const elapsed = (t0) => performance.now() - t0;

export class SessionStore {
  /**
   * Opens a TierSync for `context`'s engine identity. `tiers` as in TierSyncConfig (fastest first). The store owns
   * the TierSync and closes it.
   */
  static async open(context, { tiers, index, tokensPerPage = 16, kvCacheType, threads, tmp } = {}) {
    const identity = engineIdentity(context, { tokensPerPage, kvCacheType });
    const ts = new TierSync({ model: identity.fingerprint, layout: identity.layout, tiers, ...(index ? { index } : {}), ...(threads ? { threads } : {}) });
    await ts.open();
    return new SessionStore(ts, { tmp, kvCacheType });
  }

  /** Wraps an open TierSync whose model string is an engine fingerprint (see engineIdentity). */
  constructor(tierSync, { tmp, kvCacheType } = {}) {
    this.tierSync = tierSync;
    this.fingerprint = tierSync.namespace.model;
    this.kvCacheType = kvCacheType;
    this.tmp = tmp ?? tmpDir();
    this.tokensPerPage = tierSync.tokensPerPage;
    if (this.tokensPerPage < 11) throw new TierSyncError('SessionStore needs tokensPerPage >= 11 (page 0 key holds magic, count and a 256-bit digest)', 'ERR_INVALID_ARGUMENT');
    this.pageBytes = tierSync.pageBytes;
    this.#seq = 0;
  }

  #seq;

  /** Refuses a sequence whose engine identity is not this store's (before any state moves). */
  #check(sequence) {
    const id = engineIdentity(sequence.context, { tokensPerPage: this.tokensPerPage, kvCacheType: this.kvCacheType });
    if (id.fingerprint !== this.fingerprint) {
      throw new TierSyncError(`engine fingerprint mismatch: this store holds states of '${this.fingerprint}', the sequence is '${id.fingerprint}'`, 'ERR_GEOMETRY_MISMATCH');
    }
  }

  /** Key tokens of a state blob of `pages` pages for the prefix `tokens`. */
  #keyTokens(tokens, pages) {
    const T = this.tokensPerPage;
    const k = new Uint32Array(pages * T);
    const d = tokenDigest(tokens);
    k[0] = MAGIC;
    k[1] = tokens.length;
    for (let i = 0; i < 8; i++) k[2 + i] = d.readUInt32LE(i * 4);
    for (let p = 1; p < pages; p++) k.fill(p, p * T, (p + 1) * T);
    return k;
  }

  #tmpPath() {
    return path.join(this.tmp, `tiersync-state-${process.pid}-${++this.#seq}-${Date.now()}.bin`);
  }

  #pages(arena, n) {
    return Array.from({ length: n }, (_, i) => ({ arena, offset: i * this.pageBytes, length: this.pageBytes }));
  }

  /**
   * Saves `sequence`'s state under its current context tokens. Returns { tokens, pages, bytes, stored, timings }
   * with timings in ms: saveFile (llama.cpp writes the temp file), fileToPages (native copy + CRC32C), store.
   */
  async save(sequence) {
    this.#check(sequence);
    const tokens = sequence.contextTokens.slice();
    if (tokens.length === 0) throw new TierSyncError('the sequence holds no tokens', 'ERR_INVALID_ARGUMENT');
    const tmp = this.#tmpPath();
    const timings = {};
    let t0 = performance.now();
    let arena;
    let file;
    try {
      const { fileSize } = await sequence.saveStateToFile(tmp);
      timings.saveFile = elapsed(t0);
      t0 = performance.now();
      const pages = Math.ceil((HEADER_BYTES + fileSize) / this.pageBytes);
      arena = HostArena.create({ capacity: pages * this.pageBytes });
      file = FileHandle.open(tmp, { direct: 'never' });
      const res = await this.tierSync.engine.submit(new TransferBatch().add(file, 0, arena, HEADER_BYTES, fileSize), { checksums: true });
      file.close();
      file = undefined;
      fs.rmSync(tmp, { force: true });
      this.#writeHeader(arena.view(0, HEADER_BYTES), { tokens, bytes: fileSize, crc: res.checksums[0] });
      timings.fileToPages = elapsed(t0);
      t0 = performance.now();
      const r = await this.tierSync.store(this.#keyTokens(tokens, pages), this.#pages(arena, pages));
      timings.store = elapsed(t0);
      return { tokens: tokens.length, pages, bytes: fileSize, stored: r.stored, existing: r.existing, dropped: r.dropped, timings };
    } finally {
      file?.close();
      arena?.close();
      fs.rmSync(tmp, { force: true });
    }
  }

  #writeHeader(view, { tokens, bytes, crc }) {
    const b = Buffer.from(view.buffer, view.byteOffset, view.byteLength);
    b.fill(0);
    b.writeUInt32LE(MAGIC, 0);
    b.writeUInt32LE(VERSION, 4);
    b.writeBigUInt64LE(BigInt(bytes), 8);
    b.writeUInt32LE(crc >>> 0, 16);
    b.writeUInt32LE(tokens.length, 20);
    tokenDigest(tokens).copy(b, 24);
    const fp = Buffer.from(this.fingerprint, 'utf8');
    b.writeUInt32LE(fp.length, 56);
    fp.copy(b, 60);
  }

  #readHeader(view) {
    const b = Buffer.from(view.buffer, view.byteOffset, view.byteLength);
    if (b.readUInt32LE(0) !== MAGIC || b.readUInt32LE(4) !== VERSION) throw new TierSyncError('session state header: bad magic or version', 'ERR_PROTOCOL');
    const fpLen = b.readUInt32LE(56);
    return {
      bytes: Number(b.readBigUInt64LE(8)),
      crc: b.readUInt32LE(16),
      tokens: b.readUInt32LE(20),
      digest: b.subarray(24, 56),
      fingerprint: b.subarray(60, 60 + fpLen).toString('utf8'),
    };
  }

  /** The longest lookup for a prefix of `n` tokens: enough pages for a state of 2x the layout's KV bytes per token. */
  #maxPages(n) {
    const perToken = 2 * this.tierSync.namespace.layout.bytesPerToken + 64;
    return Math.ceil((HEADER_BYTES + (1 << 20) + n * perToken) / this.pageBytes);
  }

  /**
   * Restores the state saved for exactly `tokens` into `sequence` (which should be empty: its state is replaced).
   * Returns null when no complete copy is cached (recompute), else { tokens, pages, bytes, byTier, timings } with
   * timings in ms: lookup+load (tiers -> host pages), pagesToFile (native copy, CRC32C verified), loadFile.
   * @throws TierSyncError ERR_GEOMETRY_MISMATCH when the sequence's engine identity is not the store's.
   */
  async restore(sequence, tokens) {
    this.#check(sequence);
    const timings = {};
    let t0 = performance.now();
    const hit = this.tierSync.lookup(this.#keyTokens(tokens, this.#maxPages(tokens.length)));
    if (hit.pages.length === 0) return null;
    let arena;
    let file;
    const tmp = this.#tmpPath();
    try {
      // One load for every page (pinned together): the lookup is bounded to the pages a state of this many tokens
      // can take, and page 0's header then says how many of them the state needs.
      arena = HostArena.create({ capacity: hit.pages.length * this.pageBytes });
      const loaded = await this.tierSync.load(hit, this.#pages(arena, hit.pages.length));
      if (loaded.missing.includes(0)) return null;
      const h = this.#readHeader(arena.view(0, HEADER_BYTES));
      if (h.fingerprint !== this.fingerprint) {
        throw new TierSyncError(`stored state belongs to '${h.fingerprint}', not '${this.fingerprint}'`, 'ERR_GEOMETRY_MISMATCH');
      }
      if (h.tokens !== tokens.length || !h.digest.equals(tokenDigest(tokens))) throw new TierSyncError('stored state is for other tokens', 'ERR_CHECKSUM');
      const need = Math.ceil((HEADER_BYTES + h.bytes) / this.pageBytes);
      // Pages evicted between lookup and load come back in `missing`: then the state is incomplete (recompute).
      if (hit.pages.length < need || loaded.missing.some((i) => i < need)) return null;
      const byTier = loaded.byTier;
      timings.load = elapsed(t0);
      t0 = performance.now();
      file = FileHandle.open(tmp, { writable: true, create: true, truncate: true, direct: 'never' });
      const res = await this.tierSync.engine.submit(new TransferBatch().add(arena, HEADER_BYTES, file, 0, h.bytes), { expected: Uint32Array.of(h.crc) });
      file.close();
      file = undefined;
      if (res.mismatches?.length) throw new TierSyncError('stored state failed its CRC32C check', 'ERR_CHECKSUM');
      timings.pagesToFile = elapsed(t0);
      t0 = performance.now();
      await sequence.loadStateFromFile(tmp, { acceptRisk: true });
      timings.loadFile = elapsed(t0);
      const got = sequence.contextTokens;
      if (got.length !== tokens.length || got.some((t, i) => t !== tokens[i])) throw new TierSyncError('restored sequence holds other tokens than asked for', 'ERR_CHECKSUM');
      return { tokens: tokens.length, pages: need, bytes: h.bytes, byTier, timings };
    } finally {
      file?.close();
      arena?.close();
      fs.rmSync(tmp, { force: true });
    }
  }

  close() {
    return this.tierSync.close();
  }
}
