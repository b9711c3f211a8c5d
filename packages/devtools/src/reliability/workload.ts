/**
 * The crash scenario's workload, shared by the child that is killed and the parent that checks what survived:
 * the hierarchy's configuration, the universe of prompts, and page bytes derived from each page's key (so the
 * checker knows every page's exact bytes without keeping a copy of them).
 */
import path from 'node:path';
import type { HostArena } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import type { TierSyncConfig } from '@tiersync/core';

/** 2 layers x 2 KV heads x 64 dims, bf16, 16 tokens per page = 16 KiB pages (O_DIRECT-aligned). */
export const CRASH_LAYOUT = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
export const CRASH_PAGE_BYTES = 16 * 1024;
/** Distinct prompts, each of up to PROMPT_PAGES pages: at most 576 pages, far below the fs capacity (no fs eviction). */
export const PROMPTS = 48;
export const PROMPT_PAGES = 12;
/** Host tier of 48 pages: smaller than the working set, so stores demote while write-through is still queued. */
export const HOST_PAGES = 48;
export const FS_CAPACITY = '24MiB';

/**
 * Host tier (volatile) over an fs tier that receives every page by write-through; the index in a file. The fs tier
 * is the last one and is never full, so a page acknowledged durable leaves it only by an explicit delete.
 */
export function crashConfig(dir: string, options: { promoteOnHit?: boolean } = {}): TierSyncConfig {
  return {
    model: 'reliability-crash@1',
    layout: CRASH_LAYOUT,
    tiers: [
      { url: `host://?capacity=${HOST_PAGES * CRASH_PAGE_BYTES}`, highWatermark: 1, lowWatermark: 0.75 },
      { url: `fs://${path.join(dir, 'fs')}?capacity=${FS_CAPACITY}`, writeThrough: true },
    ],
    index: { path: path.join(dir, 'index.sqlite') },
    stagingPages: 16,
    threads: 2,
    promoteOnHit: options.promoteOnHit ?? true,
  };
}

/** The tokens of prompt `p` (its first `pages` pages). Prompts share no prefix. */
export function promptTokens(p: number, pages = PROMPT_PAGES): Uint32Array {
  return Uint32Array.from({ length: pages * 16 }, (_, i) => (p * 1_000_003 + i * 7 + 1) % 60_000);
}

/**
 * Writes (`check` false) or checks (`check` true) the page of `key` at `offset` of `arena`: an xorshift32 stream
 * (Marsaglia, 2003) seeded by the key. Returns false at the first word that differs.
 */
function pageStream(arena: HostArena, offset: number, length: number, key: PageKey, check: boolean): boolean {
  const view = arena.view(offset, length);
  const words = new Uint32Array(view.buffer, view.byteOffset, length >>> 2);
  let x = parseInt(key.slice(0, 8), 16) | 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    if (!check) words[i] = x >>> 0;
    else if (words[i] !== x >>> 0) return false;
  }
  return true;
}

/** Fills `length` bytes at `offset` of `arena` with the page of `key`. */
export function fillPage(arena: HostArena, offset: number, length: number, key: PageKey): void {
  pageStream(arena, offset, length, key, false);
}

/** True when the bytes at `offset` are exactly the page of `key`. */
export function pageMatches(arena: HostArena, offset: number, length: number, key: PageKey): boolean {
  return pageStream(arena, offset, length, key, true);
}
