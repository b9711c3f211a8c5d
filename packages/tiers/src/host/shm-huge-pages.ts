/**
 * Whether a host tier's /dev/shm file can get transparent huge pages. The tier asks for them (`madvise`,
 * option `hugepages`, as do same-host clients mapping the file), but a tmpfs file gets them only when its mount
 * allows: `huge=always|within_size|advise` (Debian mounts /dev/shm without `huge=`, i.e. `never`), unless the
 * kernel's `shmem_enabled` forces them on (`force`) or off (`deny`) for every mount.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

export interface ShmHugePages {
  /** The mount point holding the file. */
  mount: string;
  /** The mount's `huge=` option (`never` when absent). */
  huge: string;
  /** /sys/kernel/mm/transparent_hugepage/shmem_enabled's selected mode, or `unknown`. */
  shmemEnabled: string;
  /** Whether an madvise(MADV_HUGEPAGE)'d mapping of the file can get huge pages. */
  allowed: boolean;
}

function readOr(file: string, fallback: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return fallback;
  }
}

/**
 * What the mount of `file` allows, from a /proc/mounts text (default: this machine's) and a `shmem_enabled` text;
 * undefined when no mount holds the path (not a Linux /proc).
 */
export function shmHugePages(
  file: string,
  mounts = readOr('/proc/mounts', ''),
  shmemEnabled = readOr('/sys/kernel/mm/transparent_hugepage/shmem_enabled', ''),
): ShmHugePages | undefined {
  const abs = path.resolve(file);
  let best: { mount: string; options: string } | undefined;
  for (const line of mounts.split('\n')) {
    const [, mount, , options] = line.split(' ');
    if (!mount || options === undefined) continue;
    const within = mount === '/' || abs === mount || abs.startsWith(`${mount}/`);
    // The longest mount point wins; a later line for the same point (a remount over it) replaces the earlier one.
    if (within && (!best || mount.length >= best.mount.length)) best = { mount, options };
  }
  if (!best) return undefined;
  const huge = /(?:^|,)huge=([a-z_]+)/.exec(best.options)?.[1] ?? 'never';
  const mode = /\[([a-z_ ]+)\]/.exec(shmemEnabled)?.[1] ?? 'unknown';
  const allowed = mode === 'force' || (mode !== 'deny' && (huge === 'always' || huge === 'within_size' || huge === 'advise'));
  return { mount: best.mount, huge, shmemEnabled: mode, allowed };
}
