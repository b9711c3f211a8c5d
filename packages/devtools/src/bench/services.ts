/**
 * Real servers the benchmarks compare against, started on loopback for one run and stopped after:
 * redis-server (from apt) and s3rver (npm).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { TierSyncError } from '@tiersync/native';

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, deadlineMs: number, child: ChildProcess, what: string): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new TierSyncError(`${what} exited with code ${child.exitCode}`, 'ERR_UNAVAILABLE');
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => {
        c.destroy();
        resolve(true);
      });
      c.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new TierSyncError(`${what} did not listen on port ${port} within ${deadlineMs} ms`, 'ERR_TIMEOUT');
}

export interface RunningRedis {
  port: number;
  /** The redis-server process (tests kill it to take the server away). */
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts redis-server on loopback with persistence off (a cache, like tiersync's memory tiers), on `options.port`
 * (a fixed port, so a restarted server comes back where its clients look) or else a free one; resolves once it
 * accepts connections (10 s deadline; a server that does not come up is killed).
 */
export async function startRedis(options: { port?: number } = {}): Promise<RunningRedis> {
  const port = options.port ?? (await freePort());
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory', '0'], { stdio: 'ignore' });
  const spawned = new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (e) => reject(new TierSyncError(`cannot start redis-server (install it: apt-get install redis-server): ${e.message}`, 'ERR_UNAVAILABLE')));
  });
  await spawned;
  try {
    await waitForPort(port, 10_000, child, 'redis-server');
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  return {
    port,
    child,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

export interface RunningS3 {
  endpoint: string;
  stop(): Promise<void>;
}

/**
 * The object tier URL option that gives s3rver's keys (it accepts S3RVER/S3RVER): set in this process's environment,
 * since credentials never go in a tier URL. Child processes inherit it.
 */
export function s3rverCredentials(): string {
  process.env['S3RVER_ACCESS_KEY_ID'] = 'S3RVER';
  process.env['S3RVER_SECRET_ACCESS_KEY'] = 'S3RVER';
  return 'credentials=env:S3RVER';
}

/** Starts s3rver (an S3-compatible server in Node) on loopback with a fresh directory and the given buckets. */
export async function startS3rver(buckets: string[]): Promise<RunningS3> {
  const { default: S3rver } = await import('s3rver');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tiersync-s3rver-'));
  const port = await freePort();
  const server = new S3rver({ port, address: '127.0.0.1', silent: true, directory: dir, configureBuckets: buckets.map((name) => ({ name })) });
  await server.run();
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stop: async () => {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
