/**
 * A request trace as a workload both replays run: the simulator through the planner (page ids) and the live
 * hierarchy (`tiersync demo`, token arrays hashed into page keys). Both must see the same pages, so this module is
 * the one place that says what a request's pages are.
 *
 * Each trace block of `blockTokens` tokens becomes `blockTokens / tokensPerPage` pages. The live replay gives every
 * page tokens that encode its block id and its place in the block (see {@link requestTokens}), so two pages get
 * equal chained keys exactly when their blocks and everything before them are equal; the simulator gives them the
 * same dense id under the same rule ({@link workloadPages}), without hashing.
 */
import { configError } from './errors.js';
import type { LlmTrace } from './trace/types.js';

/** The pages of each request of a trace, as dense ids of chained page identities. */
export interface Workload {
  /** Tokens per page. */
  tokensPerPage: number;
  /** Tokens per trace block. */
  blockTokens: number;
  /** Page ids of each request, in order; equal id = equal chained key live. */
  pages: Uint32Array[];
  /** Trace block ids of each request (what the live replay turns into tokens). */
  blocks: Uint32Array[];
  /** Distinct page ids: ids are in [0, distinctPages). */
  distinctPages: number;
}

/**
 * Pages per block, checked.
 * @throws TierSyncError ERR_CONFIG when `tokensPerPage` does not divide the trace's blocks
 */
export function pagesPerBlock(blockTokens: number, tokensPerPage: number): number {
  if (!Number.isSafeInteger(tokensPerPage) || tokensPerPage < 1 || blockTokens % tokensPerPage !== 0) {
    throw configError(`the layout's tokensPerPage (${tokensPerPage}) must divide the trace's ${blockTokens}-token blocks, so pages line up with blocks`);
  }
  return blockTokens / tokensPerPage;
}

/**
 * The first `requests` requests of `trace` (default all) as pages of `tokensPerPage` tokens. Every block of a
 * request is replayed as full pages (a prompt's partial last block is replayed whole, as the live demo stores it).
 * @throws TierSyncError ERR_CONFIG when `tokensPerPage` does not divide the trace's blocks
 */
export function workloadPages(trace: LlmTrace, tokensPerPage: number, requests = trace.requests.length): Workload {
  const per = pagesPerBlock(trace.blockTokens, tokensPerPage);
  const n = Math.min(requests, trace.requests.length);
  // (parent id, block, slot in block) -> id. Parent -1 is the root. One Map per parent keeps keys numeric.
  const children = new Map<number, Map<number, number>>();
  let next = 0;
  const pages: Uint32Array[] = [];
  const blocks: Uint32Array[] = [];
  for (let r = 0; r < n; r++) {
    const req = trace.requests[r]!;
    const out = new Uint32Array(req.pages.length * per);
    let parent = -1;
    for (let b = 0; b < req.pages.length; b++) {
      for (let s = 0; s < per; s++) {
        let kids = children.get(parent);
        if (!kids) children.set(parent, (kids = new Map()));
        const key = req.pages[b]! * per + s;
        let id = kids.get(key);
        if (id === undefined) kids.set(key, (id = next++));
        out[b * per + s] = id;
        parent = id;
      }
    }
    pages.push(out);
    blocks.push(req.pages);
  }
  return { tokensPerPage, blockTokens: trace.blockTokens, pages, blocks, distinctPages: next };
}

/**
 * The prompt tokens of a request whose blocks are `blocks`: page s of block b starts with the tokens `b, s`, then a
 * pattern; so equal (block, slot) pairs give equal pages and different ones different pages. Deterministic.
 */
export function requestTokens(blocks: Uint32Array, blockTokens: number, tokensPerPage: number): Uint32Array {
  const tokens = new Uint32Array(blocks.length * blockTokens);
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i]!;
    for (let j = 0; j < blockTokens; j++) {
      const at = j % tokensPerPage;
      tokens[i * blockTokens + j] = at === 0 ? b : at === 1 ? Math.floor(j / tokensPerPage) : (b * 2654435761 + j * 40503) % 128_000;
    }
  }
  return tokens;
}
