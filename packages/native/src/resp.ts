/**
 * The RESP door's native socket layer (cpp/resp_door.cc): a door thread owns the listening socket and its clients
 * (epoll), lands the value of `SET key value` straight into host-arena slots granted in advance (CRC32C computed as
 * the bytes land), answers `GET key` of values JavaScript mirrors into it (mirror(): pages in host-arena slots,
 * checked by slot version and CRC32C as they are copied into the reply), and hands everything else to JavaScript
 * as the client's raw bytes. The RESP command set, the catalog and per-client state stay in JavaScript
 * (core/server/resp).
 */
import { native } from './addon.js';
import type { HostArena } from './arena.js';
import { TierSyncError } from './errors.js';

export interface RespNativeOptions {
  host?: string;
  /** 0: any free port. */
  port?: number;
  /** Slot size of the granted pool (the host tier's page size). */
  pageBytes: number;
  maxBulkBytes?: number;
  maxArrayLength?: number;
  maxInlineBytes?: number;
  maxKeyBytes?: number;
  /** Input held natively per client (a SET waiting behind forwarded commands) before its socket is not read. */
  maxPendingBytes?: number;
  /** Deadline for a command held natively to arrive once begun, ms. */
  requestTimeoutMs?: number;
  /**
   * Clients served at once: one past it is answered `-ERR max number of clients reached` and closed on the door
   * thread before anything it sent is read (no Accept event). Default 0: no bound.
   */
  maxClients?: number;
  /** SETs of a new client may land at once (the door needs no AUTH); otherwise only after setFast(conn, true). */
  landBeforeAuth?: boolean;
  /**
   * With landBeforeAuth: the tenant id (as given to setFast) a new client has at once, so its GETs, MGETs and EXISTS
   * of mirrored values are answered on the door thread from its first command. Default 0: after setFast().
   */
  acceptTenant?: number;
  /**
   * One 32-bit version per slot of the host tier the pool's slots come from (a Uint32Array over a
   * SharedArrayBuffer), bumped by the tier whenever it frees the slot. Without it no GET is answered natively.
   */
  slotVersions?: Uint32Array;
  /** Replies queued for a client beyond which its GETs go to JavaScript (whose flow control waits), bytes. */
  maxOutputBytes?: number;
}

/** Counters of the native door. */
export interface RespNativeStats {
  /** Pool slots lent to the door now. */
  pooledSlots: number;
  /** SETs whose value landed in pool slots. */
  landedSets: number;
  /** GETs answered on the door thread from the mirror. */
  nativeGets: number;
  /** `EXISTS key...` answered on the door thread: every key a mirrored value with all its pages in place. */
  nativeExists: number;
  /** `MGET key...` answered on the door thread: every key a mirrored value whose pages all matched. */
  nativeMgets: number;
  /** GETs of a mirrored key forwarded because a slot version or CRC32C no longer matched (the entry dropped). */
  getMismatches: number;
  /**
   * Native GETs answered with a reply kept from an earlier GET of the same entry (the last 8 values up to 1 MiB),
   * sent again while every page's slot version is unchanged: no copy, no CRC32C pass.
   */
  hotGets: number;
  /** Keys in the mirror now. */
  mirroredKeys: number;
  /**
   * Native GETs whose read was not recorded for takeServed(): the record of entries served was full (65,536
   * entries between two takeServed() calls).
   */
  unrecordedGets: number;
  /** Connections refused at accept because maxClients were open. */
  refusedClients: number;
}

/**
 * Changes of the door's mirror of the catalog, applied in order: `drop` removes a key of a tenant (nothing when
 * absent), `put` installs or replaces it. Tenant ids are the caller's (>= 1), as given to setFast().
 */
export class RespMirrorOps {
  /** [0, tenant, key] or [1, tenant, key, valueLength, id, pages, (offset, length, crc32c, slot, version) per page]. */
  readonly ops: number[] = [];
  readonly keys: Uint8Array[] = [];

  get empty(): boolean {
    return this.ops.length === 0;
  }

  drop(tenant: number, key: Uint8Array): void {
    this.ops.push(0, tenant, this.keys.length);
    this.keys.push(key);
  }

  /**
   * `pages` arrays: one entry per page, in order. `id`: the caller's id of this entry (a safe integer), reported by
   * takeServed() once the door thread has answered a GET of it; 0: never reported.
   */
  put(tenant: number, key: Uint8Array, length: number, offsets: ArrayLike<number>, lengths: ArrayLike<number>, crcs: ArrayLike<number>, slots: ArrayLike<number>, versions: ArrayLike<number>, id = 0): void {
    const ops = this.ops;
    ops.push(1, tenant, this.keys.length, length, id, offsets.length);
    for (let i = 0; i < offsets.length; i++) ops.push(offsets[i]!, lengths[i]!, crcs[i]!, slots[i]!, versions[i]!);
    this.keys.push(key);
  }

  clear(): void {
    this.ops.length = 0;
    this.keys.length = 0;
  }

  /** The changes as the addon takes them (ops as numbers, keys in order); this object is left empty. */
  take(): { ops: Float64Array; keys: Uint8Array[] } {
    const taken = { ops: Float64Array.from(this.ops), keys: this.keys.slice() };
    this.clear();
    return taken;
  }
}

/** What the door thread reports, in order per client. */
export type RespNativeEvent =
  | { kind: 'accept'; conn: number; host: string; port: number }
  | { kind: 'data'; conn: number; bytes: Buffer }
  | { kind: 'end'; conn: number }
  | { kind: 'close'; conn: number }
  | { kind: 'drain'; conn: number }
  /** `SET key value` whose value landed in granted slots (now the receiver's: commit or free them). */
  | { kind: 'set'; conn: number; name: Buffer; key: Buffer; offsets: Float64Array; lengths: Uint32Array; crcs: Uint32Array; length: number };

interface NativeRespDoor {
  readonly port: number;
  readonly pooledSlots: number;
  write(conn: number, parts: Uint8Array[]): number;
  end(conn: number): void;
  destroy(conn: number): void;
  pause(conn: number, paused: boolean): void;
  done(conn: number): void;
  flush(conns: Float64Array, counts: Uint32Array, parts: Uint8Array[], dones: Uint32Array, mirrorOps?: Float64Array, mirrorKeys?: Uint8Array[]): Float64Array;
  setFast(conn: number, fast: boolean, tenant?: number): void;
  mirror(ops: Float64Array, keys: Uint8Array[]): void;
  takeServed(): Float64Array;
  passthrough(conn: number): void;
  lastActive(conn: number): number;
  grant(offsets: Float64Array, slotBytes: number): void;
  takePool(): Float64Array;
  stats(): RespNativeStats;
  close(): void;
}

type RespPageKeysFn = (salt: Uint8Array, tag: string, tenants: string[], keys: Uint8Array[], generations: Float64Array, counts: Uint32Array) => string[];

type NativeRespDoorClass = new (arena: unknown, options: RespNativeOptions, onEvents: (events: RespNativeEvent[]) => void) => NativeRespDoor;

/** True when this build of the addon has the native RESP door. */
export function respNativeAvailable(): boolean {
  return typeof (native as unknown as { RespDoorNative?: unknown }).RespDoorNative === 'function';
}

/**
 * The native RESP socket layer. Events arrive on the JS thread, batched, through `onEvents`.
 * @throws TierSyncError ERR_UNAVAILABLE (port taken, or an addon without it), ERR_IO, ERR_INVALID_ARGUMENT
 */
export class RespDoorNative {
  readonly #native: NativeRespDoor;

  constructor(arena: HostArena, options: RespNativeOptions, onEvents: (events: RespNativeEvent[]) => void) {
    const Ctor = (native as unknown as { RespDoorNative?: NativeRespDoorClass }).RespDoorNative;
    if (!Ctor) throw new TierSyncError('this build of @tiersync/native has no native RESP door; rebuild the addon', 'ERR_UNAVAILABLE');
    // Set events carry their name and key as views into one buffer per batch: made Buffers here (views, no copy).
    this.#native = new Ctor(arena.native, options, (events) => {
      for (const e of events) {
        if (e.kind !== 'set') continue;
        e.name = Buffer.from(e.name.buffer, e.name.byteOffset, e.name.byteLength);
        e.key = Buffer.from(e.key.buffer, e.key.byteOffset, e.key.byteLength);
      }
      onEvents(events);
    });
  }

  get port(): number {
    return this.#native.port;
  }

  /** Queues reply bytes for a client (written at once when nothing is queued); returns the bytes still queued. */
  write(conn: number, parts: Uint8Array[]): number {
    return this.#native.write(conn, parts);
  }

  /** Closes the client once its replies are written. */
  end(conn: number): void {
    this.#native.end(conn);
  }

  destroy(conn: number): void {
    this.#native.destroy(conn);
  }

  /** Stops (true) or resumes reading the client's socket for bytes handed to JavaScript. */
  pause(conn: number, paused: boolean): void {
    this.#native.pause(conn, paused);
  }

  /** One command handed to JavaScript (forwarded or landed) is answered: its reply is written or queued. */
  done(conn: number): void {
    this.#native.done(conn);
  }

  /**
   * Several clients' replies and answered commands in one call: first `mirror`'s changes (as mirror(), then
   * cleared), then for each client i in order, its `counts[i]` next `parts` are written (as write()), then done()
   * is called `dones[i]` times. Returns the bytes still queued per client.
   * @throws TierSyncError ERR_INVALID_ARGUMENT (nothing of the batch applied when a mirror op is malformed)
   */
  flush(conns: Float64Array, counts: Uint32Array, parts: Uint8Array[], dones: Uint32Array, mirror?: RespMirrorOps): Float64Array {
    if (!mirror || mirror.empty) return this.#native.flush(conns, counts, parts, dones);
    const { ops, keys } = mirror.take();
    return this.#native.flush(conns, counts, parts, dones, ops, keys);
  }

  /**
   * Whether the client's `SET key value` may land natively (the client is authenticated), and the tenant id its
   * GETs are looked up under in the mirror (0 or none: its GETs go to JavaScript).
   */
  setFast(conn: number, fast: boolean, tenant = 0): void {
    if (!Number.isInteger(tenant) || tenant < 0 || tenant > 0xffffffff) throw new TierSyncError(`tenant must be a 32-bit id, got ${tenant}`, 'ERR_INVALID_ARGUMENT');
    this.#native.setFast(conn, fast, tenant);
  }

  /**
   * Applies mirror changes now (in order) and clears `ops`. Values whose slots a later free bumps are no longer
   * answered natively (the GET goes to JavaScript and the entry is dropped).
   * @throws TierSyncError ERR_INVALID_ARGUMENT (a malformed op: nothing applied), ERR_CLOSED
   */
  mirror(ops: RespMirrorOps): void {
    if (ops.empty) return;
    const taken = ops.take();
    this.#native.mirror(taken.ops, taken.keys);
  }

  /**
   * The ids (RespMirrorOps.put) of the mirror entries the door thread answered GETs of since the last call, each
   * once, in the order first served; the record starts empty again. At most 65,536 entries are recorded between two
   * calls (stats().unrecordedGets counts the GETs beyond). Entries put with id 0 are never reported.
   */
  takeServed(): Float64Array {
    return this.#native.takeServed();
  }

  /** Hands every later byte of the client to JavaScript. */
  passthrough(conn: number): void {
    this.#native.passthrough(conn);
  }

  /** When the client last sent bytes (ms since the epoch). */
  lastActive(conn: number): number {
    return this.#native.lastActive(conn);
  }

  /** Host-arena slots the door may land values in (reserved in the tier by the caller). */
  grant(offsets: Float64Array, slotBytes: number): void {
    this.#native.grant(offsets, slotBytes);
  }

  /** Takes back every slot of the pool not in use (for the tier to free). */
  takePool(): Float64Array {
    return this.#native.takePool();
  }

  stats(): RespNativeStats {
    return this.#native.stats();
  }

  /** Granted slots not yet used by a landed value (stats().pooledSlots, without the rest of stats()). */
  get pooledSlots(): number {
    return this.#native.pooledSlots;
  }

  /** Stops the door thread and closes every client; slots of values that did not land return to the pool. */
  close(): void {
    this.#native.close();
  }
}

/** One value whose page keys respPageKeys() derives. */
export interface RespPageKeySpec {
  tenant: string;
  /** The Redis key's bytes as sent. */
  key: Uint8Array;
  generation: number;
  /** Pages of the value. */
  count: number;
}

/**
 * The RESP door's value page keys, many values in one native call: for each value, `count` keys
 * `tag + hex(SHA-256(salt || u32be(tenant UTF-8 bytes) || u32be(key bytes) || u64be(generation) || tenant || key ||
 * u32be(page)))`, flattened in order (core/server/resp/door.ts derives the same keys with node:crypto).
 * @throws TierSyncError ERR_INVALID_ARGUMENT, ERR_UNAVAILABLE (an addon built without it)
 */
export function respPageKeys(salt: Uint8Array, tag: string, values: readonly RespPageKeySpec[]): string[] {
  const fn = (native as unknown as { respPageKeys?: RespPageKeysFn }).respPageKeys;
  if (!fn) throw new TierSyncError('this build of @tiersync/native has no respPageKeys; rebuild the addon', 'ERR_UNAVAILABLE');
  if (!(salt instanceof Uint8Array)) throw new TierSyncError('salt must be a Uint8Array', 'ERR_INVALID_ARGUMENT');
  const tenants: string[] = [];
  const keys: Uint8Array[] = [];
  const generations = new Float64Array(values.length);
  const counts = new Uint32Array(values.length);
  values.forEach((v, i) => {
    if (!Number.isSafeInteger(v.generation) || v.generation < 0) throw new TierSyncError(`values[${i}].generation must be a non-negative safe integer, got ${v.generation}`, 'ERR_INVALID_ARGUMENT');
    if (!Number.isInteger(v.count) || v.count < 0 || v.count > 0xffffffff) throw new TierSyncError(`values[${i}].count must be a non-negative integer, got ${v.count}`, 'ERR_INVALID_ARGUMENT');
    tenants.push(v.tenant);
    keys.push(v.key);
    generations[i] = v.generation;
    counts[i] = v.count;
  });
  return fn(salt, tag, tenants, keys, generations, counts);
}
