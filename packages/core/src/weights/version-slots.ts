/**
 * Double-buffered version slots in device memory. A new version is assembled into the slot readers are not
 * using; switching is one assignment of the active index on the JS thread, so a reader that acquired a lease sees
 * the old version or the new one, never a mix. A slot is never written while a lease on it is held: the writer
 * waits (with a deadline) until its readers release.
 */
import { DeviceArena, HostArena, TierSyncError } from '@tiersync/native';
import type { ManifestTensor, WeightManifest } from './manifest.js';

/** Where a receiver assembles versions: emulated or CUDA device memory, or host memory (CPU inference). */
export type SlotMemory = { kind: 'device'; backend?: 'sim' | 'cuda'; device?: number } | { kind: 'host' };

interface Slot {
  arena: HostArena | DeviceArena | undefined;
  manifest: WeightManifest | undefined;
  readers: number;
  /** Assembly in progress: the version and which placements are already done (resume after an interruption). */
  pending: { version: string; placed: Uint8Array } | undefined;
}

/** A reader's hold on one complete version. Release it when done; the slot is not overwritten before. */
export interface WeightLease {
  readonly version: string;
  readonly arena: HostArena | DeviceArena;
  readonly tensors: ReadonlyMap<string, ManifestTensor>;
  release(): void;
}

export class VersionSlots {
  readonly #memory: SlotMemory;
  readonly #slots: [Slot, Slot] = [
    { arena: undefined, manifest: undefined, readers: 0, pending: undefined },
    { arena: undefined, manifest: undefined, readers: 0, pending: undefined },
  ];
  #active = -1;
  #releaseWaiters: Array<() => void> = [];

  constructor(memory: SlotMemory) {
    this.#memory = memory;
  }

  /** The active version, or undefined before the first switch. */
  get version(): string | undefined {
    return this.#active < 0 ? undefined : this.#slots[this.#active]!.manifest?.version;
  }

  get activeManifest(): WeightManifest | undefined {
    return this.#active < 0 ? undefined : this.#slots[this.#active]!.manifest;
  }

  /** Leases the active version; undefined before the first switch. */
  acquire(): WeightLease | undefined {
    if (this.#active < 0) return undefined;
    const slot = this.#slots[this.#active]!;
    const manifest = slot.manifest!;
    slot.readers++;
    let released = false;
    return {
      version: manifest.version,
      arena: slot.arena!,
      tensors: new Map(manifest.tensors.map((t) => [t.name, t])),
      release: () => {
        if (released) return;
        released = true;
        slot.readers--;
        if (slot.readers === 0) for (const w of this.#releaseWaiters.splice(0)) w();
      },
    };
  }

  /**
   * The slot to assemble `version` into, with its record of placements already done (kept from an interrupted
   * attempt at the same version). Waits up to `waitMs` for readers of that slot to release.
   * @throws TierSyncError ERR_TIMEOUT when readers hold the slot past the deadline
   */
  async beginWrite(version: string, slotBytes: number, placements: number, waitMs: number): Promise<{ arena: HostArena | DeviceArena; placed: Uint8Array }> {
    const index = this.#active === 0 ? 1 : 0;
    const slot = this.#slots[index]!;
    const deadline = Date.now() + waitMs;
    while (slot.readers > 0) {
      const left = deadline - Date.now();
      if (left <= 0) throw new TierSyncError(`a reader still holds version '${slot.manifest?.version}' in the slot needed for '${version}' after ${waitMs} ms`, 'ERR_TIMEOUT');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#releaseWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    this.#ensureArena(slot, slotBytes);
    // The slot's previous version is being overwritten: it is no longer a complete version.
    slot.manifest = undefined;
    if (!slot.pending || slot.pending.version !== version || slot.pending.placed.length !== placements) {
      slot.pending = { version, placed: new Uint8Array(placements) };
    }
    return { arena: slot.arena!, placed: slot.pending.placed };
  }

  /** Allocates the next slot's memory ahead of the pull that needs it (no-op when readers hold it). */
  reserve(slotBytes: number): void {
    const slot = this.#slots[this.#active === 0 ? 1 : 0]!;
    if (slot.readers === 0) this.#ensureArena(slot, slotBytes);
  }

  #ensureArena(slot: Slot, slotBytes: number): void {
    if (slot.arena && slot.arena.capacity >= slotBytes) return;
    slot.arena?.close();
    slot.arena = undefined;
    slot.manifest = undefined;
    slot.pending = undefined;
    const capacity = Math.max(slotBytes, 4096);
    slot.arena =
      this.#memory.kind === 'host'
        ? HostArena.create({ capacity, prefault: true })
        : DeviceArena.create(
            this.#memory.backend === 'cuda' ? { backend: 'cuda', capacity, ...(this.#memory.device !== undefined ? { device: this.#memory.device } : {}) } : { backend: 'sim', capacity },
          );
  }

  /** Makes the assembled slot the active version (one assignment: readers switch atomically). */
  commit(manifest: WeightManifest): void {
    const index = this.#active === 0 ? 1 : 0;
    const slot = this.#slots[index]!;
    if (!slot.pending || slot.pending.version !== manifest.version) {
      throw new TierSyncError(`no assembly of version '${manifest.version}' to commit`, 'ERR_INVALID_ARGUMENT');
    }
    slot.pending = undefined;
    slot.manifest = manifest;
    this.#active = index;
  }

  close(): void {
    for (const s of this.#slots) {
      s.arena?.close();
      s.arena = undefined;
    }
  }
}
