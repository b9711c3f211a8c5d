/**
 * `tiersync bench weights`: a generated model of `bytes` (40 random bf16 tensors) published in this process and
 * pulled by 1, 2 and 3 receiver processes (`tiersync weights pull --commands`) arranged as a pipelined chain,
 * each assembling into its (sim) device memory. As root, every receiver runs in its own network namespace and
 * consecutive nodes are joined by a veth pair shaped to `linkGbit` per direction (a host with one NIC); the raw
 * baseline is one TCP connection across the first link. Otherwise everything runs on loopback and the baseline
 * is the native two-thread `tcpBaseline`. Each fan-out time is set beside raw transfers of the same bytes measured
 * right before and after it. Then two training steps that each rewrite 10% of the bytes (whole tensors) are
 * pulled and the bytes that moved are counted: the first fills the receiver's second device slot (90% copied from
 * its chunk store), the second finds 80% already in place in the slot it reuses (the steady state of a training
 * loop: a slot holds the version two steps back).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { HostArena, TierSyncError } from '@tiersync/native';
import { tcpBaseline } from '@tiersync/native/bench';
import { changeTensors, DEFAULT_CHUNK_BYTES, generateTensors, WeightPublisher } from '@tiersync/core/weights';
import { GiB, MiB, formatSize, median, round } from './stats.js';
import { busyBetween, cpuTimes, NetworkLab } from './network-lab.js';

export interface WeightsBenchOptions {
  /** Bytes of weights. Default 2 GiB. */
  bytes?: number;
  /** Receiver counts to measure. Default [1, 2, 3]. */
  receivers?: number[];
  /** Fraction of bytes the delta step rewrites. Default 0.1. */
  changedFraction?: number;
  /** 'auto': network namespaces joined by veth pairs when root and `ip netns` works, else loopback. Default 'auto'. */
  network?: 'auto' | 'netns' | 'loopback';
  /**
   * Rate of every veth link in Gbit/s per direction (netns only), one NIC per emulated host. Default 2: four
   * emulated hosts at 2 Gbit/s keep 2 vCPUs ~75% busy (see cpuBusyFraction); much faster links would measure the
   * CPU rather than the links on such a machine.
   */
  linkGbit?: number;
  log?: (line: string) => void;
}

export interface WeightsBenchReport {
  suite: 'weights';
  bytes: number;
  chunkBytes: number;
  network: string;
  topology: 'chain';
  rawTransferSeconds: number;
  fanout: Array<{ receivers: number; seconds: number; ratioToSingleRawTransfer: number; rawSeconds: number; bytesFetchedPerReceiver: number[]; missesRetriedPerReceiver: number[]; cpuBusyFraction: number }>;
  delta: {
    changedFraction: number;
    bytesMovedFraction: number;
    seconds: number;
    ratioToSingleRawTransfer: number;
    /** The next step (same fraction rewritten), pulled into the slot that holds the version two steps back. */
    next: { seconds: number; ratioToSingleRawTransfer: number; bytesMovedFraction: number; bytesInPlaceFraction: number; rawSeconds: number };
  };
}

const BIN = fileURLToPath(new URL('../../bin/tiersync.js', import.meta.url));

interface Line {
  event: string;
  [k: string]: unknown;
}

/** One receiver process and its JSON lines. */
class ReceiverProcess {
  readonly child: ChildProcess;
  readonly #lines: Line[] = [];
  readonly #waiters: Array<() => void> = [];
  #exited = false;

  /** `secret` reaches the receiver through TIERSYNC_SECRET: never on a command line, where ps shows it. */
  constructor(args: string[], prefix: string[], secret?: string) {
    const [cmd, ...rest] = [...prefix, process.execPath, BIN, 'weights', 'pull', ...args];
    const env = secret ? { ...process.env, TIERSYNC_SECRET: secret } : process.env;
    this.child = spawn(cmd!, rest, { stdio: ['pipe', 'pipe', 'inherit'], env });
    createInterface({ input: this.child.stdout! }).on('line', (l) => {
      try {
        this.#lines.push(JSON.parse(l) as Line);
      } catch {
        return;
      }
      for (const w of this.#waiters.splice(0)) w();
    });
    this.child.on('exit', () => {
      this.#exited = true;
      for (const w of this.#waiters.splice(0)) w();
    });
  }

  /** The next line of `event` (or an 'error' line, thrown), within `ms`. */
  async next(event: string, ms: number): Promise<Line> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.#lines.findIndex((l) => l.event === event || l.event === 'error');
      if (i >= 0) {
        const [l] = this.#lines.splice(i, 1);
        if (l!.event === 'error') throw new TierSyncError(`receiver: ${String(l!.message)}`, 'ERR_IO');
        return l!;
      }
      if (this.#exited) throw new TierSyncError(`receiver exited (code ${this.child.exitCode}) before '${event}'`, 'ERR_IO');
      const left = deadline - Date.now();
      if (left <= 0) throw new TierSyncError(`receiver sent no '${event}' within ${ms} ms`, 'ERR_TIMEOUT');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }

  async stop(): Promise<void> {
    if (this.#exited) return;
    this.send('exit');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await new Promise<void>((resolve) => (this.#exited ? resolve() : this.child.once('exit', () => resolve())));
    clearTimeout(t);
  }
}

export async function runWeightsBench(o: WeightsBenchOptions = {}): Promise<WeightsBenchReport> {
  const log = o.log ?? (() => {});
  const bytes = o.bytes ?? 2 * GiB;
  const counts = o.receivers ?? [1, 2, 3];
  const changedFraction = o.changedFraction ?? 0.1;
  const chunkBytes = DEFAULT_CHUNK_BYTES;
  const timeoutMs = 600_000;
  const lab = await NetworkLab.create(o.network ?? 'auto', Math.max(...counts), o.linkGbit, log);
  const set = generateTensors(bytes, 40);
  const total = set.tensors.reduce((s, t) => s + t.length, 0);
  const pieces = set.tensors.reduce((s, t) => s + Math.ceil(t.length / chunkBytes), 0);
  // Room for three versions at once while the third is cut (the oldest is dropped after): two delta steps.
  const pub = new WeightPublisher({ capacity: (Math.ceil(pieces * (1 + 2 * changedFraction) * 1.05) + 24) * chunkBytes, chunkBytes });
  // A receiver holds one version (plus the delta step's new chunks in the first run): one slot per chunk.
  const storeBytes = (withDelta: boolean) => (Math.ceil(pieces * (withDelta ? 1 + changedFraction : 1)) + 24) * chunkBytes;
  const rawDst = HostArena.create({ capacity: 256 * MiB, prefault: true });
  const children: ReceiverProcess[] = [];
  try {
    log(`weights bench: ${formatSize(total)} in ${set.tensors.length} tensors, ${formatSize(chunkBytes)} chunks, network: ${lab.description}`);
    await pub.publishWeights('v1', set.tensors);
    const port = pub.serve({ host: lab.publisherAddress, ...(lab.secret ? { secret: lab.secret } : {}) });
    // The raw transfer: one TCP connection between two native threads, same bytes (from the publisher's store).
    const raw = async () => (lab.rawTransfer ? lab.rawTransfer(total, pub.store.arena, rawDst) : tcpBaseline(pub.store.arena, rawDst, total, chunkBytes));
    await raw(); // warm-up
    const rawTimes: number[] = [];
    const fanout: WeightsBenchReport['fanout'] = [];
    let delta: WeightsBenchReport['delta'] | undefined;
    // What the fan-outs pull: v1 first; after the delta steps the newest (the publisher keeps two versions).
    let fanoutVersion = 'v1';
    for (const n of counts) {
      // A chain: publisher -> r1 -> r2 -> r3, each forwarding chunks as they arrive.
      let upstream = `${lab.publisherAddress}:${port}`;
      for (let i = 0; i < n; i++) {
        // Two streams: a link is full with them, and each hop of the chain lags its upstream by the requests in flight.
        // The receivers that pull the delta steps hold two versions: both device slots are allocated up front,
        // as a receiver in a training loop would (allocating 2 GiB of device memory is no part of a delta step).
        const args = ['--from', upstream, '--streams', '2', '--commands', '--json', '--serve-host', lab.serveHost(), '--serve-port', '0', '--prefault', '--reserve', String(total + 40 * 4096), '--reserve-slots', delta ? '1' : '2', '--wait-ms', String(timeoutMs), '--capacity', String(storeBytes(!delta))];
        const r = new ReceiverProcess(args, lab.prefixFor(i), lab.secret);
        children.push(r);
        const serving = await r.next('serving', 30_000);
        await r.next('ready', 30_000);
        upstream = `${lab.receiverAddress(i)}:${String(serving.port)}`;
      }
      const before = await raw();
      const cpu0 = cpuTimes();
      const t0 = performance.now();
      for (const r of children) r.send(`pull ${fanoutVersion}`);
      const results = await Promise.all(children.map((r) => r.next('switched', timeoutMs)));
      const seconds = (performance.now() - t0) / 1000;
      const cpuBusy = busyBetween(cpu0, cpuTimes());
      const after = await raw();
      rawTimes.push(before, after);
      const rawSeconds = (before + after) / 2;
      fanout.push({ receivers: n, seconds: round(seconds), ratioToSingleRawTransfer: round(seconds / rawSeconds), rawSeconds: round(rawSeconds), bytesFetchedPerReceiver: results.map((x) => Number(x.bytesFetched)), missesRetriedPerReceiver: results.map((x) => Number(x.missesRetried)), cpuBusyFraction: round(cpuBusy) });
      log(`  ${n} receiver(s): ${round(seconds)} s, raw TCP ${round(rawSeconds)} s, ratio ${round(seconds / rawSeconds)}; misses retried ${results.map((x) => String(x.missesRetried)).join('/')}; machine CPU busy ${Math.round(cpuBusy * 100)}%`);
      if (!delta) {
        // The training step: rewrite whole tensors worth `changedFraction` of the bytes, publish, pull.
        const changed = changeTensors(set, changedFraction);
        await pub.publishWeights('v2', set.tensors);
        const rawBefore = await raw();
        const d0 = performance.now();
        for (const r of children) r.send('pull v2');
        const dres = await Promise.all(children.map((r) => r.next('switched', timeoutMs)));
        const dSeconds = (performance.now() - d0) / 1000;
        const moved = Math.max(...dres.map((x) => Number(x.bytesFetched)));
        // The next step: the slot it is assembled into holds v1, so only what changed since v1 is copied there.
        changeTensors(set, changedFraction, 1);
        await pub.publishWeights('v3', set.tensors);
        const rawNext = await raw();
        const n0 = performance.now();
        for (const r of children) r.send('pull v3');
        const nres = await Promise.all(children.map((r) => r.next('switched', timeoutMs)));
        const nSeconds = (performance.now() - n0) / 1000;
        const nMoved = Math.max(...nres.map((x) => Number(x.bytesFetched)));
        const inPlace = Math.min(...nres.map((x) => Number(x.bytesInPlace)));
        delta = {
          changedFraction: round(changed / total, 4),
          bytesMovedFraction: round(moved / total, 4),
          seconds: round(dSeconds),
          ratioToSingleRawTransfer: round(dSeconds / rawBefore),
          next: { seconds: round(nSeconds), ratioToSingleRawTransfer: round(nSeconds / rawNext), bytesMovedFraction: round(nMoved / total, 4), bytesInPlaceFraction: round(inPlace / total, 4), rawSeconds: round(rawNext) },
        };
        log(`  delta step (${round(changed / total, 3)} of bytes rewritten): moved ${round(moved / total, 4)} of the bytes in ${round(dSeconds)} s, ratio ${delta.ratioToSingleRawTransfer} (raw ${round(rawBefore)} s)`);
        log(`  next delta step: moved ${delta.next.bytesMovedFraction}, ${delta.next.bytesInPlaceFraction} already in place, ${delta.next.seconds} s, ratio ${delta.next.ratioToSingleRawTransfer} (raw ${delta.next.rawSeconds} s)`);
        fanoutVersion = 'v3';
        // The source copy is no longer needed: free it before the larger fan-outs.
        set.arena.close();
      }
      for (const r of children.splice(0)) await r.stop();
    }
    return {
      suite: 'weights',
      bytes: total,
      chunkBytes,
      network: lab.description,
      topology: 'chain',
      rawTransferSeconds: round(median(rawTimes)),
      fanout,
      delta: delta!,
    };
  } finally {
    for (const r of children) await r.stop().catch(() => undefined);
    await pub.close();
    rawDst.close();
    if (!set.arena.closed) set.arena.close();
    await lab.close();
  }
}
