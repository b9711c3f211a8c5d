/**
 * Double-buffered version slots in device memory. A new version is assembled into the slot readers are not
 * using; switching is one assignment of the active index on the JS thread, so a reader that acquired a lease sees
 * the old version or the new one, never a mix. A slot is never written while a lease on it is held: the writer
 * waits (with a deadline) until its readers release.
 */
import { DeviceArena, HostArena, TierSyncError, describeValue } from '@tiersync/native';
import { placements, type ManifestTensor, type WeightManifest } from './manifest.js';

/** Where a receiver assembles versions: emulated or CUDA device memory, or host memory (CPU inference). */
export type SlotMemory = { kind: 'device'; backend?: 'sim' | 'cuda'; device?: number } | { kind: 'host' };

/** A chunk known to sit at a slot offset (its bytes were copied there and checked against the chunk's CRC32C). */
interface Held {
  hash: string;
  length: number;
}

/** Where one placement of a version goes and which chunk it needs (by hash, so slot contents can be compared). */
export interface SlotPlacement {
  slotOffset: number;
  length: number;
  hash: string;
}

interface Slot {
  arena: HostArena | DeviceArena | undefined;
  manifest: WeightManifest | undefined;
  readers: number;
  /**
   * Chunks the slot's memory holds outside the pending assembly, by slot offset: what an older version left
   * there. A placement that finds its chunk already at its offset skips the copy, so a delta step rewrites only
   * what changed since the version the slot held (with double buffering, two versions back).
   */
  contents: Map<number, Held>;
  /** Assembly in progress: the version, its placements and which are done (resume after an interruption). */
  pending: { version: string; places: SlotPlacement[]; placed: Uint8Array } | undefined;
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
    { arena: undefined, manifest: undefined, readers: 0, contents: new Map(), pending: undefined },
    { arena: undefined, manifest: undefined, readers: 0, contents: new Map(), pending: undefined },
  ];
  #active = -1;
  #releaseWaiters: Array<() => void> = [];
  /** A pull is assembling into the inactive slot (from beginWrite to commit or endWrite). */
  #writing = false;
  /** A reserve() asked for while a pull was assembling: applied when it ends. */
  #deferred: { slotBytes: number; slots: 1 | 2 } | undefined;

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
   * The slot to assemble `version` into, with its record of placements already done: kept from an interrupted
   * attempt at the same version, or found in place (the chunk a placement needs already sits at its offset, left
   * by the version the slot held before). Waits up to `waitMs` for readers of that slot to release, or until
   * `signal` aborts.
   * @throws TierSyncError ERR_TIMEOUT when readers hold the slot past the deadline, ERR_ABORTED
   */
  async beginWrite(version: string, slotBytes: number, places: SlotPlacement[], waitMs: number, signal?: AbortSignal): Promise<{ arena: HostArena | DeviceArena; placed: Uint8Array; inPlaceBytes: number }> {
    const index = this.#active === 0 ? 1 : 0;
    const slot = this.#slots[index]!;
    this.#writing = true;
    const deadline = Date.now() + waitMs;
    while (slot.readers > 0) {
      if (signal?.aborted) throw new TierSyncError(`pull of '${version}' aborted while a reader held its slot`, 'ERR_ABORTED', { cause: signal.reason });
      const left = deadline - Date.now();
      if (left <= 0) throw new TierSyncError(`a reader still holds version '${slot.manifest?.version}' in the slot needed for '${version}' after ${waitMs} ms`, 'ERR_TIMEOUT');
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(t);
          signal?.removeEventListener('abort', wake);
          resolve();
        };
        const t = setTimeout(wake, left);
        signal?.addEventListener('abort', wake, { once: true });
        this.#releaseWaiters.push(wake);
      });
    }
    this.#ensureArena(slot, slotBytes);
    const old = slot.manifest;
    if (old) {
      // The slot's complete version becomes the record of what its memory holds; it is no longer a version.
      for (const p of placements(old)) slot.contents.set(p.slotOffset, { hash: old.chunks[p.chunk]!.hash, length: p.length });
      slot.manifest = undefined;
    }
    let inPlaceBytes = 0;
    const pending = slot.pending;
    if (!pending || pending.version !== version || !samePlaces(pending.places, places)) {
      // What an interrupted assembly of another version copied is held too.
      if (pending) pending.places.forEach((x, i) => pending.placed[i] && slot.contents.set(x.slotOffset, { hash: x.hash, length: x.length }));
      const placed = new Uint8Array(places.length);
      const kept = new Map<number, Held>();
      places.forEach((x, i) => {
        const held = slot.contents.get(x.slotOffset);
        if (held && held.hash === x.hash && held.length === x.length) {
          placed[i] = 1;
          kept.set(x.slotOffset, held);
          inPlaceBytes += x.length;
        }
      });
      // The rest is about to be overwritten. Placements of one version never overlap, so this assembly never
      // writes over a kept chunk.
      slot.contents = kept;
      slot.pending = { version, places, placed };
    }
    return { arena: slot.arena!, placed: slot.pending!.placed, inPlaceBytes };
  }

  /**
   * Allocates slot memory ahead of the pulls that need it: the slot the next version is assembled into, and with
   * `slots: 2` (before the first version) the other one too. A receiver uses both from its second version on;
   * without this the second slot's allocation is paid inside the first delta pull. No-op for a slot readers hold.
   * While a pull is assembling (into the slot this would reallocate) the reservation is deferred until the pull
   * ends, and then applies to the slot the next version goes to.
   */
  reserve(slotBytes: number, slots: 1 | 2 = 1): void {
    if (slots !== 1 && slots !== 2) throw new TierSyncError(`slots must be 1 or 2, got ${describeValue(slots)}`, 'ERR_INVALID_ARGUMENT');
    if (!Number.isSafeInteger(slotBytes) || slotBytes < 1) throw new TierSyncError(`slotBytes must be an integer >= 1, got ${describeValue(slotBytes)}`, 'ERR_INVALID_ARGUMENT');
    if (this.#writing) {
      this.#deferred = { slotBytes: Math.max(slotBytes, this.#deferred?.slotBytes ?? 0), slots: this.#deferred?.slots === 2 ? 2 : slots };
      return;
    }
    const next = this.#active === 0 ? 1 : 0;
    for (const i of slots === 2 && this.#active < 0 ? [next, 1 - next] : [next]) {
      const slot = this.#slots[i]!;
      if (slot.readers === 0) this.#ensureArena(slot, slotBytes);
    }
  }

  #ensureArena(slot: Slot, slotBytes: number): void {
    if (slot.arena && slot.arena.capacity >= slotBytes) return;
    slot.arena?.close();
    slot.arena = undefined;
    slot.manifest = undefined;
    slot.contents = new Map();
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
    slot.contents = new Map();
    slot.manifest = manifest;
    this.#active = index;
    this.endWrite();
  }

  /** The assembly started by beginWrite ended (committed or failed): applies a reserve() deferred meanwhile. */
  endWrite(): void {
    this.#writing = false;
    const d = this.#deferred;
    this.#deferred = undefined;
    if (d) this.reserve(d.slotBytes, d.slots);
  }

  close(): void {
    for (const s of this.#slots) {
      s.arena?.close();
      s.arena = undefined;
    }
  }
}

function samePlaces(a: SlotPlacement[], b: SlotPlacement[]): boolean {
  return a.length === b.length && a.every((x, i) => x.slotOffset === b[i]!.slotOffset && x.length === b[i]!.length && x.hash === b[i]!.hash);
}
