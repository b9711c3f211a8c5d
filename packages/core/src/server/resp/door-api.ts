/**
 * What connections and command handlers use of their RESP door, as types: the door (door.ts) implements it, and
 * connection.ts and commands.ts depend on this module instead of on the door, so the three import no cycle.
 */
import type { Logger } from 'pino';
import type { ResolvedRespConfig } from './config.js';
import type { TenantKeyspace, ValueEntry } from './keyspace.js';
import type { StagingArea } from './staging.js';
import type { ReplyOut, StagingLane, ValueSink } from './value-stream.js';

/**
 * A value read for a reply. A value up to one window is loaded whole: `bytes` (in staging memory unless empty).
 * A longer one is held (pinned, its pages kept) and sent by stream(). Call `release()` once it is sent.
 */
export interface ReadValue {
  readonly length: number;
  readonly bytes: Uint8Array | undefined;
  /** The value as views of the first tier's pinned slots, in order (sent as they are; no staging copy). */
  readonly parts?: readonly Uint8Array[];
  /** Sends the value as a bulk string window by window; throws when the reply was cut short (close the client). */
  stream?: (out: ReplyOut) => Promise<void>;
  release: () => void;
}

export interface RespDoorStats {
  host: string;
  port: number;
  clients: number;
  connectionsTotal: number;
  rejectedConnections: number;
  commandsTotal: number;
  authFailures: number;
  protocolErrors: number;
  keys: number;
  valueBytes: number;
  stagingUsedBytes: number;
  stagingCapacityBytes: number;
  orphanedPages: number;
  /**
   * Page reads from the first tier's slots (GETs) not counted for its eviction policy: the access batch was full
   * (server/access-batch.ts ACCESS_MAX_PAGES pages per interval).
   */
  unrecordedReads: number;
  /** Which engine owns the sockets (resp.engine as it runs). */
  engine: 'native' | 'node';
  /** Native engine: SETs whose value landed in first-tier slots on its thread, and pool slots lent to it now. */
  landedSets?: number;
  pooledSlots?: number;
  /** Native engine: GETs answered on its thread, GETs forwarded on a slot version or CRC32C mismatch, keys mirrored. */
  nativeGets?: number;
  /** Native engine: EXISTS answered on its thread (every key a mirrored value in place). */
  nativeExists?: number;
  /** Native engine: MGET answered on its thread (every key a mirrored value whose pages all matched). */
  nativeMgets?: number;
  getMismatches?: number;
  hotGets?: number;
  mirroredKeys?: number;
  /** Native engine: GETs answered on its thread whose read was not recorded for eviction (its record was full). */
  unrecordedGets?: number;
}

/** Options of a write: expiry (ms since the epoch), KEEPTTL, NX (only when absent), XX (only when present). */
export interface WriteOptions {
  expiresAt?: number;
  keepTtl?: boolean;
  nx?: boolean;
  xx?: boolean;
}

/** The door as its connections and commands see it (implemented by RespDoor). */
export interface DoorApi {
  readonly config: ResolvedRespConfig;
  /** Bytes of one staging window. */
  readonly windowBytes: number;
  readonly staging: StagingArea;
  readonly log: Logger | undefined;
  readonly version: string;
  readonly requiresAuth: boolean;
  /** When the door started (ms since the epoch). */
  readonly startedAt: number;
  readonly counters: { connectionsTotal: number; rejectedConnections: number; commandsTotal: number; authFailures: number; protocolErrors: number; orphanedPages: number; recoveredKeys: number };
  readonly port: number;
  authenticate(user: string, password: string): string | undefined;
  hasPassword(user: string): boolean;
  keyspace(tenant: string): TenantKeyspace;
  setValue(tenant: string, key: string, value: Uint8Array, options?: WriteOptions): Promise<boolean>;
  beginValue(tenant: string, key: string | undefined, length: number, lane: StagingLane): ValueSink;
  commitValue(tenant: string, key: string, writer: ValueSink, options?: WriteOptions): Promise<boolean>;
  /** commitValue() in the calling turn where nothing needs waiting for; undefined: call commitValue(). */
  commitValueNow(tenant: string, key: string, writer: ValueSink, options?: WriteOptions): boolean | undefined;
  deleteKeys(tenant: string, keys: readonly string[]): Promise<number>;
  flush(tenant: string): Promise<number>;
  entry(tenant: string, key: string): ValueEntry | undefined;
  exists(tenant: string, keys: readonly string[]): number;
  scan(tenant: string, cursor: number, count: number, match: string | undefined): { cursor: number; keys: string[] };
  getValues(tenant: string, keys: readonly string[]): Promise<Array<ReadValue | null>>;
  countCommand(name: string, failed: boolean, seconds: number): void;
  stats(): RespDoorStats;
}
