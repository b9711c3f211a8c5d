// Helpers of the daemon and example tests: `tiersync serve` and examples in child processes, redis-server on loopback.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startRedis as startRedisServer } from '../packages/devtools/src/bench/services.js';

export { freePort } from '../packages/devtools/src/bench/services.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const FIXTURE = path.join(here, '../packages/core/src/server/serve.fixture.mjs');

export interface Daemon {
  child: ChildProcess;
  url: string;
  httpPort: number;
  peerPort: number;
  stderr: () => string;
  stop: () => Promise<number | null>;
}

/** Starts `tiersync serve` from the TypeScript sources in a child process; resolves once it listens. */
export async function startDaemon(config: unknown, dir: string, name = 'daemon'): Promise<Daemon> {
  const file = path.join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(config));
  const child = spawn(process.execPath, ['--conditions=source', FIXTURE, '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const ports = await new Promise<{ httpPort: number; peerPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Never leave a daemon behind when it did not come up.
      child.kill('SIGKILL');
      reject(new Error(`${name} did not start within 30 s: ${stderr}`));
    }, 30_000);
    child.stderr!.on('data', (d) => {
      stderr += d;
      for (const line of stderr.split('\n')) {
        if (!line.includes('tiersync serve listening')) continue;
        clearTimeout(timer);
        const j = JSON.parse(line) as { httpPort: number; peerPort: number };
        resolve(j);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited early with ${code}: ${stderr}`));
    });
  });
  return {
    child,
    ...ports,
    url: `http://127.0.0.1:${ports.httpPort}`,
    stderr: () => stderr,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
        child.once('exit', (code) => {
          clearTimeout(kill);
          resolve(code);
        });
        child.kill('SIGTERM');
      }),
  };
}

/** redis-server on loopback `port`, without persistence; resolves once it accepts connections (10 s deadline). */
export async function startRedis(port: number): Promise<ChildProcess> {
  return (await startRedisServer({ port })).child;
}

export function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * Runs `examples/<script>` with `args` from the TypeScript sources (as the daemon tests run serve) and resolves with
 * its exit code and output; killed (exit code null) if it runs past `deadlineMs`.
 */
export async function runExample(script: string, args: readonly string[], deadlineMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--conditions=source', '--import', path.join(here, 'daemon-source-hooks.mjs'), path.join(here, '../examples', script), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => {
    const deadline = setTimeout(() => child.kill('SIGKILL'), deadlineMs);
    child.on('exit', (c) => {
      clearTimeout(deadline);
      resolve(c);
    });
  });
  return { code, stdout, stderr };
}
