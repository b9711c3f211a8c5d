// Token-range pages of llama.cpp sequence state in tiersync: sessions that share a prefix share its pages, and a
// state is rebuilt for the longest cached prefix of any token list.
//
// A page is the KV of `tokensPerPage` consecutive tokens for every layer, in llama.cpp's own row format:
//   [layer 0 K rows][layer 0 V rows][layer 1 K rows][layer 1 V rows] ...   (each run: tokensPerPage rows)
// which is exactly tiersync's page size for the layout (2 x layers x KV heads x head size x 2 bytes x tokens).
// Keys are tiersync's chained page keys of the token ids (hash of the parent key, the page's tokens and the
// namespace), so equal keys mean equal KV: the KV of token t depends only on tokens 0..t (causal attention), and the
// namespace binds the engine identity (weights digest, KV type, V layout).
//
// The tokens after the last full page (the tail, fewer than tokensPerPage) are stored too, as one shorter entry in the
// same row format under a key of its own: SHA-256 of the namespace id, the last full page's key and the tail's token
// ids. A tail belongs to one conversation (it is never shared), so a session comes back exactly, not minus a partial
// page to recompute.
//
// save(sequence): the pages of the sequence's full token pages that no tier holds yet are cut out of the state file
//   llama.cpp writes (tmpfs), straight into a host arena by the native engine (2 x layers runs per page), then stored.
//   A sequence whose pages are all cached already writes no file at all.
// restore(sequence, tokens): lookup of the longest cached page prefix, load into a host arena, then a state file for
//   exactly that prefix is assembled (small headers from JS, KV rows by the native engine) and llama.cpp loads it.
//   The caller evaluates the remaining tokens. The layout relied on is in seq-state-layout.mjs.
//
// Only states with V stored per token (flash attention on) can be paged; a transposed V (flash attention off) is
// refused with ERR_UNSUPPORTED: use SessionStore (whole-state blobs) there.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { FileHandle, HostArena, TierSync, TierSyncError, TransferBatch } from '@tiersync/core';
import { planSeqState, readSeqStateLayout } from './seq-state-layout.mjs';
import { modelGeometry, tmpDir } from './session-store.mjs';

const GGML_F16 = 1;
const GGML_F32 = 0;

/**
 * The identity of a context's KV pages: what must match for a page to be usable. Context size and sequence count
 * change neither the bytes of a token's K/V rows nor their order, so they are not part of it (a rebuilt state is
 * written for the target context); the weights, the KV type and the V layout are.
 */
export function pageIdentity(context, { kvCacheType = 'f16', tokensPerPage = 16 } = {}) {
  const { digest, layers, kvHeads, headDim } = modelGeometry(context);
  if (kvCacheType !== 'f16' && kvCacheType !== 'f32') throw new TierSyncError(`kvCacheType must be f16 or f32, got ${kvCacheType}`, 'ERR_INVALID_ARGUMENT');
  const vRows = context.flashAttention === true;
  return {
    fingerprint: `gguf-sha256:${digest.slice(0, 32)}/kv${kvCacheType}-${vRows ? 'vrows' : 'vtrans'}`,
    layout: { layers, kvHeads, headDim, dtype: kvCacheType === 'f32' ? 'fp32' : 'fp16', tokensPerPage },
    vRows,
    ggmlType: kvCacheType === 'f32' ? GGML_F32 : GGML_F16,
    rowBytes: kvHeads * headDim * (kvCacheType === 'f32' ? 4 : 2),
  };
}

const elapsed = (t0) => performance.now() - t0;

export class PrefixStore {
  /** Opens a TierSync bound to `context`'s page identity. `tiers` as in TierSyncConfig (fastest first). */
  static async open(context, { tiers, index, tokensPerPage = 16, kvCacheType = 'f16', threads, tmp, stagingPages } = {}) {
    const id = pageIdentity(context, { kvCacheType, tokensPerPage });
    if (!id.vRows) throw new TierSyncError('token-range pages need V stored per token: create the context with flashAttention: true', 'ERR_UNSUPPORTED');
    const ts = new TierSync({
      model: id.fingerprint,
      layout: id.layout,
      tiers,
      ...(index ? { index } : {}),
      ...(threads ? { threads } : {}),
      ...(stagingPages ? { stagingPages } : {}),
    });
    await ts.open();
    const store = new PrefixStore(ts, { tmp, kvCacheType, nStream: context.totalSequences });
    store.#sweepStaleScratch();
    return store;
  }

  /** Removes scratch files of processes that died without closing their store (a crash in the engine leaves one). */
  #sweepStaleScratch() {
    let names = [];
    try {
      names = fs.readdirSync(this.tmp);
    } catch {
      return;
    }
    for (const name of names) {
      const m = /^tiersync-seq-(\d+)-\d+\.bin$/.exec(name);
      if (!m || Number(m[1]) === process.pid) continue;
      try {
        process.kill(Number(m[1]), 0);
      } catch (e) {
        if (e.code === 'ESRCH') fs.rmSync(path.join(this.tmp, name), { force: true });
      }
    }
  }

  #seq = 0;

  constructor(tierSync, { tmp, kvCacheType = 'f16', nStream = 1 } = {}) {
    this.tierSync = tierSync;
    this.fingerprint = tierSync.namespace.model;
    this.kvCacheType = kvCacheType;
    this.tmp = tmp ?? tmpDir();
    this.tokensPerPage = tierSync.tokensPerPage;
    this.pageBytes = tierSync.pageBytes;
    const l = tierSync.namespace.layout;
    this.layers = l.layers;
    this.rowBytes = l.bytesPerToken / (2 * l.layers); // one K (or V) row of one token in one layer
    this.ggmlType = kvCacheType === 'f32' ? GGML_F32 : GGML_F16;
    if (2 * this.layers * this.tokensPerPage * this.rowBytes !== this.pageBytes) {
      throw new TierSyncError(`page size ${this.pageBytes} is not 2 x ${this.layers} layers x ${this.tokensPerPage} tokens x ${this.rowBytes} B rows`, 'ERR_GEOMETRY_MISMATCH');
    }
    /** n_stream of the engine's context, learnt from its saved files (a rebuilt state must name it). */
    this.nStream = nStream;
  }

  /** Refuses a sequence whose page identity is not this store's, before any state moves. */
  #check(sequence) {
    const id = pageIdentity(sequence.context, { kvCacheType: this.kvCacheType, tokensPerPage: this.tokensPerPage });
    if (id.fingerprint !== this.fingerprint) {
      throw new TierSyncError(`engine fingerprint mismatch: this store holds pages of '${this.fingerprint}', the sequence is '${id.fingerprint}'`, 'ERR_GEOMETRY_MISMATCH');
    }
  }

  #tmpPath() {
    return path.join(this.tmp, `tiersync-seq-${process.pid}-${++this.#seq}.bin`);
  }

  // Saves and restores reuse one host arena and one tmpfs file (grown to the largest state seen) while no other call
  // holds them: a fresh 250 MiB arena or tmpfs file costs a page fault or a page allocation per 4 KiB on first touch,
  // a reused one does not (llama.cpp's save truncates the file, so this helps restores most). A concurrent call gets
  // fresh ones. close() frees both.
  #scratch = { busy: false, arena: undefined, file: undefined };

  #leaseScratch(bytes) {
    const sc = this.#scratch;
    if (sc.busy) {
      const arena = HostArena.create({ capacity: Math.max(bytes, 1), hugePages: true });
      const file = this.#tmpPath();
      return { arena, file, release: () => (arena.close(), fs.rmSync(file, { force: true })) };
    }
    sc.busy = true;
    if (!sc.arena || sc.arena.capacity < bytes) {
      sc.arena?.close();
      sc.arena = undefined;
      sc.arena = HostArena.create({ capacity: Math.max(bytes, 1), hugePages: true });
    }
    sc.file ??= this.#tmpPath();
    return { arena: sc.arena, file: sc.file, release: () => (sc.busy = false) };
  }

  /** Offset of layer `l`'s K (kv 0) or V (kv 1) run inside an entry of `rows` tokens (a page: tokensPerPage). */
  #inPage(l, kv, rows = this.tokensPerPage) {
    return (2 * l + kv) * rows * this.rowBytes;
  }

  /** Bytes of an entry of `rows` tokens. */
  #entryBytes(rows) {
    return 2 * this.layers * rows * this.rowBytes;
  }

  /** Key of the tail of `tokens` (after its full pages `keys`): bound to the namespace, the prefix and the tail's ids. */
  #tailKey(keys, tokens) {
    const h = createHash('sha256').update(`tiersync-seq-tail-v1\0${this.tierSync.namespace.id}\0${keys.at(-1) ?? ''}\0`);
    h.update(Buffer.from(Uint32Array.from(tokens.slice(keys.length * this.tokensPerPage)).buffer));
    return h.digest('hex');
  }

  /** Tokens of `tokens`' longest prefix whose pages are cached (a multiple of tokensPerPage; no I/O). */
  cachedTokens(tokens) {
    return this.tierSync.lookup(tokens).tokens;
  }

  /**
   * Saves the full token pages of `sequence` that no tier holds yet, and its tail. Returns { tokens, pages, stored
   * (entries written, the tail included), existing (full pages already cached), tail (its tokens), timings } with
   * timings in ms: saveFile (llama.cpp writes the state to tmpfs), fileToPages (native copy into the arena), store.
   * `options.retention` (`{ expectedReturnMs }` or `{ finished: true }`) is a soft hint for every page of the
   * state, stored now or before (TierSync store option `retention`).
   */
  async save(sequence, { retention } = {}) {
    this.#check(sequence);
    const T = this.tokensPerPage;
    const tokens = sequence.contextTokens.slice();
    const full = Math.floor(tokens.length / T);
    const tail = tokens.length - full * T;
    const timings = {};
    if (tokens.length === 0) return { tokens: 0, pages: 0, stored: 0, existing: 0, tail: 0, timings };
    let t0 = performance.now();
    const keys = this.tierSync.keysOf(tokens);
    const tailKey = tail ? this.#tailKey(keys, tokens) : undefined;
    const { present } = this.tierSync.lookupKeys(tailKey ? [...keys, tailKey] : keys);
    // Entries to write: absent full pages by index, and the tail (index `full`) when absent.
    const absent = present.map((_, i) => i).filter((i) => !present[i]);
    // Pages already cached take the hint now; the ones written below carry it in their store.
    if (retention) this.tierSync.retain(present.flatMap((p, i) => (p ? [i < full ? keys[i] : tailKey] : [])), retention);
    if (absent.length === 0) return { tokens: tokens.length, pages: full, stored: 0, existing: full, tail, timings };
    const scratch = this.#leaseScratch(absent.length * this.pageBytes);
    const { arena, file: tmp } = scratch;
    let file;
    try {
      await sequence.saveStateToFile(tmp);
      timings.saveFile = elapsed(t0);
      t0 = performance.now();
      const state = readSeqStateLayout(tmp);
      this.#checkState(state, tokens);
      this.nStream = state.nStream;
      file = FileHandle.open(tmp, { direct: 'never' });
      const batch = new TransferBatch();
      const run = T * this.rowBytes;
      absent.forEach((p, j) => {
        const rows = p < full ? T : tail;
        for (let l = 0; l < this.layers; l++) {
          const L = state.layers[l];
          batch.add(file, L.kOffset + p * run, arena, j * this.pageBytes + this.#inPage(l, 0, rows), rows * this.rowBytes);
          batch.add(file, L.vOffset + p * run, arena, j * this.pageBytes + this.#inPage(l, 1, rows), rows * this.rowBytes);
        }
      });
      await this.tierSync.engine.submit(batch);
      file.close();
      file = undefined;
      timings.fileToPages = elapsed(t0);
      t0 = performance.now();
      const r = await this.tierSync.storeKeys(
        absent.map((p) => (p < full ? keys[p] : tailKey)),
        absent.map((p, j) => ({ arena, offset: j * this.pageBytes, length: p < full ? this.pageBytes : this.#entryBytes(tail) })),
        retention ? { retention } : {},
      );
      timings.store = elapsed(t0);
      const storedPages = absent.filter((p) => p < full).length;
      return { tokens: tokens.length, pages: full, stored: r.stored, existing: full - storedPages, tail, dropped: r.dropped, timings };
    } finally {
      file?.close();
      scratch.release();
    }
  }

  #checkState(state, tokens) {
    if (state.tokens.length !== tokens.length || state.tokens.some((t, i) => t !== tokens[i])) {
      throw new TierSyncError('the saved state holds other tokens than the sequence reports', 'ERR_PROTOCOL');
    }
    if (state.layers.length !== this.layers) throw new TierSyncError(`the saved state has ${state.layers.length} layers, the layout ${this.layers}`, 'ERR_GEOMETRY_MISMATCH');
    for (const [l, L] of state.layers.entries()) {
      if (L.kType !== this.ggmlType || L.vType !== this.ggmlType || L.kRowBytes !== this.rowBytes || L.vRowBytes !== this.rowBytes) {
        throw new TierSyncError(`layer ${l} of the saved state has K/V rows of ${L.kRowBytes}/${L.vRowBytes} B (types ${L.kType}/${L.vType}), the layout ${this.rowBytes} B (type ${this.ggmlType})`, 'ERR_GEOMETRY_MISMATCH');
      }
    }
  }

  /**
   * Restores into the empty `sequence` the longest cached prefix of `tokens` (at most the sequence's context size):
   * its cached full pages, plus the tail when `tokens` is exactly a saved sequence's tokens. Returns null when
   * nothing is cached, else { tokens (restored count), pages, tail (rows of the tail), bytes, byTier, timings } with
   * timings in ms: lookup, load (tiers -> host arena), pagesToFile (state file assembled on tmpfs), loadFile
   * (llama.cpp reads it). The caller evaluates tokens[restored..].
   * @throws TierSyncError ERR_GEOMETRY_MISMATCH when the sequence's identity is not the store's (nothing loaded);
   *   ERR_INVALID_ARGUMENT when the sequence is not empty; ERR_PROTOCOL when llama.cpp refuses the rebuilt state
   *   (the sequence is then left empty by llama.cpp; the index and tiers are untouched).
   */
  /**
   * A soft retention hint for the cached pages of `tokens` (their full pages and, when cached, the tail page): a
   * session finished (`{ finished: true }`) or expected back (`{ expectedReturnMs }`). Pages not cached are skipped.
   */
  retain(tokens, retention) {
    if (tokens.length === 0) return;
    const keys = this.tierSync.keysOf(tokens);
    const full = Math.floor(tokens.length / this.tokensPerPage);
    const tailKey = tokens.length > full * this.tokensPerPage ? this.#tailKey(keys, tokens) : undefined;
    this.tierSync.retain(tailKey ? [...keys, tailKey] : keys, retention);
  }

  async restore(sequence, tokens) {
    this.#check(sequence);
    if (sequence.contextTokens.length !== 0) throw new TierSyncError(`restore needs an empty sequence, this one holds ${sequence.contextTokens.length} tokens`, 'ERR_INVALID_ARGUMENT');
    const T = this.tokensPerPage;
    const timings = {};
    let t0 = performance.now();
    const limit = Math.min(tokens.length, sequence.contextSize);
    const hit = this.tierSync.lookup(tokens.slice(0, limit));
    const full = Math.floor(limit / T);
    // The tail counts only when every full page before it is cached (it continues exactly that prefix).
    const tail = limit - full * T;
    const tailHit = tail && hit.pages.length === full ? this.tierSync.lookupKeys([this.#tailKey(hit.keys, tokens.slice(0, limit))]) : undefined;
    const withTail = Boolean(tailHit?.present[0]);
    timings.lookup = elapsed(t0);
    if (hit.pages.length === 0 && !withTail) return null;
    let file;
    const entries = hit.pages.length + (withTail ? 1 : 0);
    const scratch = this.#leaseScratch(entries * this.pageBytes);
    const { arena, file: tmp } = scratch;
    try {
      t0 = performance.now();
      const [loaded, tailLoaded] = await Promise.all([
        hit.pages.length ? this.tierSync.load(hit, hit.pages.map((_, i) => ({ arena, offset: i * this.pageBytes, length: this.pageBytes }))) : { missing: [], byTier: {} },
        withTail ? this.tierSync.load(tailHit, [{ arena, offset: hit.pages.length * this.pageBytes, length: this.#entryBytes(tail) }]) : undefined,
      ]);
      // A page evicted between lookup and load ends the usable prefix there (and drops the tail).
      const pages = loaded.missing.length ? Math.min(...loaded.missing) : hit.pages.length;
      const tailRows = withTail && pages === full && tailLoaded.missing.length === 0 ? tail : 0;
      const byTier = { ...loaded.byTier };
      if (tailRows) for (const [k, v] of Object.entries(tailLoaded.byTier)) byTier[k] = (byTier[k] ?? 0) + v;
      timings.load = elapsed(t0);
      if (pages === 0 && !tailRows) return null;
      t0 = performance.now();
      const prefix = tokens.slice(0, pages * T + tailRows);
      const plan = planSeqState({ tokens: prefix, nStream: this.nStream, nLayer: this.layers, kType: this.ggmlType, vType: this.ggmlType, kRowBytes: this.rowBytes, vRowBytes: this.rowBytes });
      // Not O_TRUNC: the file keeps its tmpfs pages between restores; llama.cpp wants its exact size.
      const fd = fs.openSync(tmp, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
      try {
        fs.ftruncateSync(fd, plan.size);
        for (const r of plan.regions) fs.writeSync(fd, r.bytes, 0, r.bytes.length, r.offset);
      } finally {
        fs.closeSync(fd);
      }
      file = FileHandle.open(tmp, { writable: true, direct: 'never' });
      const batch = new TransferBatch();
      const run = T * this.rowBytes;
      for (let p = 0; p < pages + (tailRows ? 1 : 0); p++) {
        // Entry `pages` (when present) is the tail: `tailRows` rows per run, loaded right after the full pages.
        const rows = p < pages ? T : tailRows;
        const at = p < pages ? p : hit.pages.length;
        for (let l = 0; l < this.layers; l++) {
          batch.add(arena, at * this.pageBytes + this.#inPage(l, 0, rows), file, plan.layers[l].kOffset + p * run, rows * this.rowBytes);
          batch.add(arena, at * this.pageBytes + this.#inPage(l, 1, rows), file, plan.layers[l].vOffset + p * run, rows * this.rowBytes);
        }
      }
      await this.tierSync.engine.submit(batch);
      file.close();
      file = undefined;
      timings.pagesToFile = elapsed(t0);
      t0 = performance.now();
      try {
        await sequence.loadStateFromFile(tmp, { acceptRisk: true });
      } catch (e) {
        throw new TierSyncError(`llama.cpp refused the rebuilt state of ${prefix.length} tokens: ${e instanceof Error ? e.message : e}`, 'ERR_PROTOCOL', { cause: e });
      }
      timings.loadFile = elapsed(t0);
      const got = sequence.contextTokens;
      if (got.length !== prefix.length || got.some((t, i) => t !== prefix[i])) throw new TierSyncError('restored sequence holds other tokens than asked for', 'ERR_CHECKSUM');
      return { tokens: prefix.length, pages, tail: tailRows, bytes: pages * this.pageBytes + (tailRows ? this.#entryBytes(tailRows) : 0), byTier, timings };
    } finally {
      file?.close();
      scratch.release();
    }
  }

  async close() {
    const sc = this.#scratch;
    sc.arena?.close();
    sc.arena = undefined;
    if (sc.file) fs.rmSync(sc.file, { force: true });
    sc.file = undefined;
    await this.tierSync.close();
  }
}
