/**
 * Opening a hierarchy: the tiers' drivers, the planner over their capacities, the block index, and reconciling
 * the index with what the persistent tiers hold (reconcile.ts: pages the index does not know are adopted).
 */
import { HostArena, TierSyncError } from '@tiersync/native';
import { Planner, type EvictionPolicy, type Move } from '@tiersync/policy';
import { createTier, type PageKey } from '@tiersync/tiers';
import { BlockIndex } from '../index/index.js';
import { runMoves } from './background.js';
import { registerNamespace } from './delete.js';
import { UNLIMITED_PAGES, plannerConfigOf } from './planner-config.js';
import { reconcileTiers } from './reconcile.js';
import { exclusive, type HierarchyState } from './state.js';

const NOMINAL_READ_BPS: Record<string, number> = { hbm: 100e9, host: 20e9, fs: 2e9, peer: 2e9, object: 0.2e9 };

/**
 * Opens every tier, the planner and the index; copies on volatile tiers from an earlier run are dropped from the
 * index. Once: a second call, or one after close(), is refused. A failure part way closes what it opened (a tier
 * left open would hold its folder's lock for the rest of the process).
 */
export async function openHierarchy(s: HierarchyState): Promise<void> {
  if (s.closed) throw new TierSyncError('TierSync is closed; a closed one cannot be opened again (create a new TierSync)', 'ERR_CLOSED');
  if (s.opening) throw new TierSyncError('TierSync.open() was called already; call it once', 'ERR_INVALID_ARGUMENT');
  s.opening = true;
  try {
    await openAll(s);
  } catch (e) {
    for (const t of s.tiers.splice(0)) await t.driver.close().catch(() => undefined);
    s.index?.close();
    s.staging?.close();
    s.index = s.planner = s.staging = s.reconciled = undefined;
    s.opening = false;
    throw e;
  }
}

async function openAll(s: HierarchyState): Promise<void> {
  const context = { engine: s.engine, pageBytes: s.pageBytes, fingerprint: `${s.namespace.model}/${s.namespace.layoutFingerprint}` };
  const names = new Set<string>();
  for (const [i, t] of s.config.tiers.entries()) {
    const driver = createTier(t.url, context);
    const name = t.name ?? driver.capabilities.kind;
    if (names.has(name)) throw new TierSyncError(`config tiers.${i}.name: '${name}' is used twice (give each tier a name)`, 'ERR_CONFIG');
    names.add(name);
    await driver.open();
    const capacity = driver.stats().capacityBytes;
    s.tiers.push({
      index: i,
      name,
      driver,
      capacityPages: capacity > 0 ? Math.floor(capacity / s.pageBytes) : UNLIMITED_PAGES,
      readBps: NOMINAL_READ_BPS[driver.capabilities.kind] ?? 1e9,
    });
  }
  const planner = new Planner(
    plannerConfigOf(
      s.config,
      s.tiers.map((t) => t.capacityPages),
      s.tiers.map((t) => t.name),
    ),
    { onPolicyError: (error) => s.emit('policy:failed', { tier: error.tier ?? '', error }) },
  );
  s.planner = planner;
  s.index = BlockIndex.open({
    path: s.config.index.path,
    synchronous: s.config.index.synchronous,
    tiers: s.tiers.map((t) => ({ name: t.name, kind: t.driver.capabilities.kind, persistent: t.driver.capabilities.persistent })),
  });
  registerNamespace(s);
  s.staging = HostArena.create({ capacity: s.config.stagingPages * s.pageBytes });
  // reconcileTiers tells each tier's policy what the tier holds; the planner owns the policies, so it is handed
  // a view that records those pages as resident there (planner.restore). Pages past a tier's capacity (lowered
  // since they were written) are then evicted or demoted as under pressure.
  const overflow: Move[] = [];
  s.reconciled = await reconcileTiers(
    s.index,
    s.tiers.map((t) => ({ name: t.name, driver: t.driver, policy: residentView(planner, t.index, overflow) })),
    { namespace: s.namespace.id },
  );
  // Durable pins outlive the process in the index; the planner, their one owner in memory, takes them back before
  // any move runs, so no eviction chooses a page a caller pinned before the restart.
  const now = Date.now();
  const groups = new Map<string, { owner: string; expiresAt: number; keys: PageKey[] }>();
  for (const p of s.index.activePins(now)) {
    const id = `${p.owner}\u0000${p.expiresAt}`;
    let g = groups.get(id);
    if (!g) groups.set(id, (g = { owner: p.owner, expiresAt: p.expiresAt, keys: [] }));
    g.keys.push(p.key);
  }
  for (const g of groups.values()) planner.pin(g.keys, { owner: g.owner, now, ttl: g.expiresAt - now });
  if (overflow.length) await exclusive(s, () => runMoves(s, overflow));
}

/** The part of EvictionPolicy that reconcileTiers uses, over the planner's record of tier `tier`. */
function residentView(planner: Planner, tier: number, overflow: Move[]): EvictionPolicy<string> {
  const view = {
    has: (key: PageKey) => planner.holds(tier, key),
    canAdmit: (key: PageKey) => !planner.holds(tier, key),
    insert: (key: PageKey) => {
      overflow.push(...planner.restore(tier, [key]));
      return [];
    },
    remove: (key: PageKey) => {
      const had = planner.holds(tier, key);
      planner.forget(tier, [key]);
      return had;
    },
  };
  return view as unknown as EvictionPolicy<string>;
}
