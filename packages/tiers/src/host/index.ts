/**
 * host tier: host RAM. `host://?capacity=64GiB` (anonymous memory, starts empty) or
 * `host://?capacity=64GiB&shm=/dev/shm/tiersync-a` (a /dev/shm file that a restarted process reattaches).
 *
 * Shared layout: the arena starts with a slot table (one 160-byte record per slot: state, length, CRC32C, key, and
 * the page's namespace, parent and position when the key has at most 64 hex digits),
 * then the page slots. A record is marked valid only after its page's bytes have landed, and cleared before its
 * slot is reused, so a process killed mid-write leaves the slot free, never a torn page. Reattached pages are
 * verified against their CRC32C on every read.
 */
import { FileLock, HostArena, TierSyncError, crc32c, type Slot } from '@tiersync/native';
import { z } from 'zod';
import type { PageKey, PageMeta, TierCapabilities, TierContext } from '../driver.js';
import { NAMESPACE_ID_PATTERN, PAGE_KEY_PATTERN } from '../driver.js';
import { packHex, unpackHex } from '../page-meta.js';
import { MemoryTier, type SlotStore } from '../memory-tier.js';
import { bool, configError, parseOptions, size, splitUrlOf } from '../url.js';

export { shmHugePages, type ShmHugePages } from './shm-huge-pages.js';

const options = z
  .object({
    capacity: size('a capacity'),
    /** Back the tier with this file (normally under /dev/shm) so pages survive a restart. */
    shm: z.string().startsWith('/', 'must be an absolute path').optional(),
    /** mlock the arena. Default false. */
    lock: bool.optional(),
    /** madvise(MADV_HUGEPAGE). Default true. */
    hugepages: bool.optional(),
    /**
     * Fault the whole arena in at open (MAP_POPULATE). Default true: a cache tier claims its memory up front, so
     * the first write to a page does not pay for faulting it in on the data path (measured: 4x slower peer puts).
     */
    prefault: bool.optional(),
    /** Verify CRC32C on every read. Default: true with shm, false otherwise. */
    verify: bool.optional(),
  })
  .strict();

export interface HostTierConfig {
  capacity: number;
  shm?: string;
  lock: boolean;
  hugePages: boolean;
  prefault: boolean;
  verify: boolean;
  redacted: string;
}

export function parseHostUrl(url: string): HostTierConfig {
  const u = splitUrlOf(url, 'host');
  if (u.host !== '' || (u.path !== '' && u.path !== '/')) throw configError(u, 'host:// takes only options, e.g. host://?capacity=64GiB');
  const o = parseOptions(u, options);
  return {
    capacity: o.capacity,
    ...(o.shm ? { shm: o.shm } : {}),
    lock: o.lock ?? false,
    hugePages: o.hugepages ?? true,
    prefault: o.prefault ?? true,
    verify: o.verify ?? o.shm !== undefined,
    redacted: u.redacted,
  };
}

// Slot record (160 bytes): 0 u32 state, 4 u32 length, 8 u32 crc32c, 12 u32 key length, 16.. key (ASCII hex).
// When the key has at most 64 hex digits, bytes 80..160 may hold the page's meta:
//   80 u32 'META'   84 u8 namespace length (hex digits, 1..64)   86 u16 parent length (0: none, at most 64)
//   88 u32 position   92..124 parent, 124..156 namespace (hex packed two digits a byte)
//  156 u32 CRC32C of bytes [4, 156): meta is trusted only with the record it was written with.
// Records written before meta existed hold no 'META' at 80 (or a checksum that does not match): listed without it.
// The peer data plane writes the form without meta itself (peer_server.cc, WriteSlotRecord) for the pages peers
// put, before it acknowledges them: keep the two in step.
const RECORD = 160;
const VALID = 0x50414745; // "PAGE"
const META = 0x4154454d; // "META"
const META_AT = 80;
const PARENT_AT = 92;
const NAMESPACE_AT = 124;
const META_CRC_AT = 156;
/** Longest key (and parent) whose record has room for meta. */
const META_KEY_DIGITS = 64;
const ALIGN = 4096;

export class HostTier extends MemoryTier {
  readonly capabilities: TierCapabilities;
  readonly config: HostTierConfig;
  #arena: HostArena | undefined;
  /** The kernel lock on the shm file: one tier per file, released by the kernel if this process dies. */
  #lock: FileLock | undefined;
  /** Why the tier started empty, or that it reattached (for logs). */
  attachNote = '';

  constructor(url: string, context: TierContext) {
    const config = parseHostUrl(url);
    super(config.redacted, context, config.capacity);
    this.config = config;
    this.capabilities = { kind: 'host', persistent: config.shm !== undefined, remote: false, zeroCopy: true, memoryKinds: ['host'], verifiesOnRead: config.verify, rangeReads: !config.verify };
  }

  /**
   * @internal Where the slot records are when this tier persists them (shm): one of `recordBytes` per slot from
   * arena offset 0, the slots from `dataOffset`. Undefined for a volatile tier (or before open).
   */
  slotRecords(): { dataOffset: number; recordBytes: number } | undefined {
    const dataOffset = this.store?.dataOffset;
    return this.config.shm && dataOffset !== undefined ? { dataOffset, recordBytes: RECORD } : undefined;
  }

  protected async openStore(): Promise<SlotStore> {
    const pageBytes = this.context.pageBytes;
    const slots = Math.max(1, Math.floor(this.config.capacity / pageBytes));
    const tableBytes = this.config.shm ? Math.ceil((slots * RECORD) / ALIGN) * ALIGN : 0;
    const arena = HostArena.create({
      capacity: tableBytes + slots * pageBytes,
      pageSize: pageBytes,
      fingerprint: this.context.fingerprint,
      lock: this.config.lock,
      hugePages: this.config.hugePages,
      prefault: this.config.prefault,
      ...(this.config.shm ? { shmPath: this.config.shm } : {}),
    });
    if (this.config.shm) {
      // Taken before anything reads or writes the slot table: a second tier on the file (another process, or this
      // one) would allocate the same slots. Its own arena mapping is dropped untouched.
      const lock = FileLock.tryAcquire(this.config.shm);
      if (!lock) {
        arena.close();
        throw new TierSyncError(`host tier: ${this.config.shm} is in use by another host tier (in this process or another); one tier per file, and the kernel lock is released when its holder exits`, 'ERR_UNAVAILABLE', { tier: 'host' });
      }
      this.#lock = lock;
    }
    this.#arena = arena;
    this.attachNote = arena.attachNote;
    if (!this.config.shm) return { arena, dataOffset: 0 };
    const table = new DataView(arena.view(0, tableBytes).buffer, arena.view(0, tableBytes).byteOffset, tableBytes);
    if (arena.attached) this.#recover(table, slots, pageBytes);
    const keyBytes = new TextEncoder();
    const bytes = arena.view(0, tableBytes);
    return {
      arena,
      dataOffset: tableBytes,
      commit: (slot: Slot, page) => {
        const at = slot * RECORD;
        if (!page) {
          table.setUint32(at, 0, true);
          return;
        }
        table.setUint32(at, 0, true); // invalid while the record is rewritten
        table.setUint32(at + 4, page.length, true);
        table.setUint32(at + 8, page.crc32c, true);
        const key = keyBytes.encode(page.key);
        table.setUint32(at + 12, key.length, true);
        bytes.fill(0, at + 16, at + RECORD);
        bytes.set(key, at + 16);
        const m = page.meta;
        if (m && page.key.length <= META_KEY_DIGITS && (m.parent?.length ?? 0) <= META_KEY_DIGITS) {
          table.setUint32(at + META_AT, META, true);
          bytes[at + META_AT + 4] = m.namespace.length;
          table.setUint16(at + META_AT + 6, m.parent?.length ?? 0, true);
          table.setUint32(at + META_AT + 8, m.position, true);
          if (m.parent !== null) packHex(bytes, at + PARENT_AT, m.parent);
          packHex(bytes, at + NAMESPACE_AT, m.namespace);
          table.setUint32(at + META_CRC_AT, crc32c(bytes.subarray(at + 4, at + META_CRC_AT)), true);
        }
        table.setUint32(at, VALID, true); // last: the page is visible only now
      },
    };
  }

  /** Rebuilds the key table from the slot records of a reattached arena; malformed records are dropped. */
  #recover(table: DataView, slots: number, pageBytes: number): void {
    const decoder = new TextDecoder();
    let dropped = 0;
    for (let s = 0; s < slots; s++) {
      const at = s * RECORD;
      if (table.getUint32(at, true) !== VALID) continue;
      const length = table.getUint32(at + 4, true);
      const crc32c = table.getUint32(at + 8, true);
      const keyLength = table.getUint32(at + 12, true);
      const key: PageKey = keyLength <= 128 ? decoder.decode(new Uint8Array(table.buffer, table.byteOffset + at + 16, keyLength)) : '';
      if (!PAGE_KEY_PATTERN.test(key) || length < 1 || length > pageBytes || this.table.has(key)) {
        table.setUint32(at, 0, true);
        dropped++;
        continue;
      }
      this.table.set(key, { slot: s as Slot, length, crc32c, meta: this.#metaOf(table, at, key) });
    }
    this.attachNote = `${this.attachNote}: ${this.table.size} page(s) recovered${dropped ? `, ${dropped} malformed record(s) dropped` : ''}`;
  }

  /** The meta of the record at `at` when it has some and it checks out; undefined otherwise (older records). */
  #metaOf(table: DataView, at: number, key: PageKey): PageMeta | undefined {
    if (key.length > META_KEY_DIGITS || table.getUint32(at + META_AT, true) !== META) return undefined;
    const bytes = new Uint8Array(table.buffer, table.byteOffset, table.byteLength);
    if (crc32c(bytes.subarray(at + 4, at + META_CRC_AT)) !== table.getUint32(at + META_CRC_AT, true)) return undefined;
    const nsDigits = bytes[at + META_AT + 4]!;
    const parentDigits = table.getUint16(at + META_AT + 6, true);
    if (nsDigits < 1 || nsDigits > 64 || parentDigits > META_KEY_DIGITS) return undefined;
    const namespace = unpackHex(bytes, at + NAMESPACE_AT, nsDigits);
    const parent = parentDigits === 0 ? null : unpackHex(bytes, at + PARENT_AT, parentDigits);
    if (!NAMESPACE_ID_PATTERN.test(namespace) || (parent !== null && !PAGE_KEY_PATTERN.test(parent))) return undefined;
    return { namespace, parent, position: table.getUint32(at + META_AT + 8, true) };
  }

  protected closeStore(): void {
    this.#arena?.close();
    this.#lock?.release();
    this.#lock = undefined;
  }
}
