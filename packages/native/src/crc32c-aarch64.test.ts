// The aarch64 CRC32C paths, run for real on an x86-64 machine: cpp/crc32c.cc and a stand-alone check
// (cpp/test/crc32c_check.cc) are cross-compiled with Debian's default arm64 flags (-march=armv8-a, which defines no
// __ARM_FEATURE_CRC32, so the CRC32 and PMULL code must come from target attributes and run-time selection) and
// run under qemu-user. qemu interprets instructions: what this checks is correctness and selection, not speed.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireTools } from '../../../scripts/system-packages.mjs';

const CXX = 'aarch64-linux-gnu-g++';
const QEMU = 'qemu-aarch64';
const cpp = fileURLToPath(new URL('../cpp/', import.meta.url));

interface CheckReport {
  selected: string;
  available: string[];
  checks: number;
  failures: string[];
}

describe('crc32c on aarch64 (cross-compiled, under qemu-aarch64)', () => {
  let dir = '';
  let binary = '';

  beforeAll(() => {
    requireTools([CXX, QEMU]);
    dir = mkdtempSync(path.join(tmpdir(), 'tiersync-crc32c-aarch64-'));
    binary = path.join(dir, 'crc32c_check');
    execFileSync(
      CXX,
      ['-std=c++20', '-O2', '-march=armv8-a', '-Wall', '-Wextra', '-Werror', '-o', binary,
        path.join(cpp, 'test/crc32c_check.cc'), path.join(cpp, 'crc32c.cc'), '-ldl'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
  }, 120_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Runs the check on an emulated CPU; `hwcapMask` (hex) hides AT_HWCAP bits from the selection. */
  const run = (cpu: string, hwcapMask?: string): CheckReport => {
    const env = { ...process.env };
    delete env.CRC32C_TEST_HWCAP_MASK;
    // The sanitizer run preloads x86-64 libasan/libubsan, which the emulated aarch64 loader cannot load (it says so).
    delete env.LD_PRELOAD;
    if (hwcapMask !== undefined) env.CRC32C_TEST_HWCAP_MASK = hwcapMask;
    let out: string;
    try {
      out = execFileSync(QEMU, ['-L', '/usr/aarch64-linux-gnu', '-cpu', cpu, binary], { env, encoding: 'utf8' });
    } catch (err) {
      // A failed check exits 1 after printing its report: show the report, not only the exit status.
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new Error(`${QEMU} -cpu ${cpu} failed: ${e.stdout || ''}${e.stderr || ''}${e.message}`);
    }
    return JSON.parse(out.trim().split('\n').pop() ?? '{}') as CheckReport;
  };

  it('builds without the CRC32 feature flag, yet contains the CRC32 and PMULL instructions', () => {
    const defines = execFileSync(CXX, ['-march=armv8-a', '-dM', '-E', '-x', 'c++', '/dev/null'], { encoding: 'utf8' });
    expect(defines).not.toContain('__ARM_FEATURE_CRC32');
    const disassembly = execFileSync('aarch64-linux-gnu-objdump', ['-d', binary], { encoding: 'utf8', maxBuffer: 64 << 20 });
    expect(disassembly).toMatch(/\tcrc32cx\t/);
    expect(disassembly).toMatch(/\tpmull\t/);
  });

  it.each(['max', 'cortex-a53', 'neoverse-n1'])('on %s (CRC32 + PMULL) selects hw3-clmul and every path is correct', (cpu) => {
    const r = run(cpu);
    expect(r.failures).toEqual([]);
    expect(r.available).toEqual(['table', 'hw1', 'hw3', 'hw3-clmul']);
    expect(r.selected).toBe('hw3-clmul');
    expect(r.checks).toBeGreaterThan(700);
  });

  it('without PMULL (AT_HWCAP shows CRC32 only) selects hw3 with the portable join', () => {
    const r = run('max', '80');
    expect(r.failures).toEqual([]);
    expect(r.available).toEqual(['table', 'hw1', 'hw3']);
    expect(r.selected).toBe('hw3');
  });

  it('without the CRC32 instructions (AT_HWCAP shows neither) falls back to the table', () => {
    const r = run('max', '0');
    expect(r.failures).toEqual([]);
    expect(r.available).toEqual(['table']);
    expect(r.selected).toBe('table');
  });
});
