/** What the index's operations share: the connection, the segments, the tiers, the pins and the clock. */
import type { Connection } from './connection.js';
import type { DurablePins, LoadPins } from './pins.js';
import type { SegmentStore } from './segments.js';
import type { TierTable } from './tiers.js';

export interface IndexContext {
  readonly conn: Connection;
  readonly store: SegmentStore;
  readonly tiers: TierTable;
  readonly pins: DurablePins;
  readonly loadPins: LoadPins;
  readonly now: () => number;
  /** Lookup answers served from cached segments, and those that needed the database. */
  readonly counters: { hits: number; misses: number };
}
