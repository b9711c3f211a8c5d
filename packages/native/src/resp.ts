/**
 * The RESP door's native socket layer (cpp/resp_door.cc): a door thread owns the listening socket and its clients
 * (epoll), lands the value of `SET key value` straight into host-arena slots granted in advance (CRC32C computed as
 * the bytes land), and hands everything else to JavaScript as the client's raw bytes. The RESP command set, the
 * catalog and per-client state stay in JavaScript (core/server/resp).
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
  /** SETs of a new client may land at once (the door needs no AUTH); otherwise only after setFast(conn, true). */
  landBeforeAuth?: boolean;
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
  write(conn: number, parts: Uint8Array[]): number;
  end(conn: number): void;
  destroy(conn: number): void;
  pause(conn: number, paused: boolean): void;
  done(conn: number): void;
  setFast(conn: number, fast: boolean): void;
  passthrough(conn: number): void;
  lastActive(conn: number): number;
  grant(offsets: Float64Array, slotBytes: number): void;
  takePool(): Float64Array;
  stats(): { pooledSlots: number; landedSets: number };
  close(): void;
}

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
    this.#native = new Ctor(arena.native, options, onEvents);
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

  /** Whether the client's `SET key value` may land natively (the client is authenticated). */
  setFast(conn: number, fast: boolean): void {
    this.#native.setFast(conn, fast);
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

  stats(): { pooledSlots: number; landedSets: number } {
    return this.#native.stats();
  }

  /** Stops the door thread and closes every client; slots of values that did not land return to the pool. */
  close(): void {
    this.#native.close();
  }
}
