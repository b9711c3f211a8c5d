/**
 * `tiersync bench reliability`: runs the reliability scenarios (packages/core/src/reliability) and reports, per
 * scenario, runs, faults injected, acknowledged-durable pages lost, corrupt pages served and hangs (all three must
 * be 0). The last stdout line with --json is
 * `{"suite":"reliability","scenarios":[{"name":S,"runs":N,"faults":N,"lostDurablePages":N,"corruptPagesServed":N,"hangs":N,...}]}`.
 */
import { parseArgs } from 'node:util';
import { TierSyncError, TransferEngine } from '@tiersync/native';
import { runCrashLoop } from '../reliability/crash-loop.js';
import { runIndexLoss } from '../reliability/index-loss.js';
import { runBitRot, runDiskFull, runIoErrors, runStalledTier } from '../reliability/disk-faults.js';
import { passed, type ReliabilityReport, type ScenarioResult } from '../reliability/report.js';
import { runPeerFaults } from '../reliability/network-faults.js';
import { runS3Faults } from '../reliability/object-faults.js';
import { runRedisRestarts } from '../reliability/redis-faults.js';
import { runSecurity } from '../reliability/security.js';
import { runSoak } from '../reliability/soak.js';

export const reliabilityUsage = `Usage: tiersync bench reliability [--scenarios LIST] [--cycles N] [--cases N] [--operations N] [--sessions N] [--seconds N] [--json]

Scenarios (default: all):
  crash              SIGKILL a writer at random moments, restart, check acknowledged pages (--cycles, default 200)
  index-loss         SIGKILL a writer, delete the index file, reopen on the tiers alone; then ':memory:' twice (--cycles, default 20)
  io-errors          EIO on fs writes, reads and deletes through the fault tier (--operations, default 400)
  bit-rot            bytes flipped in the fs tier's slab files behind its back
  disk-full          the fs tier on a 4 MiB tmpfs (root)
  stall              a tier whose reads hang
  peer               link cut (ip link down) / other host SIGKILLed mid-transfer, netns + veth (root; --operations trials, default 40)
  s3                 object tier behind a proxy answering 503, resetting and stalling (s3rver)
  redis              redis-server SIGKILLed and restarted under two daemons (--cycles, default 20)
  security           wrong peer secrets, hostile page keys, cross-tenant access, wrong tokens, RESP without AUTH
  fuzz               fast-check of configs, layouts, tier URLs, peer frames, RESP, native descriptors (--cases, default 100000)
  soak               a daemon under --sessions (default 1000) concurrent client sessions for --seconds (default 600)`;

const ALL = ['crash', 'index-loss', 'io-errors', 'bit-rot', 'disk-full', 'stall', 'peer', 's3', 'redis', 'security', 'fuzz', 'soak'] as const;
type Name = (typeof ALL)[number];

export interface ReliabilityBenchOptions {
  scenarios?: readonly Name[];
  cycles?: number;
  cases?: number;
  operations?: number;
  sessions?: number;
  seconds?: number;
  log?: (line: string) => void;
}

export async function runReliabilityBench(o: ReliabilityBenchOptions = {}): Promise<ReliabilityReport> {
  const want = new Set(o.scenarios ?? ALL);
  const log = o.log ?? (() => undefined);
  const out: ScenarioResult[] = [];
  const step = async (name: Name, run: () => Promise<ScenarioResult | ScenarioResult[]>) => {
    if (!want.has(name)) return;
    const start = Date.now();
    log(`reliability: ${name} ...`);
    const r = await run();
    for (const s of Array.isArray(r) ? r : [r]) {
      s.details.seconds = Math.round((Date.now() - start) / 100) / 10;
      out.push(s);
      log(`reliability: ${s.name}: runs ${s.runs}, faults ${s.faults}, lost ${s.lostDurablePages}, corrupt ${s.corruptPagesServed}, hangs ${s.hangs}, failures ${s.failures}${s.notes.length ? `\n  ${s.notes.slice(0, 5).join('\n  ')}` : ''}`);
    }
  };
  await step('crash', () => runCrashLoop({ cycles: o.cycles ?? 200, log }));
  await step('index-loss', () => runIndexLoss({ cycles: o.cycles ? Math.min(o.cycles, 20) : 20, log }));
  await step('io-errors', () => runIoErrors({ ...(o.operations ? { operations: o.operations } : {}), log }));
  await step('bit-rot', () => runBitRot({ ...(o.operations ? { operations: o.operations } : {}), log }));
  await step('disk-full', () => runDiskFull({ ...(o.operations ? { operations: o.operations } : {}), log }));
  await step('stall', () => runStalledTier({ log }));
  await step('peer', () => runPeerFaults({ ...(o.operations ? { trials: o.operations } : {}), log }));
  await step('s3', () => runS3Faults({ ...(o.operations ? { operations: o.operations } : {}), log }));
  await step('redis', () => runRedisRestarts({ cycles: o.cycles ? Math.min(o.cycles, 20) : 20, log }));
  await step('security', () => runSecurity());
  await step('fuzz', async () => {
    // fast-check is a development dependency: loaded only here, so the CLI starts without it.
    const f = await import('../reliability/fuzz.js');
    const cases = o.cases ?? 100_000;
    const engine = new TransferEngine({ threads: 2 });
    try {
      return [
        f.fuzzHierarchyConfig({ cases, log }),
        f.fuzzServerConfig({ cases, log }),
        f.fuzzLayout({ cases, log }),
        f.fuzzTierUrls(engine, { cases, log }),
        f.fuzzPeerFrames({ cases, log }),
        f.fuzzResp({ cases, log }),
        await f.fuzzDescriptors(engine, { cases, log }),
      ];
    } finally {
      await engine.close();
    }
  });
  await step('soak', () => runSoak({ ...(o.sessions ? { sessions: o.sessions } : {}), ...(o.seconds ? { seconds: o.seconds } : {}), log }));
  return { suite: 'reliability', scenarios: out };
}

const count = (text: string | undefined, name: string): number | undefined => {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text) || Number(text) < 1) throw new TierSyncError(`${name} must be a positive integer, got '${text}'`, 'ERR_INVALID_ARGUMENT');
  return Number(text);
};

/** The `bench reliability` command line; returns the exit code (1 when a scenario broke its contract). */
export async function reliabilityCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { json: { type: 'boolean' }, scenarios: { type: 'string' }, cycles: { type: 'string' }, cases: { type: 'string' }, operations: { type: 'string' }, sessions: { type: 'string' }, seconds: { type: 'string' } },
  });
  const scenarios = values.scenarios?.split(',').map((s) => s.trim());
  for (const s of scenarios ?? []) if (!(ALL as readonly string[]).includes(s)) throw new TierSyncError(`--scenarios: unknown scenario '${s}' (known: ${ALL.join(', ')})`, 'ERR_INVALID_ARGUMENT');
  const log = (line: string) => (values.json ? console.error(line) : console.log(line));
  const cycles = count(values.cycles, '--cycles');
  const cases = count(values.cases, '--cases');
  const operations = count(values.operations, '--operations');
  const sessions = count(values.sessions, '--sessions');
  const seconds = count(values.seconds, '--seconds');
  const report = await runReliabilityBench({
    ...(scenarios ? { scenarios: scenarios as Name[] } : {}),
    ...(cycles ? { cycles } : {}),
    ...(cases ? { cases } : {}),
    ...(operations ? { operations } : {}),
    ...(sessions ? { sessions } : {}),
    ...(seconds ? { seconds } : {}),
    log,
  });
  if (values.json) console.log(JSON.stringify(report));
  else {
    console.log('\nscenario | runs | faults | lost durable pages | corrupt pages served | hangs | failures');
    for (const s of report.scenarios) console.log(`${s.name} | ${s.runs} | ${s.faults} | ${s.lostDurablePages} | ${s.corruptPagesServed} | ${s.hangs} | ${s.failures}`);
  }
  return report.scenarios.every(passed) ? 0 : 1;
}
