import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TierSyncError } from '@tiersync/native/errors';
import { createNamespace, kvLayoutPreset, pageKeys } from '../keys/index.js';
import { Connection } from './connection.js';
import { BlockIndex, type StorePage } from './index.js';

const ns = createNamespace({ model: 'test/disk-full', layout: kvLayoutPreset('llama-3-8b') });

/** A 256 KiB tmpfs to hold the index: mounting needs root, so the test is skipped (with the reason) elsewhere. */
let mount: string | undefined;
let skipped = '';
const base = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-index-full-'));
beforeAll(() => {
  const at = path.join(base, 'small');
  fs.mkdirSync(at);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tiersync-index-full', at], { stdio: 'pipe' });
    mount = at;
  } catch (e) {
    skipped = `cannot mount a tmpfs (${(e as Error).message.split('\n')[0]}); run as root`;
  }
});
afterAll(() => {
  if (mount) execFileSync('umount', [mount], { stdio: 'pipe' });
  fs.rmSync(base, { recursive: true, force: true });
});

describe('the block index on a full filesystem', () => {
  it('reports SQLITE_FULL as the index filesystem being full (ERR_IO), not as out of memory', (ctx) => {
    if (!mount) return ctx.skip(skipped);
    const file = path.join(mount, 'index.sqlite');
    const index = BlockIndex.open({ path: file, tiers: [{ kind: 'fs', persistent: true }] });
    index.registerNamespace({ id: ns.id, model: ns.model, layoutFingerprint: ns.layoutFingerprint, tokensPerPage: ns.layout.tokensPerPage });
    let error: unknown;
    try {
      for (let seed = 0; seed < 10_000 && error === undefined; seed++) {
        const keys = pageKeys(ns, Uint32Array.from({ length: 64 * 16 }, (_, i) => (i * 7919 + seed * 104729) >>> 0));
        const pages: StorePage[] = keys.map((key, i) => ({ key, parent: i === 0 ? null : keys[i - 1]!, position: i, length: 4096, location: `slot-${seed}-${i}`, crc32c: i }));
        try {
          const r = index.beginStore(ns.id, 'fs', pages);
          index.commitCopies(r.fresh.map((key) => ({ key, tier: 'fs', durable: true })));
        } catch (e) {
          error = e;
        }
      }
    } finally {
      try {
        index.close();
      } catch {
        // closing on a full filesystem may fail too (its checkpoint); the error under test is the one above
      }
    }
    expect(error).toBeInstanceOf(TierSyncError);
    const e = error as TierSyncError;
    expect((e.cause as { code?: string }).code).toBe('SQLITE_FULL');
    expect(e.code).toBe('ERR_IO');
    expect(e.message).toContain(`the filesystem holding ${file} is full`);
    expect(e.message).toMatch(/free space there, or move index\.path/);
  });

  it('keeps ERR_NO_MEMORY for an in-memory index that runs out of room', () => {
    const conn = new Connection({ path: ':memory:', synchronous: 'normal', sqliteCacheMiB: 1 });
    try {
      conn.db.exec('CREATE TABLE filler (bytes BLOB)');
      conn.db.pragma(`max_page_count = ${(conn.db.pragma('page_count', { simple: true }) as number) + 4}`);
      const insert = conn.db.prepare('INSERT INTO filler VALUES (?)');
      let error: unknown;
      try {
        conn.tx('filling', () => {
          for (let i = 0; i < 100; i++) insert.run(Buffer.alloc(4096));
        });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(TierSyncError);
      expect((error as TierSyncError).code).toBe('ERR_NO_MEMORY');
      expect((error as TierSyncError).message).toMatch(/^index: filling failed: the in-memory index is out of memory/);
    } finally {
      conn.close();
    }
  });
});
