/**
 * Where the native CRC32C C library is: `libtiersync_crc32c.so`, which packages/native/binding.gyp builds beside the
 * addon (from the addon's own crc32c.cc). The daemon names it in `hello.crc32cLibrary` (feature `crc32c-library`) so
 * a same-host client without a native CRC32C of its own (the Python client, through ctypes) copies and checksums each
 * page in one pass.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

let found: string | null | undefined;

/**
 * The library's absolute path, or null when it is not built. `TIERSYNC_CRC32C_LIBRARY` names another file (an empty
 * value offers none). Resolved once per process.
 */
export function crc32cLibrary(): string | null {
  if (found !== undefined) return found;
  const override = process.env.TIERSYNC_CRC32C_LIBRARY;
  if (override !== undefined) return (found = override && existsSync(override) ? override : null);
  try {
    // @tiersync/native's entry sits one folder below its package root (src/ or dist/), where node-gyp puts build/.
    const root = dirname(dirname(createRequire(import.meta.url).resolve('@tiersync/native')));
    const candidates = ['Release', 'Debug'].map((b) => join(root, 'build', b, 'libtiersync_crc32c.so'));
    found = candidates.find((p) => existsSync(p)) ?? null;
  } catch {
    found = null; // the native package cannot be resolved from here: no library to offer
  }
  return found;
}
