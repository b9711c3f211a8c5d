// Shared helpers for this package's tests (excluded from the build).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** Fills bytes with an xorshift pattern that differs per seed and per position. */
export function pattern(bytes: Uint8Array, seed: number): Uint8Array {
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < bytes.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

/** A fresh folder on the root filesystem (O_DIRECT works there; tmpfs would refuse it). */
export function tempDir(prefix: string): { dir: string; cleanup: () => void } {
  const base = process.env.TIERSYNC_TEST_DIR ?? path.join(os.homedir(), '.cache', 'tiersync-test');
  mkdirSync(base, { recursive: true });
  const dir = mkdtempSync(path.join(base, `${prefix}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
