// The system packages tiersync's native core and its tests use, each with the command that proves it is present.
// scripts/setup.mjs installs the missing ones; tests call requireTools() so that a missing tool fails with the
// tool's name and the setup line instead of a bare ENOENT.
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

/** @typedef {{ apt: string, why: string, present: () => boolean }} SystemPackage */

const onPath = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;

/** Debian's Python, for which its python3-* packages install (a pyenv python3 on PATH does not see them). */
export const DEBIAN_PYTHON = '/usr/bin/python3';
const pyImports = (module) => spawnSync(DEBIAN_PYTHON, ['-c', `import ${module}`], { stdio: 'ignore' }).status === 0;

/** @type {SystemPackage[]} */
export const SYSTEM_PACKAGES = [
  { apt: 'liburing-dev', why: 'io_uring file I/O in the native core', present: () => existsSync('/usr/include/liburing.h') },
  // Intel's IPsec-MB (x86-64 only): its VAES AVX-512 AES-GCM seals peer frames ~2.5x faster than OpenSSL 3.0.
  ...(process.arch === 'x64'
    ? [{ apt: 'libipsec-mb-dev', why: 'AES-GCM of authenticated peer frames at vector speed (x86-64)', present: () => existsSync('/usr/include/intel-ipsec-mb.h') }]
    : []),
  { apt: 'redis-server', why: 'cluster registry tests and bench resp', present: () => onPath('redis-server') },
  { apt: 'redis-tools', why: 'redis-cli and redis-benchmark against the RESP door', present: () => onPath('redis-cli') && onPath('redis-benchmark') },
  { apt: 'chromium', why: 'the simulator report rendered headless', present: () => onPath('chromium') },
  { apt: 'iproute2', why: 'peer tests across network namespaces (ip, tc)', present: () => onPath('ip') && onPath('tc') },
  // The Python client (packages/python) and its tests, on Debian's Python.
  { apt: 'python3-pytest', why: 'the Python client tests', present: () => pyImports('pytest') },
  { apt: 'python3-numpy', why: 'the Python client: numpy arrays in place', present: () => pyImports('numpy') },
  { apt: 'python3-torch', why: 'the Python client: torch tensors and the paged-KV adapter', present: () => pyImports('torch') },
  { apt: 'python3-crcmod', why: 'the Python client: CRC32C in C for daemons without commit-crc-optional, and verify=True', present: () => pyImports('crcmod._crcfunext') },
  { apt: 'python3-redis', why: 'redis-py against the RESP door', present: () => pyImports('redis') },
  { apt: 'python3-zmq', why: 'KV event subscribers', present: () => pyImports('zmq') },
  { apt: 'python3-msgpack', why: 'KV event decoding', present: () => pyImports('msgpack') },
  { apt: 'crossbuild-essential-arm64', why: 'the aarch64 CRC32C test: cross-compiles cpp/crc32c.cc', present: () => onPath('aarch64-linux-gnu-g++') },
  { apt: 'qemu-user', why: 'the aarch64 CRC32C test: runs the cross-compiled check under qemu-aarch64', present: () => onPath('qemu-aarch64') },
];

/** The packages not present on this machine. */
export function missingSystemPackages() {
  return SYSTEM_PACKAGES.filter((p) => !p.present());
}

/** Which apt package provides each tool a test may need. */
const TOOL_PACKAGE = {
  'redis-server': 'redis-server',
  'redis-cli': 'redis-tools',
  'redis-benchmark': 'redis-tools',
  chromium: 'chromium',
  ip: 'iproute2',
  tc: 'iproute2',
  'aarch64-linux-gnu-g++': 'crossbuild-essential-arm64',
  'qemu-aarch64': 'qemu-user',
};

/**
 * Throws one error naming the Python modules Debian's Python cannot import, their apt packages and the setup line.
 * @param {string[]} modules
 */
export function requirePythonModules(modules) {
  const missing = modules.filter((m) => !pyImports(m));
  if (missing.length === 0) return;
  const pkgs = missing.map((m) => `python3-${m}`);
  throw new Error(
    `${DEBIAN_PYTHON} cannot import: ${missing.join(', ')} (apt package ${pkgs.join(', ')}). ` +
      `Install them with the README's first Quickstart line (node scripts/setup.mjs installs them as root) ` +
      `or: apt-get install -y ${pkgs.join(' ')}`,
  );
}

/**
 * Throws one error naming every tool in `tools` that is not on PATH, its apt package and the setup line. Call it
 * from a `beforeAll` so the tests that need the tools fail (never skip silently) on a machine without them.
 * @param {string[]} tools
 */
export function requireTools(tools) {
  const missing = tools.filter((t) => !onPath(t));
  if (missing.length === 0) return;
  const pkgs = [...new Set(missing.map((t) => TOOL_PACKAGE[t] ?? t))];
  throw new Error(
    `missing tool(s): ${missing.join(', ')} (apt package ${pkgs.join(', ')}). ` +
      `Install them with the README's first Quickstart line (node scripts/setup.mjs installs them as root) ` +
      `or: apt-get install -y ${pkgs.join(' ')}`,
  );
}
