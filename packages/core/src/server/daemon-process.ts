/**
 * A `tiersync serve` daemon in a child process, for benchmarks and scenarios that need the daemon on its own
 * process (its own event loop and native threads): started from the compiled CLI, or from the TypeScript sources
 * through the test fixture when the caller itself runs from sources.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TierSyncError } from '@tiersync/native';

export interface DaemonProcess {
  child: ChildProcess;
  /** The HTTP control plane, e.g. `http://127.0.0.1:7071`. */
  url: string;
  httpPort: number;
  /** SIGTERM (graceful shutdown), then SIGKILL after `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
}

/** Starts `tiersync serve --config FILE` and resolves once its "listening" log line names its ports. */
export async function startDaemonProcess(configFile: string, options: { deadlineMs?: number } = {}): Promise<DaemonProcess> {
  const deadlineMs = options.deadlineMs ?? 60_000;
  const here = path.dirname(fileURLToPath(import.meta.url));
  const argv = import.meta.url.endsWith('.ts')
    ? ['--conditions=source', path.join(here, 'serve.fixture.mjs'), '--config', configFile]
    : [path.join(here, '../../bin/tiersync.js'), 'serve', '--config', configFile];
  const child = spawn(process.execPath, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const httpPort = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new TierSyncError(`daemon did not start within ${deadlineMs} ms: ${stderr.slice(-2000)}`, 'ERR_TIMEOUT'));
    }, deadlineMs);
    child.stderr!.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-20_000);
      const line = stderr.split('\n').find((l) => l.includes('tiersync serve listening'));
      if (line) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { httpPort: number }).httpPort);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new TierSyncError(`daemon exited early (${code}): ${stderr.slice(-2000)}`, 'ERR_IO'));
    });
  });
  return {
    child,
    httpPort,
    url: `http://127.0.0.1:${httpPort}`,
    stop: (graceMs = 20_000) =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        const kill = setTimeout(() => child.kill('SIGKILL'), graceMs);
        child.once('exit', (code) => {
          clearTimeout(kill);
          resolve(code);
        });
        child.kill('SIGTERM');
      }),
  };
}
