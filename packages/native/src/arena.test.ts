import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { DeviceArena, HostArena, TierSyncError, crc32c, cudaStatus, probeMachine } from './index.js';

const addonPath = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'build', 'Release', 'tiersync_native.node');
const shm = `/dev/shm/tiersync-test-${process.pid}`;
afterEach(() => rmSync(shm, { force: true }));

/** Runs a separate Node process that creates the shared arena and fills it; prints the CRC of what it wrote. */
function fillInChildProcess(capacity: number, pageSize: number, fingerprint: string): number {
  const script = `
    const n = require(${JSON.stringify(addonPath)});
    const a = new n.HostArena({ capacity: ${capacity}, pageSize: ${pageSize}, shmPath: ${JSON.stringify(shm)}, fingerprint: ${JSON.stringify(fingerprint)} });
    const v = a.view(0, ${capacity});
    for (let i = 0; i < v.length; i++) v[i] = (i * 31 + 7) & 0xff;
    process.stdout.write(String(n.crc32c(v)));`;
  return Number(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }));
}

describe('HostArena', () => {
  it('lends zero-copy views that share memory', () => {
    const a = HostArena.create({ capacity: 1 << 20 });
    const v1 = a.view(4096, 100);
    const v2 = a.view(4000, 200);
    v1[0] = 42;
    expect(v2[96]).toBe(42);
    expect(v1.buffer).toBe(v2.buffer);
  });

  it('refuses views out of range or across a 1 GiB boundary', () => {
    const a = HostArena.create({ capacity: (1 << 30) + 8192 });
    expect(() => a.view((1 << 30) - 10, 20)).toThrow(/1 GiB/);
    expect(a.view(1 << 30, 8192).length).toBe(8192);
    expect(() => a.view((1 << 30) + 8000, 200)).toThrow(TierSyncError);
  });

  it('reattaches a /dev/shm arena written by another process, byte-exact', () => {
    const crc = fillInChildProcess(1 << 20, 4096, 'llama3-8b/bf16/v1');
    const a = HostArena.create({ capacity: 1 << 20, pageSize: 4096, shmPath: shm, fingerprint: 'llama3-8b/bf16/v1' });
    expect(a.attached).toBe(true);
    expect(a.attachNote).toMatch(/reattached/);
    expect(crc32c(a.view(0, 1 << 20))).toBe(crc);
  });

  it('refuses to reattach on a geometry mismatch, saying which field differs', () => {
    fillInChildProcess(1 << 20, 4096, 'model-a');
    const tryAttach = (capacity: number, pageSize: number, fingerprint: string) => {
      try {
        HostArena.create({ capacity, pageSize, shmPath: shm, fingerprint });
      } catch (e) {
        expect((e as TierSyncError).code).toBe('ERR_GEOMETRY_MISMATCH');
        return (e as Error).message;
      }
      throw new Error('expected a mismatch');
    };
    expect(tryAttach(2 << 20, 4096, 'model-a')).toMatch(/capacity/);
    expect(tryAttach(1 << 20, 8192, 'model-a')).toMatch(/page size/);
    // Both differ (a host tier's arena capacity follows from its page size): the page size is named, the cause.
    expect(tryAttach((1 << 20) + 8192, 8192, 'model-a')).toMatch(/page size is 4096 bytes, expected 8192/);
    expect(tryAttach(1 << 20, 4096, 'model-b')).toMatch(/fingerprint is 'model-a', expected 'model-b'/);
    // The refused attach left the file and its bytes alone.
    expect(HostArena.create({ capacity: 1 << 20, pageSize: 4096, shmPath: shm, fingerprint: 'model-a' }).attached).toBe(true);
  });

  it('starts empty, and says so, when no arena file exists', () => {
    const a = HostArena.create({ capacity: 8192, shmPath: shm });
    expect(a.attached).toBe(false);
    expect(a.attachNote).toMatch(/created/);
    expect(existsSync(shm)).toBe(true);
    expect(() => HostArena.create({ capacity: 8192, shmPath: shm, attach: false })).toThrow(/already exists/);
  });

  it('is not inherited by child processes: a spawn does not make this process fault on every page again', () => {
    const bytes = 64 << 20;
    const a = HostArena.create({ capacity: bytes, hugePages: false });
    const view = a.view(0, bytes);
    view.fill(1);
    execFileSync('true'); // Node forks, then execs
    const before = process.resourceUsage().minorPageFault;
    view.fill(2);
    // Inherited, the arena was write-protected by the fork: one fault per 4 KiB page (16,384) on this second fill.
    expect(process.resourceUsage().minorPageFault - before).toBeLessThan(1000);
    a.close();
  });

  it('locks and advises huge pages when asked', () => {
    const a = HostArena.create({ capacity: 4 << 20, lock: true, hugePages: true });
    expect(a.native.info().locked).toBe(true);
  });
});

describe('DeviceArena', () => {
  it('never lends sim device memory to JavaScript', () => {
    const d = DeviceArena.create({ capacity: 4096 });
    expect((d as unknown as { view?: unknown }).view).toBeUndefined();
    expect((d.native as unknown as { view?: unknown }).view).toBeUndefined();
  });

  it('uses the cuda backend where a device exists, else reports why in CUDA own words and refuses', async () => {
    const s = cudaStatus();
    if (s.available) {
      const { TransferBatch, TransferEngine } = await import('./index.js');
      const engine = new TransferEngine({ threads: 2 });
      const host = HostArena.create({ capacity: 1 << 20 });
      const back = HostArena.create({ capacity: 1 << 20 });
      const dev = DeviceArena.create({ backend: 'cuda', capacity: 1 << 20 });
      host.view(0, 1 << 20).fill(0x5a);
      await engine.submit(new TransferBatch().add(host, 0, dev, 0, 1 << 20));
      await engine.submit(new TransferBatch().add(dev, 0, back, 0, 1 << 20));
      expect(Buffer.compare(back.view(0, 1 << 20), host.view(0, 1 << 20))).toBe(0);
      await engine.close();
      return;
    }
    expect(s.reason).toBeTruthy();
    expect(probeMachine().cuda.available).toBe(false);
    try {
      DeviceArena.create({ backend: 'cuda', capacity: 1 << 20 });
      throw new Error('expected ERR_UNAVAILABLE');
    } catch (e) {
      expect((e as TierSyncError).code).toBe('ERR_UNAVAILABLE');
      expect((e as Error).message).toContain(s.reason!);
    }
  });
});
