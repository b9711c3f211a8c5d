/**
 * S3 faults: the object tier (write-through under a host tier) talks to s3rver through S3FaultProxy, which
 * answers 503 SlowDown, resets connections and stalls requests at random. Every store and load must settle by
 * its deadline (the driver's per-attempt timeout, retries with backoff, circuit breaker) with pages delivered
 * byte-exact, reported missing, or a typed error; once healed and reopened, every page that had a ready object
 * copy must load byte-exact.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TierSync } from '@tiersync/core';
import { s3rverCredentials, startS3rver } from '../bench/services.js';
import { config, durableNow, reopenAndCheck, traffic, type DiskFaultOptions } from './disk-faults.js';
import { scenario, type ScenarioResult } from './report.js';
import { S3FaultProxy } from '@tiersync/tiers';

const BUCKET = 'tiersync-reliability';

export async function runS3Faults(options: DiskFaultOptions = {}): Promise<ScenarioResult> {
  const operations = options.operations ?? 400;
  const result = scenario('S3 503s, resets and stalls (fault proxy in front of s3rver)', `tiersync bench reliability --scenarios s3 --operations ${operations} --json`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-s3faults-'));
  const s3 = await startS3rver([BUCKET]);
  const proxy = new S3FaultProxy(Number(new URL(s3.endpoint).port), options.seed ?? 23);
  const outcomes: Record<string, number> = {};
  try {
    await proxy.start();
    // Short per-attempt deadline so stalls cost seconds, not minutes; the breaker reopens quickly for the test.
    const url = (endpoint: string) =>
      `s3://${BUCKET}/run?endpoint=${encodeURIComponent(endpoint)}&region=us-east-1&${s3rverCredentials()}&object=256KiB&timeoutMs=1500&retries=3&backoffMs=20&backoffMaxMs=200&breakerCooldownMs=300`;
    const ts = new TierSync(config(dir, url(proxy.endpoint)));
    await ts.open();
    proxy.rates = { error503: 0.15, reset: 0.08, stall: 0.03 };
    await traffic(ts, operations, options.seed ?? 23, result, outcomes);
    proxy.heal();
    const durable = durableNow(ts, 'object');
    const injected = { ...proxy.injected };
    await ts.close();
    // Reopened straight at s3rver: what the tier acknowledged must all be there.
    await reopenAndCheck(dir, url(s3.endpoint), durable, result, 'object');
    result.faults = injected.error503 + injected.reset + injected.stall;
    result.details = { ...result.details, durablePagesChecked: durable.length, ...outcomes, injected503: injected.error503, injectedResets: injected.reset, injectedStalls: injected.stall, forwarded: injected.forwarded };
  } finally {
    await proxy.close();
    await s3.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return result;
}
