/**
 * reconcileTiers adopts what persistent tiers hold instead of deleting it: pages come back under the namespace,
 * parent and position they were written with; other namespaces' pages are left alone; nothing is ever deleted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostArena, TransferEngine } from '@tiersync/native';
import { createPolicy, type EvictionPolicy } from '@tiersync/policy';
import { FsTier, HostTier, type PageKey, type PageWrite, type TierDriver } from '@tiersync/tiers';
import { BlockIndex } from '../index/index.js';
import { chainOrder, reconcileTiers } from './reconcile.js';

const PAGE = 4096;
const NS_A = 'a1'.repeat(32);
const NS_B = 'b2'.repeat(32);
/** A chain of n keys sharing an 8-byte anchor, as keys/page-keys.ts makes them (64 hex digits). */
const chainKeys = (anchor: string, n: number): PageKey[] => Array.from({ length: n }, (_, i) => anchor.padEnd(16, '0') + i.toString(16).padStart(48, '0'));

describe('reconcileTiers: the index is rebuilt from the tiers', () => {
  let engine: TransferEngine;
  let src: HostArena;
  let folder: string;
  let fs: FsTier;
  const drivers: TierDriver[] = [];
  const policy = (): EvictionPolicy<string> => createPolicy('lru', { capacity: 1024, unit: 'objects' }) as EvictionPolicy<string>;
  const newIndex = (namespaces = [NS_A]) => {
    const index = BlockIndex.open({ path: ':memory:', tiers: [{ name: 'host', kind: 'host', persistent: false }, { name: 'fs', kind: 'fs', persistent: true }] });
    for (const id of namespaces) index.registerNamespace({ id, model: `m-${id.slice(0, 4)}`, layoutFingerprint: 'cafe0123cafe0123', tokensPerPage: 16 });
    return index;
  };
  const write = (key: PageKey, i: number, meta?: PageWrite['meta']): PageWrite => ({ key, source: { arena: src, offset: i * PAGE, length: PAGE - i }, ...(meta ? { meta } : {}) });
  const chain = chainKeys('00c4a1a0', 40);
  const foreign = chainKeys('00f0f0f0', 2);
  const keyed = chainKeys('00ee0000', 1)[0]!;

  beforeAll(async () => {
    engine = new TransferEngine({ threads: 1 });
    src = HostArena.create({ capacity: 64 * PAGE });
    src.view(0, 64 * PAGE).forEach((_, i, v) => (v[i] = (i * 31) & 0xff));
    folder = mkdtempSync(join(tmpdir(), 'tiersync-reconcile-'));
    fs = new FsTier(`fs://${folder}?capacity=${256 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: 'reconcile-test' });
    await fs.open();
    drivers.push(fs);
    // As a store of one 40-page context records them (in two write calls, out of order), plus another namespace's
    // chain and a page written without meta (an older format).
    await fs.write(chain.slice(20).map((k, i) => write(k, 20 + i, { namespace: NS_A, parent: chain[19 + i]!, position: 20 + i })));
    await fs.write(chain.slice(0, 20).map((k, i) => write(k, i, { namespace: NS_A, parent: i === 0 ? null : chain[i - 1]!, position: i })));
    await fs.write(foreign.map((k, i) => write(k, 40 + i, { namespace: NS_B, parent: i === 0 ? null : foreign[0]!, position: i })));
    await fs.write([write(keyed, 50)]);
  });
  afterAll(async () => {
    for (const d of drivers) await d.close();
    await engine.close();
    src.close();
    rmSync(folder, { recursive: true, force: true });
  });

  it('adopts an empty index: pages under their namespace, parents and positions, ready, durable, with their CRC32C', async () => {
    const index = newIndex();
    const fsPolicy = policy();
    const report = await reconcileTiers(index, [{ name: 'fs', driver: fs, policy: fsPolicy }]);
    expect(report).toEqual({ adopted: 41, tiers: [{ tier: 'fs', held: 43, known: 0, adopted: 41, adoptedKeyed: 1, foreign: 2, unattributed: 0, indexedNotHeld: 0, stale: 0 }] });
    // Prefix lookup reaches the whole chain; the records carry what the tier stored.
    expect(index.lookupPrefix(chain).map((h) => h.key)).toEqual(chain);
    const records = index.pages(chain);
    records.forEach((r, i) => expect(r).toMatchObject({ key: chain[i], namespace: NS_A, parent: i === 0 ? null : chain[i - 1], position: i, length: PAGE - i }));
    const listed = new Map<string, number>();
    for await (const p of fs.list()) listed.set(p.key, p.crc32c);
    expect(records.map((r) => r!.crc32c)).toEqual(chain.map((k) => listed.get(k)));
    // Unverified: the first read checks the bytes against the CRC32C (the fs tier checks every read anyway).
    expect(index.copiesOf([chain[0]!])[0]).toEqual([expect.objectContaining({ tier: 'fs', state: 'ready', durable: true, verified: false })]);
    // The page without meta: a keyed page of the only namespace.
    expect(index.pages([keyed])[0]).toMatchObject({ namespace: NS_A, parent: null, position: 0 });
    // Another namespace's pages: not recorded, not deleted, not offered to the policy as victims.
    expect(index.lookupExact(foreign)).toEqual([undefined, undefined]);
    expect(await fs.has(foreign)).toEqual([true, true]);
    expect(fsPolicy.count).toBe(41);
    expect(fsPolicy.has(foreign[0]!)).toBe(false);
    // A second reconcile finds everything known and adopts nothing.
    const again = await reconcileTiers(index, [{ name: 'fs', driver: fs, policy: policy() }]);
    expect(again.tiers[0]).toMatchObject({ known: 41, adopted: 0, foreign: 2 });
    index.close();
  });

  it('adopts another namespace when the index has it registered; leaves pages without meta alone when their namespace is ambiguous', async () => {
    const index = newIndex([NS_A, NS_B]);
    const report = await reconcileTiers(index, [{ name: 'fs', driver: fs, policy: policy() }]);
    expect(report.tiers[0]).toMatchObject({ held: 43, adopted: 42, adoptedKeyed: 0, foreign: 0, unattributed: 1 });
    expect(index.pages([foreign[1]!])[0]).toMatchObject({ namespace: NS_B, parent: foreign[0], position: 1 });
    expect(await fs.has([keyed])).toEqual([true]);
    index.close();
    // Told which namespace such pages belong to, it adopts them as keyed pages.
    const told = newIndex([NS_A, NS_B]);
    expect((await reconcileTiers(told, [{ name: 'fs', driver: fs, policy: policy() }], { namespace: NS_B })).tiers[0]).toMatchObject({ adopted: 43, adoptedKeyed: 1, unattributed: 0 });
    expect(told.pages([keyed])[0]).toMatchObject({ namespace: NS_B });
    told.close();
  });

  it('adds the tier copy of a page the index knows on another tier; leaves volatile tiers out', async () => {
    const index = newIndex();
    const host = new HostTier(`host://?capacity=${8 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: 'reconcile-test' });
    await host.open();
    drivers.push(host);
    index.beginStore(NS_A, 'host', [{ key: chain[0]!, parent: null, position: 0, length: PAGE, location: chain[0]! }]);
    index.commitCopies([{ key: chain[0]!, tier: 'host' }]);
    const report = await reconcileTiers(index, [
      { name: 'host', driver: host, policy: policy() },
      { name: 'fs', driver: fs, policy: policy() },
    ]);
    expect(report.tiers.map((t) => t.tier)).toEqual(['fs']);
    expect(report.adopted).toBe(41);
    // Copies the index records on fs that the tier does not hold are dropped from the index; a copy of the same
    // page on another tier stays recorded.
    const [ghost, shared] = chainKeys('00aa0000', 2) as [string, string];
    index.beginStore(NS_A, 'fs', [{ key: ghost, parent: null, position: 0, length: PAGE, location: ghost }]);
    index.commitCopies([{ key: ghost, tier: 'fs', durable: true }]);
    index.beginStore(NS_A, 'host', [{ key: shared, parent: ghost, position: 1, length: PAGE, location: shared }]);
    index.commitCopies([{ key: shared, tier: 'host' }]);
    index.beginCopies('fs', [{ key: shared, location: shared }]);
    index.commitCopies([{ key: shared, tier: 'fs', durable: true }]);
    expect(index.readyKeys('fs').sort()).toEqual([...chain, keyed, ghost, shared].sort());
    expect((await reconcileTiers(index, [{ name: 'fs', driver: fs, policy: policy() }])).tiers[0]).toMatchObject({ known: 41, adopted: 0, indexedNotHeld: 2 });
    expect(index.copiesOf([ghost, shared]).map((cs) => cs.map((c) => `${c.tier}:${c.state}`))).toEqual([[], ['host:ready']]);
    expect(index.readyKeys('fs')).not.toContain(ghost);
    expect((await reconcileTiers(index, [{ name: 'fs', driver: fs, policy: policy() }])).tiers[0]).toMatchObject({ known: 41, indexedNotHeld: 0 });
    expect(index.copiesOf([chain[0]!])[0]!.map((c) => `${c.tier}:${c.state}`).sort()).toEqual(['fs:ready', 'host:ready']);
    index.close();
  });

  it('deletes, rather than adopts, a copy that contradicts the index record of its key (an older page under a key stored again)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tiersync-reconcile-stale-'));
    const tier = new FsTier(`fs://${dir}?capacity=${16 * PAGE}`, { engine, pageBytes: PAGE, fingerprint: 'reconcile-test' });
    await tier.open();
    try {
      const [old, same] = chainKeys('00bb0000', 2) as [string, string];
      const w = await tier.write([write(old, 3, { namespace: NS_A, parent: null, position: 0 }), write(same, 4, { namespace: NS_A, parent: null, position: 0 })]);
      // The index records both keys on host: `old` as another page (stored again while fs was out of the config).
      const index = newIndex();
      index.beginStore(NS_A, 'host', [
        { key: old, parent: null, position: 0, length: PAGE - 3, location: old, crc32c: (w.crc32c[0]! ^ 1) >>> 0 },
        { key: same, parent: null, position: 0, length: PAGE - 4, location: same, crc32c: w.crc32c[1]! },
      ]);
      index.commitCopies([{ key: old, tier: 'host' }, { key: same, tier: 'host' }]);
      const report = await reconcileTiers(index, [{ name: 'fs', driver: tier, policy: policy() }]);
      expect(report.tiers[0]).toMatchObject({ held: 2, adopted: 1, stale: 1 });
      expect(index.copiesOf([old, same]).map((cs) => cs.map((c) => c.tier).sort())).toEqual([['host'], ['fs', 'host']]);
      expect(await tier.has([old, same])).toEqual([false, true]);
      index.close();
    } finally {
      await tier.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('chainOrder puts each chain parent-first, so adopted chains share index runs', () => {
    const p = (key: string, parent: string | null, position: number) => ({ key, parent, position, length: 1, location: key });
    const [a, b, c, d, e] = chainKeys('0000abcd', 5) as [string, string, string, string, string];
    const order = chainOrder([p(c, b, 2), p(e, null, 0), p(a, null, 0), p(b, a, 1), p(d, 'f'.repeat(64), 7)]);
    const keys = order.map((x) => x.key);
    expect(keys.indexOf(a)).toBeLessThan(keys.indexOf(b));
    expect(keys.indexOf(b) + 1).toBe(keys.indexOf(c));
    expect(keys.sort()).toEqual([a, b, c, d, e].sort());
  });
});
