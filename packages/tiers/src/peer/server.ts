/**
 * The serving side of the peer tier: exposes a host tier's pages to other hosts through the native peer data
 * plane. The host tier's page table answers each request batch (where bytes go, where they are); bytes move
 * socket <-> arena on native threads.
 */
import { HostArena, PeerServer, PeerStatus, TierSyncError, type PeerPlan, type PeerServerOptions, type PeerServerRequest } from '@tiersync/native';
import type { PageKey } from '../driver.js';
import type { HostTier } from '../host/index.js';

/** The native server's options (listen address, secret, deadlines, limits), plus the tier owner's hooks. */
export interface PeerServeOptions extends PeerServerOptions {
  /**
   * Called after a put's pages became visible in the tier (their bytes arrived intact), so the owner of the tier
   * (the daemon's hierarchy) can record them in its block index.
   */
  onCommitted?: (pages: Array<{ key: PageKey; length: number; crc32c: number }>) => void;
  /** Called after a peer deleted pages from the tier. */
  onDeleted?: (keys: PageKey[]) => void;
}

/** Serves `tier` (opened) to peers until `close()`. */
export function servePeer(tier: HostTier, options: PeerServeOptions = {}): PeerServer {
  const arena = tier.arena;
  if (!(arena instanceof HostArena)) throw new TierSyncError('peer: the host tier must be open before it is served', 'ERR_CLOSED', { tier: 'peer' });
  // Offsets reserved by a put's plan, kept until its finish commits or frees them.
  const reserved = new Map<number, Float64Array>();
  const plan = (r: PeerServerRequest): PeerPlan | void => {
    const n = r.keys.length;
    switch (`${r.op}:${r.phase}`) {
      case 'put:plan': {
        const got = tier.reserveRemote(r.keys);
        const statuses = new Uint8Array(n);
        if (!got) return { offsets: new Float64Array(n).fill(-1), statuses: statuses.fill(PeerStatus.full) };
        got.existing.forEach((e, i) => (statuses[i] = e ? PeerStatus.existing : PeerStatus.ok));
        reserved.set(r.id, got.offsets);
        return { offsets: got.offsets, statuses };
      }
      case 'put:finish': {
        const offsets = reserved.get(r.id);
        if (!offsets) return;
        reserved.delete(r.id);
        const landed: Array<{ key: PageKey; length: number; crc32c: number }> = [];
        tier.commitRemote(r.keys, offsets, r.lengths, r.crcs, (i) => {
          const ok = !r.failed && r.outcome?.[i] === PeerStatus.ok;
          if (ok) landed.push({ key: r.keys[i]!, length: r.lengths[i]!, crc32c: r.crcs[i]! });
          return ok;
        });
        if (landed.length && options.onCommitted) options.onCommitted(landed);
        return;
      }
      case 'get:plan': {
        const where = tier.pinRemote(r.keys);
        const offsets = new Float64Array(n).fill(-1);
        const statuses = new Uint8Array(n).fill(PeerStatus.miss);
        const lengths = new Uint32Array(n);
        const crcs = new Uint32Array(n);
        where.forEach((w, i) => {
          if (!w) return;
          offsets[i] = w.offset;
          statuses[i] = PeerStatus.ok;
          lengths[i] = w.length;
          crcs[i] = w.crc32c;
        });
        return { offsets, statuses, lengths, crcs };
      }
      case 'get:finish':
        tier.unpin(r.keys.filter((_, i) => r.planned?.[i] === PeerStatus.ok));
        return;
      case 'has:plan': {
        const have = tier.hasNow(r.keys);
        return { offsets: new Float64Array(n).fill(-1), statuses: Uint8Array.from(have, (h) => (h ? PeerStatus.ok : PeerStatus.miss)) };
      }
      case 'delete:plan': {
        const statuses = new Uint8Array(n).fill(PeerStatus.miss);
        const { deleted, pinned } = tier.deleteNow(r.keys);
        r.keys.forEach((k, i) => {
          if (deleted.includes(k)) statuses[i] = PeerStatus.ok;
          else if (pinned.includes(k)) statuses[i] = PeerStatus.pinned;
        });
        if (deleted.length && options.onDeleted) options.onDeleted(deleted);
        return { offsets: new Float64Array(n).fill(-1), statuses };
      }
      default:
        return;
    }
  };
  const { onCommitted: _committed, onDeleted: _deleted, secret, ...server } = options;
  return new PeerServer(arena, plan, { ...server, ...(secret ? { secret } : {}) });
}
