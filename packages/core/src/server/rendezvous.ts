/**
 * Rendezvous (highest-random-weight) hashing, Thaler & Ravishankar, "Using name-based mappings to increase hit
 * rates", IEEE/ACM Transactions on Networking 6(1), 1998: each (page, node) pair gets a pseudo-random weight and
 * the page belongs to the node of highest weight. When a node joins or leaves, only the pages it wins or held move.
 *
 * The weight is the first 8 bytes of SHA-256(node id, 0, page key) read as an unsigned big-endian integer:
 * uniform, and the same on every host whatever its byte order or runtime.
 */
import { createHash } from 'node:crypto';

export function rendezvousWeight(node: string, key: string): bigint {
  return createHash('sha256').update(node).update('\0').update(key).digest().readBigUInt64BE(0);
}

/** The owner of `key` among `nodes` (ids); undefined when there are none. Ties go to the smaller id. */
export function rendezvousOwner(key: string, nodes: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestWeight = -1n;
  for (const n of nodes) {
    const w = rendezvousWeight(n, key);
    if (w > bestWeight || (w === bestWeight && best !== undefined && n < best)) {
      best = n;
      bestWeight = w;
    }
  }
  return best;
}

/** Groups `keys` by owner: node id -> indices into `keys`. */
export function rendezvousPlace(keys: readonly string[], nodes: readonly string[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  keys.forEach((k, i) => {
    const owner = rendezvousOwner(k, nodes);
    if (owner === undefined) return;
    let list = out.get(owner);
    if (!list) out.set(owner, (list = []));
    list.push(i);
  });
  return out;
}
