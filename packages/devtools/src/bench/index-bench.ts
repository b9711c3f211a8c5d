/**
 * `tiersync bench index`: the block index at scale. Builds an index of `pages` pages (chains of 2,048 pages of
 * Llama-3-8B's layout, stored through the public beginStore/commitCopies API in one transaction per batch), then
 * measures:
 *  - lookupPrefix of a 2,048-page chain: warm (segments cached; the steady state for active contexts), uncached
 *    (the index's segment cache cleared before each lookup: the SQLite path, as for a working set larger than the
 *    cache) and after a reopen (first lookup of each kept chain in a freshly opened index: SQLite's own page cache
 *    empty too), p50/p99 in microseconds;
 *  - the index work of storing 2,048 new pages: beginStore + commitCopies (keys hashed beforehand; the hashing
 *    time is reported apart), p50 in ms;
 *  - durable one-page stores per second with the index opened synchronous='full' (beginStore, whose pending copy
 *    recovery drops anyway, commits without an fsync; commitCopies fsyncs), and the transactions per second that
 *    makes (two per store, the figure earlier versions reported as durable commits/s);
 *  - resident memory of the process after all of it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BlockIndex, createNamespace, kvLayoutPreset, pageKeys, type Namespace } from '@tiersync/core';

export interface IndexBenchOptions {
  /** Pages in the index before measuring. Default 1,000,000. */
  pages?: number;
  /** Folder for the database (a temporary folder inside it is removed afterwards). Default: OS temp folder. */
  dir?: string;
  /** Progress lines. Default: none. */
  log?: (line: string) => void;
  /** Timed lookups per figure. Default 500. */
  lookups?: number;
  /** Timed 2,048-page stores. Default 40. */
  stores?: number;
}

export interface IndexBenchReport {
  suite: 'index';
  pages: number;
  lookup: { p50Us: number; p99Us: number; coldUs: number; uncachedP50Us: number; uncachedP99Us: number; reopenP50Us: number; reopenP99Us: number; chainPages: number };
  store: { p50Ms: number; p99Ms: number; pages: number; hashP50Ms: number };
  /** Transactions per second of the durable one-page stores (two per store; one of them fsyncs). */
  durableCommitsPerSec: number;
  /** Durable one-page stores (beginStore + commitCopies, synchronous='full') per second. */
  durableStoresPerSec: number;
  rssMiB: number;
  build: { seconds: number; pagesPerSec: number; fileMiB: number };
  targets: { lookupP50Us: number; lookupP99Us: number; uncachedP50Us: number; uncachedP99Us: number; storeP50Ms: number; rssMiB: number };
  met: { lookupP50: boolean; lookupP99: boolean; uncachedP50: boolean; uncachedP99: boolean; storeP50: boolean; rss: boolean };
}

const CHAIN = 2048;
const TARGETS = { lookupP50Us: 150, lookupP99Us: 1000, uncachedP50Us: 1000, uncachedP99Us: 3000, storeP50Ms: 1, rssMiB: 400 };

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const round = (v: number, d = 1) => Math.round(v * 10 ** d) / 10 ** d;

/** A chain of CHAIN pages with tokens derived from `seed` (xorshift), so every chain is distinct. */
function chainTokens(ns: Namespace, seed: number): Uint32Array {
  const t = new Uint32Array(CHAIN * ns.layout.tokensPerPage);
  let x = (seed * 2654435761) ^ 0x9e3779b9 || 1;
  for (let i = 0; i < t.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    t[i] = (x >>> 0) % 128_256;
  }
  return t;
}

function storeChain(index: BlockIndex, ns: Namespace, keys: readonly string[], tier: string, pageBytes: number): void {
  const pages = keys.map((key, i) => ({ key, parent: i === 0 ? null : keys[i - 1]!, position: i, length: pageBytes, location: key, crc32c: i }));
  const { fresh } = index.beginStore(ns.id, tier, pages);
  index.commitCopies(fresh.map((key) => ({ key, tier, durable: tier === 'fs' })));
}

export async function runIndexBench(options: IndexBenchOptions = {}): Promise<IndexBenchReport> {
  const total = Math.max(CHAIN, Math.floor(options.pages ?? 1_000_000));
  const log = options.log ?? (() => {});
  const lookups = options.lookups ?? 500;
  const stores = options.stores ?? 40;
  const dir = fs.mkdtempSync(path.join(options.dir ?? os.tmpdir(), 'tiersync-index-bench-'));
  const file = path.join(dir, 'index.sqlite');
  const layout = kvLayoutPreset('llama-3-8b');
  const ns = createNamespace({ model: 'bench/llama-3-8b', layout });
  const openIndex = (synchronous: 'normal' | 'full' = 'normal') =>
    BlockIndex.open({
      path: file,
      synchronous,
      tiers: [
        { kind: 'hbm', persistent: false },
        { kind: 'host', persistent: false },
        { kind: 'fs', persistent: true },
      ],
    });
  let index = openIndex();
  try {
    index.registerNamespace({ id: ns.id, model: ns.model, layoutFingerprint: ns.layoutFingerprint, tokensPerPage: layout.tokensPerPage });

    // Build: chains of 2,048 pages, one beginStore and one commitCopies transaction per chain.
    const chains = Math.ceil(total / CHAIN);
    const kept: string[][] = [];
    const keepEvery = Math.max(1, Math.floor(chains / 32));
    const t0 = performance.now();
    let built = 0;
    for (let c = 0; c < chains; c++) {
      let keys = pageKeys(ns, chainTokens(ns, c + 1));
      if (built + keys.length > total) keys = keys.slice(0, total - built);
      storeChain(index, ns, keys, c % 3 === 0 ? 'fs' : 'host', layout.bytesPerPage);
      built += keys.length;
      if (keys.length === CHAIN && c % keepEvery === 0 && kept.length < 32) kept.push(keys);
      if (c % 64 === 0) log(`index bench: built ${built.toLocaleString('en-US')} / ${total.toLocaleString('en-US')} pages`);
    }
    const buildS = (performance.now() - t0) / 1000;
    log(`index bench: ${built.toLocaleString('en-US')} pages in ${buildS.toFixed(1)} s`);

    // Lookups. Cold: first lookup of a chain through SQLite; warm: the 32 kept chains in rotation, all cached.
    index._internal.cache.clear();
    let s = performance.now();
    const first = index.lookupPrefix(kept[0]!);
    const coldUs = (performance.now() - s) * 1000;
    if (first.length !== CHAIN) throw new Error(`index bench: expected a ${CHAIN}-page hit, got ${first.length}`);
    for (const k of kept) index.lookupPrefix(k);
    const warm: number[] = [];
    for (let i = 0; i < lookups; i++) {
      const keys = kept[i % kept.length]!;
      s = performance.now();
      const hit = index.lookupPrefix(keys);
      warm.push((performance.now() - s) * 1000);
      if (hit.length !== CHAIN) throw new Error('index bench: warm lookup missed');
    }
    const uncached: number[] = [];
    for (let i = 0; i < Math.min(lookups, 100); i++) {
      const keys = kept[i % kept.length]!;
      index._internal.cache.clear();
      s = performance.now();
      index.lookupPrefix(keys);
      uncached.push((performance.now() - s) * 1000);
    }
    warm.sort((a, b) => a - b);
    uncached.sort((a, b) => a - b);
    log(`index bench: lookup of ${CHAIN} pages warm p50 ${round(percentile(warm, 50))} us, uncached p50 ${round(percentile(uncached, 50))} us`);

    // Stores of 2,048 new pages each (index work only; hashing measured apart).
    const storeMs: number[] = [];
    const hashMs: number[] = [];
    for (let i = 0; i < stores + 3; i++) {
      const tokens = chainTokens(ns, chains + 10 + i);
      s = performance.now();
      const keys = pageKeys(ns, tokens);
      const h = performance.now() - s;
      s = performance.now();
      storeChain(index, ns, keys, 'host', layout.bytesPerPage);
      const ms = performance.now() - s;
      if (i >= 3) {
        storeMs.push(ms);
        hashMs.push(h);
      }
    }
    storeMs.sort((a, b) => a - b);
    hashMs.sort((a, b) => a - b);
    log(`index bench: store of ${CHAIN} new pages p50 ${round(percentile(storeMs, 50), 2)} ms (hashing ${round(percentile(hashMs, 50), 2)} ms)`);

    // After a reopen: only the chains on the persistent tier survive recovery (one chain in three is stored on fs).
    // The index is reopened synchronous='full' for the durable stores that follow (the mode does not touch reads).
    index.close();
    index = openIndex('full');
    const reopened: number[] = [];
    for (const keys of kept) {
      s = performance.now();
      const hit = index.lookupPrefix(keys);
      const us = (performance.now() - s) * 1000;
      if (hit.length === CHAIN) reopened.push(us);
    }

    // Durable one-page stores (beginStore + commitCopies = 2 transactions), the index opened synchronous='full'.
    const durableTokens = chainTokens(ns, 999_999);
    const durableKeys = pageKeys(ns, durableTokens);
    let durableStores = 0;
    s = performance.now();
    for (let i = 0; i < durableKeys.length && performance.now() - s < 2000; i++) {
      storeChain(index, ns, [durableKeys[i]!], 'fs', layout.bytesPerPage);
      durableStores++;
    }
    const durableStoresPerSec = durableStores / ((performance.now() - s) / 1000);
    const durableCommitsPerSec = 2 * durableStoresPerSec;
    log(`index bench: ${Math.round(durableStoresPerSec)} durable one-page stores/s (${Math.round(durableCommitsPerSec)} transactions/s)`);

    reopened.sort((a, b) => a - b);
    log(`index bench: first lookup after a reopen p50 ${round(percentile(reopened, 50))} us (${reopened.length} chains)`);

    const rssMiB = process.memoryUsage().rss / 2 ** 20;
    const fileMiB = fs.statSync(file).size / 2 ** 20;
    const p50Us = percentile(warm, 50);
    const p99Us = percentile(warm, 99);
    const storeP50 = percentile(storeMs, 50);
    return {
      suite: 'index',
      pages: built,
      lookup: {
        p50Us: round(p50Us),
        p99Us: round(p99Us),
        coldUs: round(coldUs),
        uncachedP50Us: round(percentile(uncached, 50)),
        uncachedP99Us: round(percentile(uncached, 99)),
        reopenP50Us: round(percentile(reopened, 50)),
        reopenP99Us: round(percentile(reopened, 99)),
        chainPages: CHAIN,
      },
      store: { p50Ms: round(storeP50, 3), p99Ms: round(percentile(storeMs, 99), 3), pages: CHAIN, hashP50Ms: round(percentile(hashMs, 50), 3) },
      durableCommitsPerSec: Math.round(durableCommitsPerSec),
      durableStoresPerSec: Math.round(durableStoresPerSec),
      rssMiB: round(rssMiB),
      build: { seconds: round(buildS, 2), pagesPerSec: Math.round(built / buildS), fileMiB: round(fileMiB) },
      targets: TARGETS,
      met: {
        lookupP50: p50Us <= TARGETS.lookupP50Us,
        lookupP99: p99Us <= TARGETS.lookupP99Us,
        uncachedP50: percentile(uncached, 50) <= TARGETS.uncachedP50Us,
        uncachedP99: percentile(uncached, 99) <= TARGETS.uncachedP99Us,
        storeP50: storeP50 <= TARGETS.storeP50Ms,
        rss: rssMiB <= TARGETS.rssMiB,
      },
    };
  } finally {
    index.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
