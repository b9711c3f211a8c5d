/**
 * Layerwise loads: pages arrive layer group by layer group (every page's range r before any page's range r+1), so
 * an engine computes layer l while layer l+1 arrives.
 */
import { TierSyncError } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';
import { forgetBroken, readOrFail, readWhole, reportIntegrity, type LoadContext } from './read.js';
import type { HierarchyState } from './state.js';
import type { LayerEvent, LayerRange } from './types.js';

/**
 * The byte range of each layer group within a page, in page order (the page is the groups' parts laid out in group
 * order: keys/layout.ts). With `layersPerEvent`, groups are cut into runs of that many layers, assuming the engine
 * lays a group's part out layer-major (all tokens of layer l, then layer l+1), as vLLM's and llama.cpp's per-layer
 * KV buffers are.
 * @throws TierSyncError ERR_INVALID_ARGUMENT for a layersPerEvent that is not a positive integer.
 */
export function layerRanges(s: HierarchyState, options: { layersPerEvent?: number } = {}): LayerRange[] {
  const per = options.layersPerEvent;
  if (per !== undefined && (!Number.isSafeInteger(per) || per < 1)) throw new TierSyncError(`options.layersPerEvent must be an integer >= 1, got ${per}`, 'ERR_INVALID_ARGUMENT');
  const layout = s.namespace.layout;
  const out: LayerRange[] = [];
  let base = 0;
  for (const g of layout.groups) {
    const step = per ?? g.layers.length;
    const layerBytes = g.bytesPerTokenPerLayer * layout.tokensPerPage;
    for (let at = 0; at < g.layers.length; at += step) {
      const layers = g.layers.slice(at, at + step);
      out.push({ group: g.name, layers, offset: base + at * layerBytes, length: layers.length * layerBytes });
    }
    base += g.bytesPerPage;
  }
  return out;
}

/**
 * A layerwise load: pages whose fastest copy is on a tier with range reads arrive range by range, every page's
 * range r before any page's range r+1, and `onLayer` / `load:layer` report each range once it is in place for
 * every page. Range reads are memory tiers that need no checksum, and the fs tier, which verifies each range
 * against per-chunk CRC32Cs before reporting it (a failed chunk is an ERR_CHECKSUM outcome, never a hit). Pages on
 * other verifying tiers (object, peer, memory tiers with verify=true) are read whole and checked first, so the
 * first event waits for them: no event ever covers bytes not yet verified. A page whose ranged copy fails
 * mid-way is read whole from its next copy before the event of that range. Returns the indices found nowhere.
 */
export async function readLayerwise(s: HierarchyState, indices: readonly number[], ctx: LoadContext, ranges: readonly LayerRange[], onLayer: ((e: LayerEvent) => void) | undefined): Promise<number[]> {
  const { hit, keys, copies, into, result } = ctx;
  const tierOf = (i: number) => s.tiers.findIndex((t) => copies[i]!.some((c) => c.tier === t.name && c.state === 'ready'));
  const source = new Map<number, number>();
  for (const i of indices) {
    const t = tierOf(i);
    if (t >= 0 && s.tiers[t]!.driver.capabilities.rangeReads === true && hit.pages[i]!.length === s.pageBytes) source.set(i, t);
  }
  const rest = indices.filter((i) => !source.has(i));
  const wholeDone = readWhole(s, rest, ctx);
  wholeDone.catch(() => undefined); // awaited below; a rejection before then must not go unhandled
  const missing: number[] = [];
  const started = process.hrtime.bigint();
  for (const [r, range] of ranges.entries()) {
    const byTier = new Map<number, number[]>();
    for (const [i, t] of source) {
      let list = byTier.get(t);
      if (!list) byTier.set(t, (list = []));
      list.push(i);
    }
    const failed: number[] = [];
    await Promise.all(
      [...byTier].map(async ([t, list]) => {
        const tier = s.tiers[t]!;
        const outcomes = await readOrFail(
          s,
          tier,
          list.map((i) => ({ key: keys[i]!, into: { arena: into[i]!.arena, offset: into[i]!.offset + range.offset, length: range.length }, range: { offset: range.offset, length: range.length } })),
        );
        // A range that failed its chunk checksums (tiers that verify ranges, e.g. fs) is reported like a page.
        reportIntegrity(s, outcomes, tier.name);
        const broken: PageKey[] = [];
        outcomes.forEach((o, k) => {
          if (o.status === 'hit') return;
          const i = list[k]!;
          failed.push(i);
          if (o.status === 'miss' || o.error.code === 'ERR_CHECKSUM') broken.push(keys[i]!);
          // The rest of this page comes whole from its next copy.
          copies[i] = copies[i]!.filter((c) => c.tier !== tier.name);
        });
        forgetBroken(s, tier, broken);
      }),
    );
    if (failed.length) {
      for (const i of failed) source.delete(i);
      missing.push(...(await readWhole(s, failed, ctx)));
    }
    if (r === 0) missing.push(...(await wholeDone));
    const event: LayerEvent = { index: r, of: ranges.length, group: range.group, layers: range.layers, offset: range.offset, length: range.length, pages: indices.length - missing.length };
    s.emit('load:layer', event);
    onLayer?.(event);
  }
  // Pages that arrived range by range: counted once all their ranges are in place.
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const perTier = new Map<number, number[]>();
  for (const [i, t] of source) {
    let list = perTier.get(t);
    if (!list) perTier.set(t, (list = []));
    list.push(i);
  }
  for (const [t, list] of perTier) {
    const tier = s.tiers[t]!;
    let bytes = 0;
    for (const i of list) {
      bytes += hit.pages[i]!.length;
      ctx.servedBy.set(i, t);
    }
    result.loaded += list.length;
    result.bytes += bytes;
    result.byTier[tier.name] = (result.byTier[tier.name] ?? 0) + list.length;
    s.emit('transfer:completed', { op: 'load', tier: tier.name, pages: list.length, bytes, seconds });
  }
  return missing.sort((a, b) => a - b);
}
