import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { createNamespace, kvLayoutPreset, pageKeys, type Namespace } from '../keys/index.js';
import { BlockIndex, type IndexTier, type StorePage } from './index.js';
import { MIGRATIONS, SCHEMA_VERSION, migrate } from './schema.js';

const TIERS: IndexTier[] = [
  { kind: 'hbm', persistent: false },
  { kind: 'host', persistent: false },
  { kind: 'fs', persistent: true },
];

let dir: string;
let clock: number;
const now = () => clock;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-index-test-'));
  clock = 1_000_000;
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const ns: Namespace = createNamespace({ model: 'test/llama', layout: kvLayoutPreset('llama-3-8b') });
const nsRecord = (n: Namespace = ns) => ({ id: n.id, model: n.model, layoutFingerprint: n.layoutFingerprint, tokensPerPage: n.layout.tokensPerPage });
const chain = (pages: number, seed = 1, n: Namespace = ns) => pageKeys(n, Uint32Array.from({ length: pages * 16 }, (_, i) => (i * 7919 + seed * 104729) >>> 0));
const specs = (keys: readonly string[], first = 0): StorePage[] =>
  keys.map((key, i) => ({ key, parent: i + first === 0 ? null : (keys[i - 1] ?? 'f'.repeat(64)), position: first + i, length: 4096, location: `slot-${first + i}`, crc32c: 1000 + i }));

function open(file = path.join(dir, 'index.sqlite'), tiers = TIERS) {
  const index = BlockIndex.open({ path: file, tiers, now });
  index.registerNamespace(nsRecord());
  return index;
}

/** Stores keys on tier: begin + commit. */
function store(index: BlockIndex, keys: readonly string[], tier = 'host', durable = false, n: Namespace = ns) {
  const r = index.beginStore(n.id, tier, specs(keys));
  index.commitCopies(r.fresh.map((key) => ({ key, tier, durable })));
  return r;
}

function thrown(fn: () => unknown): TierSyncError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return e as TierSyncError;
  }
  throw new Error('did not throw');
}

/** Invariants every consistent index keeps. */
function checkInvariants(file: string) {
  const db = new Database(file, { readonly: true });
  try {
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    // Every copies row belongs to a segment, every segment has a copies row, pagedata and anchors starting at slot 0.
    expect(db.prepare('SELECT count(*) AS n FROM copies c WHERE NOT EXISTS (SELECT 1 FROM segments s WHERE s.id = c.id / 256)').get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT count(*) AS n FROM segments s WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.id / 256 = s.id)').get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT count(*) AS n FROM segments s WHERE NOT EXISTS (SELECT 1 FROM pagedata p WHERE p.seg = s.id)').get()).toEqual({ n: 0 });
    for (const r of db.prepare('SELECT anchors, keys, width, count FROM segments').all() as Array<{ anchors: Buffer; keys: Buffer; width: number; count: number }>) {
      expect(r.anchors.length % 12).toBe(0);
      expect(r.anchors.readUInt32LE(8)).toBe(0);
      for (let o = 0; o < r.anchors.length; o += 12) {
        const slot = r.anchors.readUInt32LE(o + 8);
        expect(slot).toBeLessThan(r.count);
        expect(r.anchors.subarray(o, o + 8).equals(r.keys.subarray(slot * r.width, slot * r.width + 8))).toBe(true);
      }
    }
    expect(db.prepare('SELECT count(*) AS n FROM segments s WHERE NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.id = s.ns)').get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT count(*) AS n FROM segments WHERE length(keys) <> count * width OR count > 4096').get()).toEqual({ n: 0 });
    // No copies row without a held page; flags only on held pages; one state byte per page.
    const rows = db.prepare('SELECT c.id, c.states, s.count FROM copies c JOIN segments s ON s.id = c.id / 256').all() as Array<{ states: Buffer; count: number }>;
    for (const r of rows) {
      expect(r.states.length).toBe(r.count);
      expect(r.states.some((b) => (b & 3) !== 0)).toBe(true);
      expect(r.states.every((b) => b < 16 && ((b & 3) !== 0 || b === 0))).toBe(true);
    }
  } finally {
    db.close();
  }
}

describe('block index: store and lookup', () => {
  it('finds the longest stored prefix, stopping at the first absent key', () => {
    const index = open();
    const keys = chain(10);
    store(index, keys.slice(0, 4), 'host');
    store(index, keys.slice(5, 8), 'host'); // page 4 absent: pages 5..7 must not count
    const hit = index.lookupPrefix(keys);
    expect(hit.map((h) => h.key)).toEqual(keys.slice(0, 4));
    expect(hit[0]).toEqual({ key: keys[0], tiers: ['host'], length: 4096 });
    expect(index.lookupPrefix(keys.slice(5))).toHaveLength(3);
    expect(index.lookupPrefix([])).toEqual([]);
    expect(index.lookupPrefix(chain(3, 99))).toEqual([]);
    // Cached answers (positive and negative) give the same result.
    expect(index.lookupPrefix(keys).map((h) => h.key)).toEqual(keys.slice(0, 4));
    expect(index.stats().cache.hits).toBeGreaterThan(0);
    index.close();
  });

  it('lists the tiers of each page fastest first, across chunk boundaries', () => {
    const index = open();
    const keys = chain(300);
    store(index, keys, 'fs', true);
    const r = index.beginCopies('hbm', keys.slice(0, 100).map((key) => ({ key, location: 'h' })));
    expect(r.added).toHaveLength(100);
    index.commitCopies(keys.slice(0, 100).map((key) => ({ key, tier: 'hbm' })));
    const hit = index.lookupPrefix(keys);
    expect(hit).toHaveLength(300);
    expect(hit[0]!.tiers).toEqual(['hbm', 'fs']);
    expect(hit[100]!.tiers).toEqual(['fs']);
    index._internal.cache.clear();
    expect(index.lookupPrefix(keys).map((h) => h.tiers.join())).toEqual(hit.map((h) => h.tiers.join()));
    index.close();
  });

  it('keeps pending copies invisible until committed, and reports existing pages', () => {
    const index = open();
    const keys = chain(4);
    const first = index.beginStore(ns.id, 'host', specs(keys));
    expect(first).toEqual({ fresh: keys, existing: [] });
    expect(index.lookupPrefix(keys)).toEqual([]);
    expect(index.copiesOf([keys[0]!])[0]).toMatchObject([{ tier: 'host', state: 'pending', location: 'slot-0' }]);
    // A second store of the same pages (on any tier) stores nothing.
    expect(index.beginStore(ns.id, 'fs', specs(keys))).toEqual({ fresh: [], existing: keys });
    expect(index.commitCopies(keys.slice(0, 2).map((key) => ({ key, tier: 'host' })))).toEqual({ committed: 2, missing: [] });
    expect(index.lookupPrefix(keys)).toHaveLength(2);
    // Committing what was never begun is reported, not applied.
    expect(index.commitCopies([{ key: keys[0]!, tier: 'fs' }, { key: keys[2]!, tier: 'host' }])).toEqual({ committed: 1, missing: [keys[0]] });
    expect(index.lookupPrefix(keys)).toHaveLength(3);
    // Aborting the rest removes the pending copy and its page row.
    expect(index.abortCopies('host', [keys[3]!])).toBe(1);
    expect(index.pages([keys[3]!])).toEqual([undefined]);
    expect(index.pages([keys[1]!])[0]).toMatchObject({ key: keys[1], namespace: ns.id, parent: keys[0], position: 1, length: 4096, crc32c: 1001, hits: 0 });
    // A CRC32C given at commit is recorded, for committed entries only.
    const more = chain(2, 7);
    index.beginStore(ns.id, 'host', specs(more).map((p) => ({ ...p, crc32c: undefined })));
    expect(index.commitCopies([{ key: more[0]!, tier: 'host', crc32c: 0xdeadbeef }, { key: keys[1]!, tier: 'host', crc32c: 5 }])).toEqual({ committed: 1, missing: [keys[1]] });
    expect(index.pages([more[0]!, more[1]!, keys[1]!]).map((p) => p?.crc32c)).toEqual([0xdeadbeef, null, 1001]);
    index.close();
  });

  it('records access stats with touch', () => {
    const index = open();
    const keys = chain(2);
    store(index, keys);
    clock += 500;
    index.touch(keys);
    index.touch([keys[0]!], clock + 10);
    const [a, b] = index.pages(keys);
    expect(a).toMatchObject({ hits: 2, lastAccessMs: clock + 10, createdMs: 1_000_000 });
    expect(b).toMatchObject({ hits: 1, lastAccessMs: clock });
    index.close();
  });

  it('removes and evicts copies, keeping pages with copies elsewhere', () => {
    const index = open();
    const keys = chain(3);
    store(index, keys, 'host');
    index.beginCopies('fs', [{ key: keys[0]!, location: 'f0' }]);
    index.commitCopies([{ key: keys[0]!, tier: 'fs', durable: true }]);
    expect(index.lookupPrefix(keys)[0]!.tiers).toEqual(['host', 'fs']);
    const ev = index.markEvicting('host', [keys[0]!, keys[1]!]);
    expect(ev).toEqual({ marked: [keys[0], keys[1]], pinned: [], missing: [] });
    // An evicting copy is no longer handed out.
    expect(index.lookupPrefix(keys).map((h) => h.tiers)).toEqual([['fs']]);
    expect(index.removeCopies('host', keys)).toEqual({ removed: keys, pinned: [], missing: [] });
    expect(index.pages(keys).map((p) => p?.key)).toEqual([keys[0], undefined, undefined]);
    expect(index.copiesOf(keys)).toEqual([[expect.objectContaining({ tier: 'fs', state: 'ready', durable: true, verified: true })], [], []]);
    expect(index.removeCopies('host', keys).missing).toEqual(keys);
    index.close();
    checkInvariants(index.path);
  });

  it('pins hold pages until they expire or are unpinned', () => {
    const index = open();
    const keys = chain(3);
    store(index, keys, 'host');
    index.pin([keys[0]!, keys[1]!], { ttlMs: 1000, owner: 'session-1' });
    index.pin([keys[1]!], { ttlMs: 5000 });
    expect(index.pinned(keys)).toEqual([true, true, false]);
    expect(index.removeCopies('host', keys)).toEqual({ removed: [keys[2]], pinned: [keys[0], keys[1]], missing: [] });
    expect(index.markEvicting('host', [keys[0]!]).pinned).toEqual([keys[0]]);
    clock += 1000;
    expect(index.pinned(keys)).toEqual([false, true, false]);
    // Both of session-1's pins expire; keys[1] stays pinned by the default owner.
    expect(index.expire().sort()).toEqual([keys[0], keys[1]].sort());
    expect(index.pinned(keys)).toEqual([false, true, false]);
    expect(index.unpin([keys[1]!], { owner: 'nobody' })).toBe(0);
    expect(index.unpin([keys[1]!])).toBe(1);
    expect(index.pinned(keys)).toEqual([false, false, false]);
    expect(index.removeCopies('host', [keys[1]!], { force: true }).removed).toEqual([keys[1]]);
    expect(index.stats().pins).toBe(0);
    index.close();
  });

  it('beginLoad pins and lists copies; endLoad touches and unpins, in one transaction each', () => {
    const index = open();
    const keys = chain(5);
    store(index, keys.slice(0, 3), 'host');
    index.beginCopies('fs', [{ key: keys[1]!, location: 'f1' }]);
    index.commitCopies([{ key: keys[1]!, tier: 'fs', durable: true }]);
    index.pin([keys[0]!], { ttlMs: 10_000, owner: 'other' });
    const copies = index.beginLoad(keys, { ttlMs: 1000, owner: 'load:1' });
    expect(copies).toEqual(index.copiesOf(keys));
    expect(copies.map((c) => c.map((x) => x.tier))).toEqual([['host'], ['host', 'fs'], ['host'], [], []]);
    // Load pins live in memory and hold the pages that exist (keys 3 and 4 have none).
    expect(index.pinned(keys)).toEqual([true, true, true, false, false]);
    expect(index.removeCopies('host', keys).pinned).toEqual(keys.slice(0, 3));
    clock += 100;
    expect(index.endLoad(keys, { owner: 'load:1', touched: keys.slice(0, 2) })).toBe(3);
    expect(index.pinned(keys)).toEqual([true, false, false, false, false]); // the other owner's pin stays
    expect(index.pages(keys.slice(0, 3)).map((p) => [p!.hits, p!.lastAccessMs])).toEqual([
      [1, clock],
      [1, clock],
      [0, 1_000_000],
    ]);
    expect(index.beginLoad([], { ttlMs: 1 })).toEqual([]);
    expect(index.endLoad([], { owner: 'x' })).toBe(0);
    expect(thrown(() => index.beginLoad(keys, { ttlMs: 0 })).message).toMatch(/options\.ttlMs/);
    expect(thrown(() => index.endLoad(keys, { touched: ['nope'] })).message).toMatch(/options\.touched\[0\]/);
    index.close();
  });

  it('deletes a namespace with its pages, copies and pins, and leaves others alone', () => {
    const index = open();
    const other = createNamespace({ model: 'test/other', layout: kvLayoutPreset('llama-3-8b') });
    index.registerNamespace(nsRecord(other));
    index.registerNamespace(nsRecord(other)); // idempotent
    const a = chain(5);
    const b = chain(5, 1, other);
    store(index, a);
    store(index, b, 'host', false, other);
    index.pin([a[0]!], { ttlMs: 10_000 });
    expect(index.lookupPrefix(a)).toHaveLength(5);
    const del = index.deleteNamespace(ns.id);
    expect(del.pages).toBe(5);
    expect(del.copies.map((c) => c.key).sort()).toEqual([...a].sort());
    expect(del.copies[0]).toMatchObject({ tier: 'host' });
    expect(index.lookupPrefix(a)).toEqual([]);
    expect(index.lookupPrefix(b)).toHaveLength(5);
    expect(index.stats()).toMatchObject({ namespaces: 1, pages: 5, pins: 0 });
    expect(index.deleteNamespace(ns.id)).toEqual({ pages: 0, copies: [] });
    expect(thrown(() => index.beginStore(ns.id, 'host', specs(a))).message).toMatch(/is not registered/);
    index.close();
  });

  it('reports stats per tier', () => {
    const index = open();
    const keys = chain(4);
    store(index, keys.slice(0, 3), 'host');
    index.beginStore(ns.id, 'fs', specs([keys[3]!], 3));
    const s = index.stats();
    expect(s).toMatchObject({ namespaces: 1, pages: 4, pageBytes: 4 * 4096 });
    expect(s.tiers.host).toEqual({ pending: 0, ready: 3, evicting: 0, durable: 0, unverified: 0, readyBytes: 3 * 4096 });
    expect(s.tiers.fs).toMatchObject({ pending: 1, ready: 0 });
    expect(s.tiers.hbm).toMatchObject({ ready: 0 });
    index.close();
  });
});

describe('block index: adoptPages', () => {
  it('records pages found on a tier as ready copies in one transaction, and reports those already there', () => {
    const file = path.join(dir, 'index.sqlite');
    let index = open(file);
    const keys = chain(70);
    store(index, keys.slice(0, 5), 'host'); // pages 0..4 known on host
    const found = keys.map((key, i) => ({ key, parent: i ? keys[i - 1]! : null, position: i, length: 4096, crc32c: 500 + i, durable: true }));
    const r = index.adoptPages(ns.id, 'fs', found);
    expect(r).toEqual({ adopted: keys, existing: [] });
    expect(index.lookupPrefix(keys).map((h) => h.tiers.join())).toEqual([...new Array(5).fill('host,fs'), ...new Array(65).fill('fs')]);
    expect(index.copiesOf([keys[9]!])[0]).toEqual([{ tier: 'fs', location: keys[9], state: 'ready', durable: true, verified: false, updatedMs: clock }]);
    expect(index.pages([keys[9]!])[0]).toMatchObject({ parent: keys[8], position: 9, length: 4096, crc32c: 509 });
    // Adopting again changes nothing.
    expect(index.adoptPages(ns.id, 'fs', found.slice(0, 3))).toEqual({ adopted: [], existing: keys.slice(0, 3) });
    // Bad input names the field and changes nothing.
    expect(thrown(() => index.adoptPages(ns.id, 'fs', [{ ...found[0]!, key: chain(1, 9)[0]! }, { ...found[1]!, durable: 'yes' as never }])).message).toMatch(/pages\[1\]\.durable/);
    expect(thrown(() => index.adoptPages(ns.id, 'tape', found)).message).toMatch(/tier must be one of/);
    index.close();
    checkInvariants(file);
    // Durable adopted copies survive a restart (unverified), as stored ones do.
    index = open(file);
    expect(index.lookupPrefix(keys)).toHaveLength(70);
    expect(index.recovery).toMatchObject({ unverified: 70, droppedVolatile: { host: 5 } });
    index.close();
  });

  it('rebuilds a lost index from what a tier reports', () => {
    const keys = chain(40, 3);
    const a = open(path.join(dir, 'a.sqlite'));
    store(a, keys, 'fs', true);
    const report = a.pages(keys).map((p) => ({ key: p!.key, parent: p!.parent, position: p!.position, length: p!.length, crc32c: p!.crc32c!, durable: true }));
    a.close();
    const b = open(path.join(dir, 'b.sqlite'));
    expect(b.adoptPages(ns.id, 'fs', report).adopted).toHaveLength(40);
    expect(b.lookupPrefix(keys).map((h) => h.key)).toEqual(keys);
    expect(b.pages(keys)).toEqual(report.map((p) => expect.objectContaining({ key: p.key, parent: p.parent, crc32c: p.crc32c })));
    b.close();
  });
});

describe('block index: roots segments', () => {
  /** First pages of unrelated chains: each a root (no parent, position 0), as RESP values and peer puts are. */
  const roots = (n: number, seed: number) => Array.from({ length: n }, (_, i) => chain(1, seed * 1000 + i)[0]!);
  const adopt = (index: BlockIndex, keys: readonly string[], tier = 'fs') =>
    index.adoptPages(ns.id, tier, keys.map((key, i) => ({ key, parent: null, position: 0, length: 100 + i, crc32c: i, durable: true })));
  const segmentRows = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return db.prepare('SELECT count, position FROM segments ORDER BY id').all();
    } finally {
      db.close();
    }
  };

  it('packs roots recorded together into segments of up to 64 pages, and keeps a chain with its first page', () => {
    const file = path.join(dir, 'roots.sqlite');
    let index = open(file);
    const loose = roots(150, 1);
    expect(adopt(index, loose).adopted).toEqual(loose);
    // A chain's first page is a root too, but stays with its chain; a root alone is a one-page segment as before.
    const c = chain(3, 77);
    const [r1, r2, r3] = roots(3, 2);
    index.adoptPages(ns.id, 'fs', [r1!, r2!, ...c, r3!].map((key, i) => ({ key, parent: i >= 3 && i <= 4 ? c[i - 3]! : null, position: i >= 3 && i <= 4 ? i - 2 : 0, length: 7, crc32c: 1, durable: true })));
    index.close();
    expect(segmentRows(file)).toEqual([
      { count: 64, position: -1 },
      { count: 64, position: -1 },
      { count: 22, position: -1 },
      { count: 2, position: -1 },
      { count: 3, position: 0 },
      { count: 1, position: 0 },
    ]);
    checkInvariants(file);

    index = open(file);
    // Each page reads as the root it is, found with nothing cached (through the anchor directory).
    expect(index.lookupExact([loose[0]!, loose[100]!, r3!, c[2]!]).map((h) => h?.tiers.join())).toEqual(['fs', 'fs', 'fs', 'fs']);
    expect(index.pages([loose[65]!, c[1]!, r2!])).toEqual([
      expect.objectContaining({ key: loose[65], parent: null, position: 0, length: 165, crc32c: 65 }),
      expect.objectContaining({ key: c[1], parent: c[0], position: 1 }),
      expect.objectContaining({ key: r2, parent: null, position: 0, length: 7 }),
    ]);
    index.close();
  });

  it('frees a roots segment\'s rows when its last page goes; until then its other pages stay', () => {
    const file = path.join(dir, 'roots-drop.sqlite');
    let index = open(file);
    const keys = roots(64, 3);
    adopt(index, keys);
    adopt(index, keys.slice(0, 4), 'host');
    expect(index.removeCopies('fs', keys.slice(0, 63)).removed).toHaveLength(63);
    index.close();
    expect(segmentRows(file)).toEqual([{ count: 64, position: -1 }]);
    index = open(file);
    expect(index.lookupExact(keys).filter((h) => h !== undefined)).toHaveLength(1);
    // Stored again, a gone page takes its old slot (a hole), with its new length and checksum.
    adopt(index, [keys[5]!]);
    expect(index.pages([keys[5]!])[0]).toMatchObject({ parent: null, position: 0, length: 100, crc32c: 0 });
    expect(index.removeCopies('fs', [keys[5]!, keys[63]!]).removed).toHaveLength(2);
    expect(index.lookupExact(keys).filter((h) => h !== undefined)).toHaveLength(0);
    index.close();
    expect(segmentRows(file)).toEqual([]);
    checkInvariants(file);
  });

  it('opens a version-6 database unchanged and refuses nothing it wrote', () => {
    const file = path.join(dir, 'v6.sqlite');
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 6)).toBe(0);
    db.close();
    const index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 6, schemaVersion: SCHEMA_VERSION });
    const keys = roots(3, 4);
    adopt(index, keys);
    expect(index.lookupExact(keys).every((h) => h?.tiers.join() === 'fs')).toBe(true);
    index.close();
  });
});

describe('block index: copy state moves', () => {
  it('changes copies only through the transition table: moves a state does not allow are reported, not applied', () => {
    const index = open();
    const keys = chain(3);
    index.beginStore(ns.id, 'host', specs(keys));
    // Evicting or verifying a pending copy is not a move the table allows: nothing changes.
    expect(index.markEvicting('host', keys)).toEqual({ marked: [], pinned: [], missing: keys });
    expect(index.markVerified('host', keys)).toBe(0);
    expect(index.copiesOf(keys).map((c) => c[0]!.state)).toEqual(['pending', 'pending', 'pending']);
    index.commitCopies(keys.map((key) => ({ key, tier: 'host' })));
    // Committing twice is refused (reported missing): a ready copy is not pending.
    expect(index.commitCopies([{ key: keys[0]!, tier: 'host' }])).toEqual({ committed: 0, missing: [keys[0]] });
    expect(index.abortCopies('host', keys)).toBe(0);
    expect(index.markEvicting('host', [keys[0]!, keys[0]!])).toEqual({ marked: [keys[0]], pinned: [], missing: [] });
    expect(index.copiesOf([keys[0]!])[0]![0]!.state).toBe('evicting');
    expect(index.markEvicting('host', [keys[0]!]).missing).toEqual([keys[0]]);
    index.close();
  });
});

describe('block index: bad input', () => {
  it('names the bad argument and changes nothing', () => {
    const index = open();
    const keys = chain(4);
    const before = index.stats();
    const bad = specs(keys);
    bad[2] = { ...bad[2]!, length: 0 };
    let e = thrown(() => index.beginStore(ns.id, 'host', bad));
    expect(e.code).toBe('ERR_INVALID_ARGUMENT');
    expect(e.message).toMatch(/^pages\[2\]\.length must be an integer in \[1, /);
    expect(index.stats().pages).toBe(before.pages);
    expect(thrown(() => index.beginStore(ns.id, 'host', [...specs(keys), specs(keys)[1]!])).message).toMatch(/pages\[4\]\.key .* appears twice/);
    expect(thrown(() => index.beginStore(ns.id, 'tape', specs(keys))).message).toMatch(/tier must be one of the index's tiers \(hbm, host, fs\), got "tape"/);
    expect(thrown(() => index.beginStore(ns.id, 'host', [{ ...specs(keys)[0]!, key: 'ABC' }])).message).toMatch(/pages\[0\]\.key must be a page key/);
    expect(thrown(() => index.beginStore(ns.id, 'host', [{ ...specs(keys)[0]!, location: '' }])).message).toMatch(/pages\[0\]\.location/);
    expect(thrown(() => index.beginStore(ns.id, 'host', [{ ...specs(keys)[0]!, crc32c: 2 ** 32 }])).message).toMatch(/pages\[0\]\.crc32c/);
    expect(thrown(() => index.lookupPrefix([keys[0]!, 'nope'])).message).toMatch(/keys\[1\] must be a page key/);
    expect(thrown(() => index.lookupPrefix('abc' as never)).message).toMatch(/keys must be an array/);
    store(index, keys.slice(0, 2));
    expect(thrown(() => index.commitCopies([{ key: keys[0]!, tier: 'host' }, { key: keys[1]!, tier: 'host', durable: 'yes' as never }])).message).toMatch(/batch\[1\]\.durable/);
    expect(thrown(() => index.removeCopies('host', [keys[0]!, 5 as never])).message).toMatch(/keys\[1\]/);
    expect(thrown(() => index.pin(keys, { ttlMs: 0 })).message).toMatch(/options\.ttlMs/);
    expect(thrown(() => index.registerNamespace({ ...nsRecord(), model: 'changed' })).message).toMatch(/already registered with other fields/);
    expect(thrown(() => index.registerNamespace({ ...nsRecord(), id: 'x' })).message).toMatch(/namespace\.id must be 64/);
    expect(index.lookupPrefix(keys)).toHaveLength(2);
    index.close();
    expect(thrown(() => index.lookupPrefix(keys)).code).toBe('ERR_CLOSED');
  });

  it('rolls a failing batch back completely', () => {
    const index = open();
    const keys = chain(600);
    // Make the SQL fail half-way: a trigger rejects the copies row, written after the segment and its pagedata.
    index._internal.db.exec(`CREATE TEMP TRIGGER reject BEFORE INSERT ON copies BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    const e = thrown(() => index.beginStore(ns.id, 'host', specs(keys)));
    expect(e.code).toBe('ERR_IO');
    expect(e.message).toMatch(/beginStore failed: injected failure/);
    expect(index.stats().pages).toBe(0);
    expect(index._internal.db.prepare('SELECT (SELECT count(*) FROM segments) + (SELECT count(*) FROM pagedata) AS n').get()).toEqual({ n: 0 });
    index._internal.db.exec('DROP TRIGGER reject');
    store(index, keys);
    index._internal.db.exec(`CREATE TEMP TRIGGER reject BEFORE UPDATE ON copies BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    expect(thrown(() => index.markEvicting('host', keys)).code).toBe('ERR_IO');
    index._internal.db.exec('DROP TRIGGER reject');
    expect(index.copiesOf([keys[0]!])[0]![0]!.state).toBe('ready');
    expect(index.lookupPrefix(keys)).toHaveLength(600);
    index.close();
  });

  it('rejects bad options by name', () => {
    expect(thrown(() => BlockIndex.open({ path: ':memory:', tiers: [] })).message).toMatch(/options\.tiers must be a non-empty array/);
    expect(thrown(() => BlockIndex.open({ path: ':memory:', tiers: [{ kind: 'tape' as never, persistent: true }] })).message).toMatch(/options\.tiers\[0\]\.kind/);
    expect(thrown(() => BlockIndex.open({ path: ':memory:', tiers: [{ kind: 'fs', persistent: true }, { kind: 'fs', persistent: true }] })).message).toMatch(/options\.tiers\[1\]\.name 'fs' is used twice/);
    expect(thrown(() => BlockIndex.open({ path: ':memory:', tiers: TIERS, synchronous: 'off' as never })).message).toMatch(/options\.synchronous/);
    expect(thrown(() => BlockIndex.open({ path: '', tiers: TIERS })).message).toMatch(/options\.path/);
    const two = BlockIndex.open({ path: ':memory:', tiers: [{ kind: 'fs', persistent: true }, { name: 'fs-ssd', kind: 'fs', persistent: true }] });
    expect(two.tiers.map((t) => t.name)).toEqual(['fs', 'fs-ssd']);
    two.close();
  });
});

describe('block index: restart and recovery', () => {
  it('drops volatile, pending, evicting and non-durable copies; keeps durable ones unverified', () => {
    const file = path.join(dir, 'index.sqlite');
    let index = open(file);
    const keys = chain(8);
    store(index, keys.slice(0, 2), 'host'); // volatile tier
    store(index, keys.slice(2, 4), 'fs', true); // durable
    store(index, keys.slice(4, 5), 'fs', false); // persistent tier, not durable
    index.beginStore(ns.id, 'fs', specs(keys.slice(5, 6), 5)); // pending
    store(index, keys.slice(6, 7), 'fs', true);
    index.markEvicting('fs', [keys[6]!]);
    index.beginCopies('hbm', [{ key: keys[2]!, location: 'h' }]);
    index.commitCopies([{ key: keys[2]!, tier: 'hbm' }]);
    index.pin([keys[2]!], { ttlMs: 100 });
    index.pin([keys[3]!], { ttlMs: 100_000 });
    index.close();

    clock += 1000;
    index = open(file);
    expect(index.recovery).toEqual({
      migratedFrom: SCHEMA_VERSION,
      schemaVersion: SCHEMA_VERSION,
      droppedVolatile: { host: 2, hbm: 1 },
      droppedUnknownTier: {},
      droppedPending: 1,
      droppedEvicting: 1,
      droppedNotDurable: 1,
      unverified: 2,
      orphanPages: 5,
      expiredPins: 1,
    });
    expect(index.lookupPrefix(keys.slice(2))).toEqual([
      { key: keys[2], tiers: ['fs'], length: 4096 },
      { key: keys[3], tiers: ['fs'], length: 4096 },
    ]);
    expect(index.copiesOf([keys[2]!])[0]).toMatchObject([{ tier: 'fs', verified: false, durable: true }]);
    expect(index.markVerified('fs', [keys[2]!])).toBe(1);
    expect(index.copiesOf([keys[2]!])[0]).toMatchObject([{ verified: true }]);
    expect(index.stats().tiers.fs).toMatchObject({ ready: 2, unverified: 1 });
    index.close();
    checkInvariants(file);

    // A tier that is no longer configured loses its copies.
    index = open(file, [{ kind: 'host', persistent: false }]);
    expect(index.recovery.droppedUnknownTier).toEqual({ fs: 2 });
    expect(index.stats().pages).toBe(0);
    index.close();
  });

  it('migrates a version-1 database to the current schema, keeping its rows', () => {
    const file = path.join(dir, 'v1.sqlite');
    const keys = chain(2);
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 1)).toBe(0);
    expect(db.pragma('user_version', { simple: true })).toBe(1);
    db.prepare('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(ns.id, ns.model, ns.layoutFingerprint, '', 16, 1);
    keys.forEach((k, i) => {
      db.prepare('INSERT INTO pages(key, ns, parent, position, length, crc32c, created_ms, access_ms) VALUES (?, 1, ?, ?, 4096, 7, 1, 1)').run(k, i ? keys[i - 1] : null, i);
      db.prepare('INSERT INTO copies(key, tier, location, state, durable, updated_ms) VALUES (?, ?, ?, 1, 1, 1)').run(k, 'fs', `f${i}`);
    });
    db.close();

    const index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 1, schemaVersion: SCHEMA_VERSION, unverified: 2, orphanPages: 0 });
    expect(index.lookupPrefix(keys).map((h) => h.tiers)).toEqual([['fs'], ['fs']]);
    expect(index.copiesOf([keys[0]!])[0]).toMatchObject([{ location: 'f0', verified: false }]);
    index.close();
    expect(MIGRATIONS.map((m) => m.version)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('upgrades a version-2 database in place to the current schema (runs of pages), keeping pages, copies and pins', () => {
    const file = path.join(dir, 'v2.sqlite');
    const keys = chain(3);
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 2)).toBe(0);
    db.prepare('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(ns.id, ns.model, ns.layoutFingerprint, '', 16, 1);
    keys.forEach((k, i) => {
      db.prepare('INSERT INTO pages(key, ns, parent, position, length, crc32c, created_ms, access_ms, hits) VALUES (?, 1, ?, ?, 4096, ?, 1, 2, 3)').run(k, i ? keys[i - 1] : null, i, 100 + i);
      db.prepare('INSERT INTO copies(key, tier, location, state, durable, verified, updated_ms) VALUES (?, ?, ?, 1, 1, 1, 1)').run(k, 'fs', `f${i}`);
    });
    db.prepare('INSERT INTO pins(key, owner, expires_ms) VALUES (?, ?, ?)').run(keys[1], 'keep', clock + 60_000);
    db.close();

    let index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 2, schemaVersion: SCHEMA_VERSION, unverified: 3, orphanPages: 0, expiredPins: 0 });
    expect(index.lookupPrefix(keys).map((h) => h.tiers)).toEqual([['fs'], ['fs'], ['fs']]);
    expect(index.pages(keys)).toEqual(
      keys.map((key, i) => ({ key, namespace: ns.id, parent: i ? keys[i - 1] : null, position: i, length: 4096, crc32c: 100 + i, createdMs: 1, lastAccessMs: 2, hits: 3 })),
    );
    expect(index.copiesOf([keys[2]!])[0]).toMatchObject([{ tier: 'fs', location: 'f2', state: 'ready', durable: true, verified: false }]);
    expect(index.pinned(keys)).toEqual([false, true, false]);
    expect(index.removeCopies('fs', keys)).toEqual({ removed: [keys[0], keys[2]], pinned: [keys[1]], missing: [] });
    // New pages get ids after the migrated ones.
    store(index, chain(4, 5), 'fs', true);
    expect(index.lookupPrefix(chain(4, 5))).toHaveLength(4);
    index.close();
    checkInvariants(file);
    const raw = new Database(file, { readonly: true });
    expect(raw.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    // The three chain pages became one run (the removed ones are holes until stored again), the new chain another.
    expect(raw.prepare('SELECT count, length(keys) AS bytes, position FROM segments ORDER BY id').all()).toEqual([
      { count: 3, bytes: 96, position: 0 },
      { count: 4, bytes: 128, position: 0 },
    ]);
    raw.close();
    index = open(file);
    expect(index.recovery.migratedFrom).toBe(SCHEMA_VERSION);
    expect(index.lookupPrefix([keys[1]!])).toHaveLength(1);
    index.close();
  });

  it('regroups a version-3 chain into runs (gaps and anchors respected), keeping every page, copy and record', () => {
    const file = path.join(dir, 'v3.sqlite');
    const keys = chain(100, 42);
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 3)).toBe(0);
    db.prepare('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(ns.id, ns.model, ns.layoutFingerprint, '', 16, 1);
    const page = db.prepare('INSERT INTO pages(id, key, ns, parent, position, length, crc32c, created_ms, access_ms, hits) VALUES (?, unhex(?), 1, unhex(?), ?, ?, ?, 5, 6, ?)');
    const copy = db.prepare('INSERT INTO copies(page, tier, location, state, durable, verified, updated_ms) VALUES (?, ?, ?, 1, 1, 1, 7)');
    // Pages 40..49 were never stored (or evicted everywhere); page 7 has a copy on fs and on host (volatile).
    keys.forEach((k, i) => {
      if (i >= 40 && i < 50) return;
      page.run(i + 1, k, i ? keys[i - 1] : null, i, 4000 + i, 900 + i, i % 3);
      copy.run(i + 1, 'fs', i === 5 ? 'custom-5' : k);
      if (i === 7) copy.run(i + 1, 'host', k);
    });
    db.close();

    const index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 3, schemaVersion: SCHEMA_VERSION, droppedVolatile: { host: 1 }, unverified: 90, orphanPages: 0 });
    expect(index.lookupPrefix(keys)).toHaveLength(40);
    expect(index.lookupPrefix(keys.slice(50))).toHaveLength(50);
    expect(index.pages([keys[0]!, keys[39]!, keys[40]!, keys[50]!, keys[99]!])).toEqual([
      { key: keys[0], namespace: ns.id, parent: null, position: 0, length: 4000, crc32c: 900, createdMs: 5, lastAccessMs: 6, hits: 0 },
      { key: keys[39], namespace: ns.id, parent: keys[38], position: 39, length: 4039, crc32c: 939, createdMs: 5, lastAccessMs: 6, hits: 0 },
      undefined,
      { key: keys[50], namespace: ns.id, parent: keys[49], position: 50, length: 4050, crc32c: 950, createdMs: 5, lastAccessMs: 6, hits: 2 },
      { key: keys[99], namespace: ns.id, parent: keys[98], position: 99, length: 4099, crc32c: 999, createdMs: 5, lastAccessMs: 6, hits: 0 },
    ]);
    expect(index.copiesOf([keys[5]!, keys[6]!])).toEqual([
      [{ tier: 'fs', location: 'custom-5', state: 'ready', durable: true, verified: false, updatedMs: 7 }],
      [{ tier: 'fs', location: keys[6], state: 'ready', durable: true, verified: false, updatedMs: 7 }],
    ]);
    // Storing the gap completes the chain.
    store(index, keys.slice(40, 50), 'fs', true);
    expect(index.lookupPrefix(keys)).toHaveLength(100);
    index.close();
    checkInvariants(file);
    const raw = new Database(file, { readonly: true });
    // Anchors change every 64 pages: 0..39 (32 + 8), 50..63, 64..99 (32 + 4), then the gap's own run.
    // (The test's store() numbers the gap's pages from 0.)
    expect(raw.prepare('SELECT position, count FROM segments ORDER BY position, count').all()).toEqual([
      { position: 0, count: 10 },
      { position: 0, count: 32 },
      { position: 32, count: 8 },
      { position: 50, count: 14 },
      { position: 64, count: 32 },
      { position: 96, count: 4 },
    ]);
    raw.close();
  });

  it('migrates a version-4 database (runs and copy masks) to segments, keeping pages, copies and flags', () => {
    const file = path.join(dir, 'v4.sqlite');
    const keys = chain(3, 11);
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 4)).toBe(0);
    db.prepare('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(ns.id, ns.model, ns.layoutFingerprint, '', 16, 1);
    const u32 = (v: number[]) => Buffer.from(Uint32Array.from(v).buffer);
    db.prepare("INSERT INTO runs(id, anchor, ns, count, keys, parent, position, lengths, crcs, crc_known, created, access, hits, created_ms) VALUES (1, ?, 1, 3, ?, NULL, 0, ?, ?, 5, X'', X'', X'', 9)").run(
      Buffer.from(keys[0]!.slice(0, 16), 'hex'),
      Buffer.from(keys.join(''), 'hex'),
      u32([4096, 4097, 4098]),
      u32([70, 71, 72]),
    );
    // fs: pages 0 and 2 ready and durable (page 2 at a custom location); page 1 pending. host: page 1 ready.
    db.prepare('INSERT INTO copies(run, tier, pending, ready, evicting, durable, verified, locations, updated_ms) VALUES (1, ?, ?, ?, 0, ?, ?, ?, 3)').run('fs', 2, 5, 5, 5, JSON.stringify([null, null, 'far-away']));
    db.prepare('INSERT INTO copies(run, tier, pending, ready, evicting, durable, verified, locations, updated_ms) VALUES (1, ?, 0, 2, 0, 0, 2, NULL, 3)').run('host');
    db.close();

    const index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 4, schemaVersion: SCHEMA_VERSION, droppedVolatile: { host: 1 }, droppedPending: 1, unverified: 2, orphanPages: 1 });
    expect(index.lookupExact(keys).map((h) => h?.tiers.join())).toEqual(['fs', undefined, 'fs']);
    expect(index.pages([keys[2]!])[0]).toMatchObject({ position: 2, length: 4098, crc32c: 72, createdMs: 9 });
    expect(index.pages([keys[0]!])[0]!.crc32c).toBe(70);
    expect(index.copiesOf([keys[2]!])[0]).toEqual([{ tier: 'fs', location: 'far-away', state: 'ready', durable: true, verified: false, updatedMs: 3 }]);
    // The hole at page 1 is stored again in its old slot.
    expect(index.beginStore(ns.id, 'fs', specs(keys)).fresh).toEqual([keys[1]]);
    index.close();
    checkInvariants(file);
  });

  it('migrates a version-5 database (anchors table) to anchors kept with each segment', () => {
    const file = path.join(dir, 'v5.sqlite');
    const a = chain(100, 21); // two anchor ranges (0..63, 64..99)
    const b = chain(5, 22);
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    expect(migrate(db, 5)).toBe(0);
    db.prepare('INSERT INTO namespaces(name, model, layout, tenant, tokens_per_page, created_ms) VALUES (?, ?, ?, ?, ?, ?)').run(ns.id, ns.model, ns.layoutFingerprint, '', 16, 1);
    db.prepare("INSERT INTO tier_names(code, name) VALUES (1, 'fs')").run();
    const u32 = (n: number, v: number) => Buffer.from(new Uint32Array(n).fill(v).buffer);
    [a, b].forEach((keys, i) => {
      const id = i + 1;
      const bytes = Buffer.from(keys.join(''), 'hex');
      db.prepare('INSERT INTO segments(id, ns, count, width, position, created_ms, parent, keys) VALUES (?, 1, ?, 32, 0, 7, NULL, ?)').run(id, keys.length, bytes);
      db.prepare("INSERT INTO pagedata(seg, lengths, crcs, crc_known, created, access, hits) VALUES (?, ?, ?, X'', X'', X'', X'')").run(id, u32(keys.length, 4096), u32(keys.length, 9));
      for (let s = 0; s < keys.length; s += 64) db.prepare('INSERT INTO anchors(anchor, seg, slot) VALUES (?, ?, ?)').run(bytes.subarray(s * 32, s * 32 + 8), id, s);
      db.prepare('INSERT INTO copies(id, states, updated_ms) VALUES (?, ?, 3)').run(id * 256 + 1, Buffer.alloc(keys.length, 2 | 4));
    });
    db.close();

    const index = open(file);
    expect(index.recovery).toMatchObject({ migratedFrom: 5, schemaVersion: SCHEMA_VERSION, unverified: 105, orphanPages: 0 });
    expect(index.lookupPrefix(a)).toHaveLength(100);
    expect(index.lookupExact([b[3]!, a[70]!, chain(1, 23)[0]!]).map((h) => h?.tiers.join())).toEqual(['fs', 'fs', undefined]);
    expect(index.pages([a[99]!])[0]).toMatchObject({ position: 99, length: 4096, crc32c: 9, createdMs: 7, parent: a[98] });
    index._internal.cache.clear();
    // Found through the segment's second anchor range, with nothing cached.
    expect(index.lookupPrefix(a.slice(64))).toHaveLength(36);
    index.close();
    checkInvariants(file);
    const raw = new Database(file, { readonly: true });
    expect(raw.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name IN ('anchors', 'segments_ns')").get()).toEqual({ n: 0 });
    raw.close();
  });

  it('is owned by one index at a time: a second open of the file is refused until the first closes', () => {
    const file = path.join(dir, 'owned.sqlite');
    const first = open(file);
    store(first, chain(3, 31));
    const e = thrown(() => BlockIndex.open({ path: file, tiers: TIERS, now }));
    expect(e.code).toBe('ERR_UNAVAILABLE');
    expect(e.message).toContain('in use by another process');
    first.close();
    const second = BlockIndex.open({ path: file, tiers: TIERS, now });
    expect(second.recovery.droppedVolatile).toEqual({ host: 3 });
    second.close();
  });

  it('refuses a database from a newer release', () => {
    const file = path.join(dir, 'future.sqlite');
    const db = new Database(file);
    db.pragma('user_version = 99');
    db.close();
    const e = thrown(() => BlockIndex.open({ path: file, tiers: TIERS }));
    expect(e.code).toBe('ERR_UNSUPPORTED');
    expect(e.message).toContain(`schema version 99, newer than this release supports (${SCHEMA_VERSION})`);
  });
});
