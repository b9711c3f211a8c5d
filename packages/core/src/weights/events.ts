/** Events and counters of weight publishers and receivers. */

export interface WeightEvents {
  /** A version was cut into chunks and is served. */
  'weights:published': (e: { version: string; bytes: number; chunks: number; newChunks: number }) => void;
  /** A receiver got one batch of chunks (progress of a pull). */
  'chunks:fetched': (e: { version: string; chunksDone: number; chunksTotal: number; bytesFetched: number }) => void;
  /** A chunk arrived damaged (CRC32C or SHA-256 mismatch) and will be fetched again. */
  'chunk:corrupted': (e: { version: string; hash: string; reason: 'crc32c' | 'sha256' }) => void;
  /** A version pushed to this receiver could not be assembled (bad manifest, chunks missing, ...). */
  'push:failed': (e: { version: string | undefined; error: unknown }) => void;
  /** The receiver's readers now see `version`. */
  'weights:switched': (e: { version: string; previous: string | undefined; bytesFetched: number; bytesReused: number }) => void;
}

/** Monotonic counters (since the node was created). */
export interface WeightMetrics {
  versionsPublished: number;
  pulls: number;
  switches: number;
  /** Chunk bytes that crossed the network (or were read from a staging tier). */
  bytesFetched: number;
  chunksFetched: number;
  /** Chunk bytes a pull needed but already held (from any earlier version): nothing moved. */
  bytesReused: number;
  chunksReused: number;
  /** Chunks that arrived damaged and were fetched again. */
  chunksCorrupted: number;
  /** Chunk requests the source could not answer yet (an upstream receiver still pulling): retried. */
  missesRetried: number;
  /** Bytes copied from the chunk store into device slots. */
  bytesPlaced: number;
  /** Bytes a publish found equal to the previous version's chunk at the same place: neither copied nor hashed. */
  bytesUnchanged: number;
  /** Bytes a pull found already in place in the slot it assembled into (left there by an older version): not copied. */
  bytesInPlace: number;
}

export function emptyMetrics(): WeightMetrics {
  return { versionsPublished: 0, pulls: 0, switches: 0, bytesFetched: 0, chunksFetched: 0, bytesReused: 0, chunksReused: 0, chunksCorrupted: 0, missesRetried: 0, bytesPlaced: 0, bytesUnchanged: 0, bytesInPlace: 0 };
}
