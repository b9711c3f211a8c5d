import { parseArgs } from 'node:util';
import { TierSyncError } from '@tiersync/native';
import { CliUsageError, type CliCommand } from '@tiersync/core';
import { parseBytes } from '@tiersync/core/sim';
import { agentBenchCommand } from './agent.js';
import { runIndexBench } from './index-bench.js';
import { runRestoreBench } from './restore.js';
import { runSimBench } from './sim.js';
import { runTiersBench } from './tiers.js';
import { runTransferBench, type TransferBenchReport } from './transfer.js';
import { runWeightsBench } from './weights.js';
import { formatSize } from './stats.js';

const usage = `Usage: tiersync bench <suite> [options]

Suites:
  transfer   the native engine against memcpy and a plain O_DIRECT file loop, measured in the same run
  tiers      fs, peer and object drivers against O_DIRECT loops, raw TCP, Redis and the bare S3 client
  index      block index with 1,000,000 pages: 2,048-page prefix lookup, 2,048-page store, durable commits, RSS
  sim        simulator replay speed (LRU, S3-FIFO) on the bundled Mooncake conversation trace
  prefix     eviction lab: prefix-page hit ratio of each base policy with and without prefix-aware: on the bundled
             Mooncake and Azure traces at 1%, 4% and 16% of their distinct pages (--requests N: the first N requests
             of each trace; --wrapper prefix-hold: the holding variant)
  session    eviction lab: hit ratio and modeled TTFT of LRU and S3-FIFO with and without session-aware: hints,
             on a multi-round QA workload with think times and the Mooncake conversation trace's timestamps
  weights    2 GiB of model weights to 1, 2 and 3 receiver processes (pipelined chain) and a 10% delta step, against
             one raw TCP transfer of the same bytes in the same run
  restore    store then restore a 32,768-token Llama-3-8B context (4 GiB) host->device and fs->device through
             TierSync, against memcpy and a plain O_DIRECT read loop of the same bytes
  client     @tiersync/core/client against a daemon in a child process: shm store/load vs memcpy, peer store/load
             vs raw TCP, control round trip (--bytes per path, default 256MiB; --repetitions)
  agent      llama.cpp agent server (repository checkout): TTFT of a 2,000-token conversation recomputed vs restored
             from host RAM / a cold fs tier (its own options: --tokens --model --repetitions --threads --dir)
  resp       redis-benchmark -d 262144 -c 50 -t get,set against the RESP door and a redis-server in the same run
             (its own options: --requests N --bytes N --clients N --repetitions N --keyspace N --engine E --durable --cpu)
  reliability  SIGKILL crash cycles, injected faults, fuzzing: durable pages lost, corrupt pages served, hangs
             (its own options: --scenarios LIST --cycles N --cases N --operations N; docs/RELIABILITY.md)

Options:
  --json             print one JSON object as the last line of stdout (progress goes to stderr)
  --bytes N          bytes moved per path/driver and page size, e.g. 4GiB (default 4GiB transfer, 1GiB tiers);
                     restore: bytes of KV context (default 4GiB = 32,768 tokens); weights: model bytes (default 2GiB)
  --tokens-per-page N  restore only: tokens per page of the llama-3-8b layout (default 16 = 2 MiB pages)
  --drivers LIST     tiers only: comma-separated subset of fs,peer,object
  --pages N          index only: pages in the index before measuring (default 1000000)
  --dir DIR          folder for the file benchmark, on a filesystem with O_DIRECT (default: OS temp folder)
  --threads N        engine and memcpy threads (default: one per core)
  --network MODE     weights, tiers (peer): auto (network namespaces + veth when root, else loopback), netns,
                     loopback (tiers: no figure across a link)
  --link-gbit N      weights, tiers: rate of each veth link in namespaces, Gbit/s per direction (default 2 for
                     weights, 10 for the peer tier)
  --repetitions N    engine/baseline pairs per figure (default 3; restore 7 from host, 5 from fs)`;

function table(r: TransferBenchReport): string {
  const rows = [`transfer benchmark: ${formatSize(r.bytesPerPath)} per path, ${r.threads} threads, io ${r.io}`, `machine: ${r.machine}`, ''];
  rows.push('path            page      GiB/s   baseline  ratio');
  for (const p of r.paths) {
    rows.push(`${p.path.padEnd(15)} ${formatSize(p.pageBytes).padEnd(9)} ${String(p.GiBps).padStart(6)}   ${String(p.baselineGiBps).padStart(6)}   ${p.ratio}`);
  }
  for (const f of r.file.byPageSize) {
    rows.push(`${'file write'.padEnd(15)} ${formatSize(f.pageBytes).padEnd(9)} ${String(f.write.GiBps).padStart(6)}   ${String(f.write.baselineGiBps).padStart(6)}   ${f.write.ratio}`);
    rows.push(`${'file read'.padEnd(15)} ${formatSize(f.pageBytes).padEnd(9)} ${String(f.read.GiBps).padStart(6)}   ${String(f.read.baselineGiBps).padStart(6)}   ${f.read.ratio}`);
  }
  rows.push('', `event loop during a ${formatSize(r.eventLoop.stormBytes)} storm: p99 ${r.eventLoop.p99Ms} ms, max ${r.eventLoop.maxMs} ms (idle p99 ${r.eventLoop.idleP99Ms} ms)`);
  rows.push(`event loop during the same storm as write-back (${r.eventLoop.background.backgroundThreads} worker(s)): p99 ${r.eventLoop.background.p99Ms} ms, max ${r.eventLoop.background.maxMs} ms`);
  return rows.join('\n');
}

/** `tiersync bench <suite>`: the benchmark suites (development only: added to the CLI by this package's bin). */
export const benchCommand: CliCommand = {
  summary: 'run a benchmark suite (transfer, tiers, index, restore, sim, client, resp, weights, agent, reliability)',
  usage,
  async run(args) {
    // The agent suite has options of its own (checked in bench/agent.ts) and runs in a child process.
    if (args[0] === 'agent') return agentBenchCommand(args.slice(1));
    // Its own options (and fast-check, a development dependency): loaded only when asked for.
    if (args[0] === 'resp') return (await import('./resp.js')).respBenchCommand(args.slice(1));
    if (args[0] === 'reliability') return (await import('./reliability.js')).reliabilityCommand(args.slice(1));
    if (args[0] === 'prefix' || args[0] === 'session') return (await import('./eviction-lab.js')).evictionLabCommand(args);
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: {
        json: { type: 'boolean' },
        bytes: { type: 'string' },
        dir: { type: 'string' },
        threads: { type: 'string' },
        repetitions: { type: 'string' },
        drivers: { type: 'string' },
        pages: { type: 'string' },
        'tokens-per-page': { type: 'string' },
        network: { type: 'string' },
        'link-gbit': { type: 'string' },
      },
    });
    const suite = positionals[0];
    const log = (line: string) => (values.json ? console.error(line) : console.log(line));
    if (suite === 'index') {
      const report = await runIndexBench({
        ...(values.pages ? { pages: parseBytes(values.pages, '--pages') } : {}),
        ...(values.dir ? { dir: values.dir } : {}),
        log,
      });
      console.log(values.json ? JSON.stringify(report) : `lookup p50 ${report.lookup.p50Us} us, p99 ${report.lookup.p99Us} us; uncached p50 ${report.lookup.uncachedP50Us} us, p99 ${report.lookup.uncachedP99Us} us; store p50 ${report.store.p50Ms} ms; ${report.durableStoresPerSec} durable one-page stores/s (${report.durableCommitsPerSec} commits/s); RSS ${report.rssMiB} MiB`);
      return 0;
    }
    if (suite === 'restore') {
      const report = await runRestoreBench({
        ...(values.bytes ? { bytes: parseBytes(values.bytes, '--bytes') } : {}),
        ...(values.dir ? { dir: values.dir } : {}),
        ...(values.threads ? { threads: parseBytes(values.threads, '--threads') } : {}),
        ...(values.repetitions ? { repetitions: parseBytes(values.repetitions, '--repetitions') } : {}),
        ...(values['tokens-per-page'] ? { tokensPerPage: parseBytes(values['tokens-per-page'], '--tokens-per-page') } : {}),
        log,
      });
      const line = (name: string, f: typeof report.fromHost) => `${name.padEnd(10)} ${f.medianMs} ms (${f.GiBps} GiB/s)   baseline ${f.baselineMs} ms (${f.baselineGiBps} GiB/s)   ratio ${f.ratio} (per pair ${f.pairRatio})`;
      console.log(
        values.json
          ? JSON.stringify(report)
          : [`restore of ${formatSize(report.bytes)} (${report.tokens} tokens, ${formatSize(report.pageBytes)} pages), verified: ${report.verified}`, line('from host', report.fromHost), line('from fs', report.fromFs)].join('\n'),
      );
      return report.verified ? 0 : 1;
    }
    const network = values.network ?? 'auto';
    if (network !== 'auto' && network !== 'netns' && network !== 'loopback') throw new TierSyncError(`--network must be auto, netns or loopback, got '${network}'`, 'ERR_INVALID_ARGUMENT');
    const linkGbit = values['link-gbit'] ? { linkGbit: Number(values['link-gbit']) } : {};
    if (suite === 'weights') {
      const report = await runWeightsBench({
        ...(values.bytes ? { bytes: parseBytes(values.bytes, '--bytes') } : {}),
        ...linkGbit,
        network,
        log,
      });
      console.log(
        values.json
          ? JSON.stringify(report)
          : [...report.fanout.map((f) => `${f.receivers} receiver(s): ${f.seconds} s, raw TCP ${f.rawSeconds} s, ratio ${f.ratioToSingleRawTransfer}`), `delta: ${report.delta.changedFraction} changed, ${report.delta.bytesMovedFraction} moved`].join('\n'),
      );
      return 0;
    }
    if (suite === 'client') {
      const { runClientBench } = await import('./client.js');
      const report = await runClientBench({
        ...(values.bytes ? { bytes: parseBytes(values.bytes, '--bytes') } : {}),
        ...(values.repetitions ? { repetitions: parseBytes(values.repetitions, '--repetitions') } : {}),
        log,
      });
      const line = (name: string, f: typeof report.shmStore, base: string) => `${name.padEnd(11)} ${f.medianMs} ms (${f.GiBps} GiB/s)   ${base} ${f.baselineMs} ms (${f.baselineGiBps} GiB/s)   ratio ${f.ratio}`;
      console.log(
        values.json
          ? JSON.stringify(report)
          : [
              `client benchmark: ${formatSize(report.bytes)} per path in ${formatSize(report.pageBytes)} pages, median of ${report.repetitions}`,
              line('shm store', report.shmStore, 'memcpy'),
              line('shm load', report.shmLoad, 'memcpy'),
              line('peer store', report.peerStore, 'raw TCP'),
              line('peer load', report.peerLoad, 'raw TCP'),
              `control round trip ${report.control.roundTripUs} us; 1-page load ${report.control.onePageLoadUs} us; ${report.control.requestsPerShmStore} requests per store, ${report.control.requestsPerShmLoad} per load`,
              `channel alone (kept-alive HTTP echo): loopback TCP ${report.control.echoTcpUs} us, Unix socket ${report.control.echoUnixUs} us`,
              'skipped' in report.python ? `python: skipped (${report.python.skipped})` : `python store ${report.python.storeRatio}, load ${report.python.loadRatio} of numpy.copyto`,
            ].join('\n'),
      );
      return 0;
    }
    if (suite === 'sim') {
      const report = await runSimBench({ ...(values.repetitions ? { repetitions: parseBytes(values.repetitions, '--repetitions') } : {}), log });
      console.log(values.json ? JSON.stringify(report) : report.results.map((r) => `${r.policy.padEnd(8)} ${(r.accessesPerSec / 1e6).toFixed(2)} M accesses/s (replay() ${(r.replayAccessesPerSec / 1e6).toFixed(2)} M/s)`).join('\n'));
      return 0;
    }
    if (suite === 'tiers') {
      const drivers = values.drivers?.split(',').map((d) => d.trim());
      for (const d of drivers ?? []) if (!['fs', 'peer', 'object'].includes(d)) throw new TierSyncError(`--drivers: unknown driver '${d}'`, 'ERR_INVALID_ARGUMENT');
      const report = await runTiersBench({
        ...(values.bytes ? { bytes: parseBytes(values.bytes, '--bytes') } : {}),
        ...(values.dir ? { dir: values.dir } : {}),
        ...(values.repetitions ? { repetitions: parseBytes(values.repetitions, '--repetitions') } : {}),
        ...(drivers ? { drivers: drivers as Array<'fs' | 'peer' | 'object'> } : {}),
        ...linkGbit,
        network,
        log,
      });
      console.log(values.json ? JSON.stringify(report) : '');
      return 0;
    }
    if (suite !== 'transfer') throw new CliUsageError(suite ? `unknown suite '${suite}'` : 'no suite named');
    const report = await runTransferBench({
      ...(values.bytes ? { bytesPerPath: parseBytes(values.bytes, '--bytes') } : {}),
      ...(values.dir ? { dir: values.dir } : {}),
      ...(values.threads ? { threads: parseBytes(values.threads, '--threads') } : {}),
      ...(values.repetitions ? { repetitions: parseBytes(values.repetitions, '--repetitions') } : {}),
      log,
    });
    console.log(values.json ? JSON.stringify(report) : `\n${table(report)}`);
    return 0;
  },
};
