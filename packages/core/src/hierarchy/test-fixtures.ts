/**
 * Shared setup of the hierarchy tests (tier-sync, keyed, layerwise, policies, concurrency): a three-tier TierSync
 * (hbm, host, fs) over a fresh temp folder, host arenas, and the cleanup of all of them. Test-only; it imports no
 * test runner, so each test file registers `afterEach(fixture.cleanup)` itself.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HostArena } from '@tiersync/native';
import { TierSync } from './tier-sync.js';
import type { TierSyncConfig } from './config.js';

/** 2 layers x 2 KV heads x 64 dims, bf16, 16 tokens per page = 16 KiB pages. */
export const layout = { tokensPerPage: 16, dtype: 'bf16', groups: [{ name: 'full', layers: 2, attention: { type: 'mha', kvHeads: 2, headDim: 64 } }] };
export const PAGE = 16 * 1024;

/** Settings merged into the hbm, host and fs tier configs, in that order. */
export type TierOverrides = Array<Record<string, unknown>>;

export interface HierarchyFixtureOptions {
  /** Model fingerprint of every hierarchy. */
  model: string;
  /** Prefix of the temp folders (under the OS temp folder). */
  dirPrefix: string;
  /** Watermarks of the hbm and host tiers. */
  watermarks: { high: number; low: number };
  /** Capacity of the fs tier, in pages. */
  fsPages: number;
  /** Default: `layout` (16 KiB pages). */
  layout?: Record<string, unknown>;
  /** Page size of `layout`. Default: PAGE. */
  page?: number;
  /** Config fields every hierarchy gets (e.g. promoteOnHit). */
  config?: Partial<TierSyncConfig>;
}

/** Config of a TierSync made with it, its hierarchies, temp folders and arenas; `cleanup` closes and removes them all. */
export function hierarchyFixture(o: HierarchyFixtureOptions) {
  const page = o.page ?? PAGE;
  const dirs: string[] = [];
  const open: TierSync[] = [];
  const arenas: HostArena[] = [];

  /** A fresh temp folder, removed by cleanup. */
  function tempDir(): string {
    const dir = mkdtempSync(path.join(os.tmpdir(), o.dirPrefix));
    dirs.push(dir);
    return dir;
  }

  /** Opens `ts`; cleanup closes it. */
  async function opened(ts: TierSync): Promise<TierSync> {
    await ts.open();
    open.push(ts);
    return ts;
  }

  /** hbm (`pages.hbm` pages), host (`pages.host` pages) and fs (`fsPages` pages) tiers, opened. */
  function hierarchy(pages: { hbm: number; host: number }, tiers: TierOverrides = [], extra: Partial<TierSyncConfig> = {}): Promise<TierSync> {
    const dir = tempDir();
    const marks = { highWatermark: o.watermarks.high, lowWatermark: o.watermarks.low };
    return opened(
      new TierSync({
        model: o.model,
        layout: o.layout ?? layout,
        ...o.config,
        tiers: [
          { url: `hbm://sim?capacity=${pages.hbm * page}`, ...marks, ...tiers[0] },
          { url: `host://?capacity=${pages.host * page}`, ...marks, ...tiers[1] },
          { url: `fs://${dir}/fs?capacity=${o.fsPages * page}`, ...tiers[2] },
        ],
        ...extra,
      } as TierSyncConfig),
    );
  }

  /** A host arena of `pages` pages; cleanup closes it. */
  function arena(pages: number): HostArena {
    const a = HostArena.create({ capacity: pages * page });
    arenas.push(a);
    return a;
  }

  async function cleanup(): Promise<void> {
    for (const t of open.splice(0)) await t.close();
    for (const a of arenas.splice(0)) a.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }

  return { hierarchy, arena, tempDir, opened, cleanup };
}

/** Tokens of a `pages`-page context derived from `seed`. */
export function context(seed: number, pages: number): Uint32Array {
  return Uint32Array.from({ length: pages * 16 }, (_, i) => (seed * 1_000_003 + i * 7) % 50_000);
}

/** A page key (64 hex digits) derived from `n`. */
export const key = (n: number) => n.toString(16).padStart(8, '0').repeat(8);
