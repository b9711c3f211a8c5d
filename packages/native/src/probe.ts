import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { native, type PeerFrameCrypto } from './addon.js';
import { crc32cImplementations, type Crc32cImplementation } from './crc32c.js';

export interface MachineReport {
  cores: number;
  memoryBytes: number;
  /** The CRC32C implementation every checksum uses here (see crc32cImplementations). */
  crc32c: { implementation: Crc32cImplementation; folding: boolean };
  /** The library that seals authenticated peer frames (peerFrameCrypto), or why none can be chosen. */
  peerFrames: PeerFrameCrypto | { error: string };
  ioUring: { available: boolean; reason?: string };
  direct: { path: string; supported: boolean; reason?: string };
  cuda: ReturnType<typeof native.cudaStatus>;
  hugePages: { transparent: string; reserved: number; note: string };
  /** RLIMIT_MEMLOCK as text from /proc/self/limits ("unlimited" or bytes). */
  memlock: string;
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

/** The CRC32C implementation as `doctor` and `version` print it, e.g. `hw3-clmul + VPCLMULQDQ folding`. */
export function formatCrc32c(c: MachineReport['crc32c']): string {
  return c.folding ? `${c.implementation} + VPCLMULQDQ folding` : c.implementation;
}

/** The peer frames' library as `doctor` prints it, e.g. `ipsec-mb (Intel IPsec-MB 1.3.0 (VAES AVX-512))`. */
export function formatPeerFrames(p: MachineReport['peerFrames']): string {
  return 'error' in p ? `none (${p.error})` : `${p.source} (${p.version})`;
}

/** What this machine offers the transfer core. `directPath`: a folder to test O_DIRECT on. */
export function probeMachine(directPath: string = os.tmpdir()): MachineReport {
  const thp = readOr('/sys/kernel/mm/transparent_hugepage/enabled', 'unknown').trim();
  const thpMode = /\[(\w+)\]/.exec(thp)?.[1] ?? thp;
  const reserved = Number(/HugePages_Total:\s+(\d+)/.exec(readOr('/proc/meminfo', ''))?.[1] ?? 0);
  const memlock = /Max locked memory\s+(\S+)/.exec(readOr('/proc/self/limits', ''))?.[1] ?? 'unknown';
  const crc = crc32cImplementations();
  let peerFrames: MachineReport['peerFrames'];
  try {
    peerFrames = native.peerFrameCrypto();
  } catch (e) {
    peerFrames = { error: (e as Error).message };
  }
  const direct = existsSync(directPath)
    ? native.probeDirect(directPath)
    : { supported: false, reason: `${directPath} does not exist` };
  return {
    cores: os.availableParallelism(),
    memoryBytes: os.totalmem(),
    crc32c: { implementation: crc.selected, folding: crc.folding },
    peerFrames,
    ioUring: native.ioUringStatus(),
    direct: { path: directPath, ...direct },
    cuda: native.cudaStatus(),
    hugePages: {
      transparent: thpMode,
      reserved,
      note:
        reserved > 0
          ? `${reserved} reserved huge pages (MAP_HUGETLB possible)`
          : `no reserved huge pages; arenas use madvise(MADV_HUGEPAGE)${thpMode === 'never' ? ', which THP mode "never" ignores' : ''}`,
    },
    memlock,
  };
}
