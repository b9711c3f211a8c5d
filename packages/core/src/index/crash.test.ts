import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createNamespace, kvLayoutPreset, pageKeys } from '../keys/index.js';
import { BlockIndex } from './index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tiersync-index-crash-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const PAGES = 256;
const ns = createNamespace({ model: 'crash-test', layout: kvLayoutPreset('llama-3-8b') });
const chain = (c: number) => pageKeys(ns, Uint32Array.from({ length: PAGES * 16 }, (_, i) => (i * 7919 + c * 104729) >>> 0));

/** Runs the writer from `start` and SIGKILLs it `delayMs` after it reported `commits` stores. */
function runAndKill(file: string, start: number, commits: number, delayMs: number): Promise<{ committed: number[]; removed: number[] }> {
  const child = spawn(process.execPath, ['--conditions=source', path.join(here, 'crash-writer.fixture.mjs'), file, String(start)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const committed: number[] = [];
  const removed: number[] = [];
  let err = '';
  let buffered = '';
  let killing = false;
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      buffered += d.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        const m = /^(committed|removed) (\d+)$/.exec(line);
        if (m) (m[1] === 'committed' ? committed : removed).push(Number(m[2]));
      }
      // Several lines can arrive in one chunk: kill once the count is reached, whatever it jumped to.
      if (committed.length >= commits && !killing) {
        killing = true;
        setTimeout(() => child.kill('SIGKILL'), delayMs);
      }
    });
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL') resolve({ committed, removed });
      else reject(new Error(`writer exited with ${code}: ${err}`));
    });
  });
}

describe('block index: kill -9 during commits', () => {
  it('reopens consistent: every reported commit is there, nothing half-stored is visible', async () => {
    const file = path.join(dir, 'index.sqlite');
    const done = new Set<number>();
    const gone = new Set<number>();
    let next = 0;
    for (const [commits, delay] of [
      [12, 0],
      [9, 3],
      [15, 1],
    ] as const) {
      const r = await runAndKill(file, next, commits, delay);
      for (const c of r.committed) done.add(c);
      for (const c of r.removed) gone.add(c);
      const last = Math.max(...r.committed);
      next = last + 2; // leave the possibly in-flight chain alone
      // The writer removes chain last-2 right after reporting `last` when last % 4 === 3: a kill can land after that
      // removal committed and before it was reported, so that chain may be whole or gone (never half).
      const removing = last % 4 === 3 && !gone.has(last - 2) ? last - 2 : undefined;

      const index = BlockIndex.open({ path: file, tiers: [{ kind: 'host', persistent: true }, { kind: 'fs', persistent: true }] });
      for (let c = 0; c < next; c++) {
        const hit = index.lookupPrefix(chain(c)).length;
        // A chain's commit is one transaction: all of it or none of it.
        expect([0, PAGES]).toContain(hit);
        if (done.has(c) && !gone.has(c) && c !== removing) expect(hit, `chain ${c} was reported committed`).toBe(PAGES);
        if (gone.has(c)) expect(hit, `chain ${c} was reported removed`).toBe(0);
        // The writer is dead: what the reopened index shows of that chain is final for the later rounds too
        // (a removal that landed unreported was later taken for a loss: failed once in CI on Node 24).
        if (c === removing && hit === 0) gone.add(c);
      }
      expect(index.stats().tiers.fs!.pending + index.stats().tiers.host!.pending).toBe(0);
      index.close();

      const db = new Database(file, { readonly: true });
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(db.prepare('SELECT count(*) AS n FROM copies c WHERE NOT EXISTS (SELECT 1 FROM segments s WHERE s.id = c.id / 256)').get()).toEqual({ n: 0 });
      expect(db.prepare('SELECT count(*) AS n FROM segments s WHERE NOT EXISTS (SELECT 1 FROM copies c WHERE c.id / 256 = s.id)').get()).toEqual({ n: 0 });
      // After recovery only ready copies remain: nothing pending or being evicted, no copies row without a page.
      for (const r of db.prepare('SELECT states FROM copies').all() as Array<{ states: Buffer }>) {
        expect(r.states.every((b) => (b & 3) === 0 || (b & 3) === 2)).toBe(true);
        expect(r.states.some((b) => (b & 3) === 2)).toBe(true);
      }
      db.close();
    }
    expect(done.size).toBeGreaterThanOrEqual(36);
  }, 120_000);
});
