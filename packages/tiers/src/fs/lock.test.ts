/**
 * The fs tier's folder lock is the kernel's (flock on `lock`): a live holder in another process is refused with a
 * typed error naming it; a SIGKILLed holder's lock is gone the moment the process is, so a restart succeeds at once.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path, { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileLock, TierSyncError, TransferEngine } from '@tiersync/native';
import { FsTier } from './index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../../..');
const PAGE = 4096;
const folders: string[] = [];
const newFolder = () => {
  const f = mkdtempSync(join(tmpdir(), 'tiersync-fs-lock-'));
  folders.push(f);
  return f;
};
const urlOf = (folder: string) => `fs://${folder}?capacity=${64 * PAGE}`;

function holder(url: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [join(here, 'lock-holder.fixture.mjs'), url, String(PAGE)], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('open\n')) resolve(child);
    });
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code) => reject(new Error(`lock holder exited with ${code}: ${err}`)));
  });
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

async function codeOf(p: Promise<unknown>): Promise<TierSyncError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(TierSyncError);
    return e as TierSyncError;
  }
  throw new Error('expected a TierSyncError');
}

describe('fs tier folder lock (kernel flock)', () => {
  let engine: TransferEngine;
  const context = () => ({ engine, pageBytes: PAGE, fingerprint: 'lock-test' });
  beforeAll(() => {
    engine = new TransferEngine({ threads: 1 });
    // The holder process imports the compiled packages.
    execFileSync('npx', ['tsc', '-b', 'packages/tiers'], { cwd: root, stdio: 'inherit' });
  }, 120_000);
  afterAll(async () => {
    await engine.close();
    for (const f of folders) rmSync(f, { recursive: true, force: true });
  });

  it('refuses a folder a live process holds, naming it; opens at once after that process is SIGKILLed', async () => {
    const folder = newFolder();
    const child = await holder(urlOf(folder));
    try {
      const e = await codeOf(new FsTier(urlOf(folder), context()).open());
      expect(e.code).toBe('ERR_UNAVAILABLE');
      expect(e.message).toMatch(new RegExp(`in use by pid ${child.pid} on host .* kernel lock`));
    } finally {
      await killed(child);
    }
    // No pid check, no grace period: the kernel dropped the lock with the process.
    const t = new FsTier(urlOf(folder), context());
    await t.open();
    expect(t.recovery.pages).toBe(0);
    await t.close();
    expect(existsSync(join(folder, 'lock'))).toBe(false);
  }, 60_000);

  it('survives repeated kill -9 and restart without waiting', async () => {
    const folder = newFolder();
    for (let i = 0; i < 3; i++) {
      const child = await holder(urlOf(folder));
      await killed(child);
      expect(readFileSync(join(folder, 'lock'), 'utf8')).toContain(`"pid":${child.pid}`);
    }
    const t = new FsTier(urlOf(folder), context());
    await t.open();
    await t.close();
  }, 60_000);

  it('a crashed driver in this process releases its lock; a second open in this process is refused', async () => {
    const folder = newFolder();
    const a = new FsTier(urlOf(folder), context());
    await a.open();
    expect((await codeOf(new FsTier(urlOf(folder), context()).open())).message).toMatch(/already open in this process/);
    a.simulateCrash();
    expect(existsSync(join(folder, 'lock'))).toBe(true);
    const b = new FsTier(urlOf(folder), context());
    await b.open();
    await b.close();
  });

  it('FileLock: one holder per file across open files; released by release() or by closing', () => {
    const file = join(newFolder(), 'x.lock');
    const a = FileLock.tryAcquire(file, 'a');
    expect(a?.held).toBe(true);
    expect(FileLock.tryAcquire(file)).toBeUndefined();
    expect(FileLock.noteOf(file)).toBe('a');
    a!.release({ unlink: true });
    expect(existsSync(file)).toBe(false);
    const b = FileLock.tryAcquire(file, 'b');
    expect(b).toBeDefined();
    b!.release();
    b!.release();
    expect(existsSync(file)).toBe(true);
    expect(() => FileLock.tryAcquire('')).toThrow(TierSyncError);
  });
});
