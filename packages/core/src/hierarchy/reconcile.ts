/**
 * Reconciling the block index with what the persistent tiers hold, when a hierarchy opens.
 *
 * The index is a fast record, not the only truth: every persistent tier stores with each page its namespace,
 * parent and position (PageWrite.meta), besides key, length and CRC32C. So pages a tier holds that the index does
 * not know (a `:memory:` index, a lost or stale index file, a crash between a tier write and its index commit) are
 * adopted back into the index, never deleted: nothing acknowledged durable is lost because the index forgot it.
 * The one exception is a copy that contradicts the index's record of its key (another length or CRC32C: an older
 * page under a key deleted and stored again while its tier was out of the config).
 */
import type { EvictionPolicy } from '@tiersync/policy';
import type { PageInfo, PageKey, TierDriver } from '@tiersync/tiers';
import type { AdoptPage, BlockIndex } from '../index/index.js';

/** What reconcileTiers needs of each tier. */
export interface ReconcileTier {
  name: string;
  driver: TierDriver;
  policy: EvictionPolicy<string>;
}

export interface ReconcileOptions {
  /**
   * Namespace id that pages recorded without meta (written by an older format, or without `meta`) are adopted
   * under, as keyed pages (parent null, position 0). Default: the index's only registered namespace; with none or
   * several, such pages cannot be attributed and are left on the tier untouched.
   */
  namespace?: string;
}

/** What reconcileTiers found on one persistent tier. */
export interface TierAdoption {
  tier: string;
  /** Pages the tier holds. */
  held: number;
  /** Of those, pages the index already recorded on this tier. */
  known: number;
  /** Pages the index did not record on this tier, now recorded as ready, durable (unverified) copies with their CRC32C. */
  adopted: number;
  /** Of `adopted`, pages recorded without meta (adopted as keyed pages: parent null, position 0). */
  adoptedKeyed: number;
  /** Pages of namespaces this index has not registered (another model or tenant on a shared tier): left alone. */
  foreign: number;
  /** Pages without meta whose namespace cannot be known (see ReconcileOptions.namespace): left alone. */
  unattributed: number;
  /**
   * Ready copies the index recorded on this tier that the tier does not hold (its pages were removed behind the
   * index's back, or its memory was lost: a host tier's /dev/shm after a reboot): dropped from the index, so
   * lookups stop naming the tier and loads go to the copies that exist.
   */
  indexedNotHeld: number;
  /**
   * Copies of pages the index records elsewhere whose length or CRC32C differ from the record (left on a tier that
   * was out of the config while the key was deleted and stored again): the index's record is the page acknowledged
   * last, so these are deleted from the tier rather than adopted (a load would otherwise read old bytes under it).
   */
  stale: number;
}

export interface ReconcileReport {
  /** One entry per persistent tier, in tier order. */
  tiers: TierAdoption[];
  /** Sum of `adopted` over the tiers. */
  adopted: number;
}

/** Pages adopted per index transaction: bounds one transaction's size on a tier with millions of pages. */
const ADOPT_BATCH = 4096;

/**
 * Persistent tiers: adopts into the index every page a tier holds that the index does not record there (under the
 * namespace the page was written with, so lookups by prefix find it again), leaves pages of unregistered namespaces
 * alone, and lets each tier's policy know what the tier holds. Deletes only copies that contradict the index's
 * record of their key (`stale`). Returns what it adopted per tier, for the caller to log or emit.
 *
 * Index copies on a persistent tier that the tier no longer holds are dropped from the index (`indexedNotHeld`);
 * only bookkeeping goes, never bytes: a copy on another tier stays recorded and serves.
 */
export async function reconcileTiers(index: BlockIndex, tiers: readonly ReconcileTier[], options: ReconcileOptions = {}): Promise<ReconcileReport> {
  const registered = new Set(index.namespaces().map((n) => n.id));
  const fallback = options.namespace ?? (registered.size === 1 ? [...registered][0] : undefined);
  const report: ReconcileReport = { tiers: [], adopted: 0 };
  for (const t of tiers) {
    if (!t.driver.capabilities.persistent) continue;
    const held: PageInfo[] = [];
    for await (const p of t.driver.list()) held.push(p);
    const r: TierAdoption = { tier: t.name, held: held.length, known: 0, adopted: 0, adoptedKeyed: 0, foreign: 0, unattributed: 0, indexedNotHeld: 0, stale: 0 };
    const tracked: PageKey[] = [];
    for (let at = 0; at < held.length; at += ADOPT_BATCH) {
      const part = held.slice(at, at + ADOPT_BATCH);
      const copies = index.copiesOf(part.map((p) => p.key));
      // The index's record of pages it places on other tiers only, to tell this tier's copy apart from a stale one.
      const elsewhere = part.filter((_, i) => copies[i]!.length > 0 && !copies[i]!.some((x) => x.tier === t.name)).map((p) => p.key);
      const records = new Map(index.pages(elsewhere).map((rec, j) => [elsewhere[j]!, rec]));
      const stale: PageKey[] = [];
      const byNamespace = new Map<string, AdoptPage[]>();
      const add = (ns: string, page: AdoptPage) => {
        const list = byNamespace.get(ns);
        if (list) list.push(page);
        else byNamespace.set(ns, [page]);
      };
      part.forEach((p, i) => {
        const c = copies[i]!;
        if (c.some((x) => x.tier === t.name)) {
          r.known++;
          tracked.push(p.key);
          return;
        }
        const page: AdoptPage = { key: p.key, parent: p.meta?.parent ?? null, position: p.meta?.position ?? 0, length: p.length, crc32c: p.crc32c, durable: true };
        // Recorded on other tiers: this tier's copy joins the page as recorded (the namespace given is not used),
        // if it is that page.
        if (c.length > 0) {
          const rec = records.get(p.key);
          if (rec && (rec.length !== p.length || (rec.crc32c !== null && rec.crc32c !== p.crc32c))) {
            stale.push(p.key);
            return;
          }
          add(p.meta && registered.has(p.meta.namespace) ? p.meta.namespace : [...registered][0]!, page);
          return;
        }
        const ns = p.meta?.namespace ?? fallback;
        if (ns === undefined) r.unattributed++;
        else if (!registered.has(ns)) r.foreign++;
        else {
          if (!p.meta) r.adoptedKeyed++;
          add(ns, page);
        }
      });
      if (stale.length) {
        const { pinned } = await t.driver.delete(stale);
        r.stale += stale.length - pinned.length;
      }
      // Ready, durable, unverified, with the CRC32C the tier recorded: the tier checks it on every read.
      for (const [ns, pages] of byNamespace) {
        const { adopted } = index.adoptPages(ns, t.name, chainOrder(pages));
        r.adopted += adopted.length;
        tracked.push(...adopted);
      }
    }
    for (const key of tracked) if (!t.policy.has(key) && t.policy.canAdmit(key, 1)) t.policy.insert(key, 1);
    const holds = new Set(held.map((p) => p.key));
    const gone = index.readyKeys(t.name).filter((k) => !holds.has(k));
    for (let at = 0; at < gone.length; at += ADOPT_BATCH) index.removeCopies(t.name, gone.slice(at, at + ADOPT_BATCH), { force: true });
    r.indexedNotHeld = gone.length;
    report.tiers.push(r);
    report.adopted += r.adopted;
  }
  return report;
}

/**
 * Orders pages so each chain's pages follow one another (parent, then child, position + 1): the index then packs
 * them into shared runs, as a store of the chain would have. Pages whose parent is not in the batch start chains.
 */
export function chainOrder<P extends { key: PageKey; parent: PageKey | null; position: number }>(pages: readonly P[]): P[] {
  const byKey = new Map(pages.map((p) => [p.key, p]));
  const children = new Map<PageKey, P[]>();
  for (const p of pages) {
    if (p.parent === null || !byKey.has(p.parent)) continue;
    const list = children.get(p.parent) ?? [];
    list.push(p);
    children.set(p.parent, list);
  }
  const out: P[] = [];
  const placed = new Set<PageKey>();
  const walk = (start: P) => {
    const stack = [start];
    while (stack.length) {
      const p = stack.pop()!;
      if (placed.has(p.key)) continue;
      placed.add(p.key);
      out.push(p);
      // Pushed in reverse, so the first child is walked next and continues the current run.
      const next = children.get(p.key) ?? [];
      for (let i = next.length - 1; i >= 0; i--) stack.push(next[i]!);
    }
  };
  const roots = pages.filter((p) => p.parent === null || !byKey.has(p.parent)).sort((a, b) => a.position - b.position);
  for (const r of roots) walk(r);
  // A cycle of parents (damage, not a real chain) has no root: keep its pages anyway.
  for (const p of pages) if (!placed.has(p.key)) walk(p);
  return out;
}
