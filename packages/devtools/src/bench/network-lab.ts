/**
 * Emulated hosts for the network benchmarks: network namespaces joined by veth pairs shaped to a link rate (tc tbf),
 * a raw TCP baseline across a link, and the machine's busy share (near 1, the emulated hosts compete for the CPU and
 * the link model no longer holds). Used by `bench weights` (a chain of receivers) and `bench tiers` (a peer host).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { TierSyncError, type HostArena } from '@tiersync/native';
import { tcpBaseline } from '@tiersync/native/bench';
import { MiB } from './stats.js';

/** Bytes per send/recv call of the raw baseline across a link. */
const RAW_CHUNK = 4 * MiB;

/** Where the processes run and how they reach each other. */
export class NetworkLab {
  readonly description: string;
  readonly publisherAddress: string;
  readonly secret: string | undefined;
  /** netns: seconds of a raw transfer across the first link (this process -> receiver 1's namespace); loopback: undefined. */
  readonly rawTransfer: ((bytes: number, from: HostArena, into: HostArena) => Promise<number>) | undefined;
  readonly #namespaces: string[];
  readonly #subnet: number;

  private constructor(description: string, publisherAddress: string, secret: string | undefined, namespaces: string[], subnet: number, raw: NetworkLab['rawTransfer']) {
    this.description = description;
    this.publisherAddress = publisherAddress;
    this.secret = secret;
    this.#namespaces = namespaces;
    this.#subnet = subnet;
    this.rawTransfer = raw;
  }

  /**
   * netns: one network namespace per receiver, joined in a chain by veth pairs (root -> ns1 -> ns2 -> ...), each
   * veth end shaped to `linkGbit` with a token bucket (tc tbf), i.e. every host has a full-duplex NIC of that rate.
   * Needs root and iproute2; 'auto' falls back to loopback when either is missing.
   */
  static async create(mode: 'auto' | 'netns' | 'loopback', receivers: number, linkGbit: number | undefined, log: (l: string) => void): Promise<NetworkLab> {
    const loopback = () => new NetworkLab('loopback (separate processes on one host, no link model; raw baseline: native tcpBaseline)', '127.0.0.1', undefined, [], 0, undefined);
    if (mode === 'loopback') return loopback();
    const gbit = linkGbit ?? 2;
    if (!(Number.isFinite(gbit) && gbit > 0 && gbit <= 400)) throw new TierSyncError(`link rate must be a number of Gbit/s in (0, 400], got ${String(linkGbit)}`, 'ERR_INVALID_ARGUMENT');
    const subnet = 100 + (process.pid % 100);
    const tag = `tw${process.pid}`;
    const namespaces = Array.from({ length: receivers }, (_, i) => `${tag}n${i + 1}`);
    const sh = (args: string[]) => execFileSync(args[0]!, args.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      if (process.getuid?.() !== 0) throw new Error('not root');
      for (const ns of namespaces) {
        sh(['ip', 'netns', 'add', ns]);
        sh(['ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
      }
      for (let i = 1; i <= receivers; i++) {
        const a = `${tag}a${i}`;
        const b = `${tag}b${i}`;
        const left = i === 1 ? [] : ['ip', 'netns', 'exec', namespaces[i - 2]!];
        const right = ['ip', 'netns', 'exec', namespaces[i - 1]!];
        sh([...left, 'ip', 'link', 'add', a, 'type', 'veth', 'peer', 'name', b]);
        sh([...left, 'ip', 'link', 'set', b, 'netns', namespaces[i - 1]!]);
        sh([...left, 'ip', 'addr', 'add', `10.${subnet}.${i}.1/24`, 'dev', a]);
        sh([...left, 'ip', 'link', 'set', a, 'up']);
        sh([...right, 'ip', 'addr', 'add', `10.${subnet}.${i}.2/24`, 'dev', b]);
        sh([...right, 'ip', 'link', 'set', b, 'up']);
        for (const [prefix, dev] of [[left, a], [right, b]] as const) {
          sh([...prefix, 'tc', 'qdisc', 'add', 'dev', dev, 'root', 'tbf', 'rate', `${gbit}gbit`, 'burst', '2mb', 'latency', '20ms']);
        }
      }
    } catch (e) {
      for (const ns of namespaces) spawnSync('ip', ['netns', 'del', ns]);
      if (mode === 'netns') throw new TierSyncError(`cannot set up network namespaces: ${(e as Error).message}`, 'ERR_UNAVAILABLE', { cause: e });
      log(`network namespaces unavailable (${(e as Error).message.split('\n')[0]}); using loopback`);
      return loopback();
    }
    // Namespaces outlive the process: remove them however it ends.
    const removeAll = () => {
      for (const ns of namespaces) spawnSync('ip', ['netns', 'del', ns]);
    };
    process.once('exit', removeAll);
    for (const sig of ['SIGINT', 'SIGTERM'] as const) {
      process.once(sig, () => {
        removeAll();
        process.exit(130);
      });
    }
    const secret = randomBytes(16).toString('hex');
    const sinkAddress = `10.${subnet}.1.2`;
    // Native threads at both ends, the receiving one inside the first namespace: the same baseline as on loopback.
    const raw = async (bytes: number, from: HostArena, into: HostArena) => tcpBaseline(from, into, bytes, RAW_CHUNK, { netns: namespaces[0]!, address: sinkAddress });
    return new NetworkLab(
      `network namespaces: a chain of veth pairs, every link shaped to ${gbit} Gbit/s per direction (tc tbf); raw baseline: one TCP connection across the first link`,
      `10.${subnet}.1.1`,
      secret,
      namespaces,
      subnet,
      raw,
    );
  }

  /** Address receiver `i` (0-based) serves downstream on: its end of the next link. */
  receiverAddress(i: number): string {
    return this.#namespaces.length ? `10.${this.#subnet}.${i + 2}.1` : '127.0.0.1';
  }

  /** Receiver `i`'s (0-based) address on the link it is reached by from upstream. */
  hostAddress(i: number): string {
    return this.#namespaces.length ? `10.${this.#subnet}.${i + 1}.2` : '127.0.0.1';
  }

  /** Where receiver `i` listens (all its addresses; peers authenticate with the secret). */
  serveHost(): string {
    return this.#namespaces.length ? '0.0.0.0' : '127.0.0.1';
  }

  prefixFor(i: number): string[] {
    return this.#namespaces.length ? ['ip', 'netns', 'exec', this.#namespaces[i]!] : [];
  }

  async close(): Promise<void> {
    for (const ns of this.#namespaces) spawnSync('ip', ['netns', 'del', ns]);
  }
}

/** Machine-wide CPU jiffies (all processes, ours and others'): [busy, total]. */
export function cpuTimes(): [number, number] {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return [total - (f[3] ?? 0) - (f[4] ?? 0), total];
}

/**
 * Share of the machine's CPU time that was busy between two samples. Near 1, the emulated hosts compete for CPU
 * and the link model no longer holds (times then measure the CPU, not the links).
 */
export function busyBetween(a: [number, number], b: [number, number]): number {
  const total = b[1] - a[1];
  return total > 0 ? (b[0] - a[0]) / total : 0;
}
