import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), 'drop-after-close.fixture.mjs');
const run = (...args: string[]) => {
  const child = spawnSync(process.execPath, ['--expose-gc', fixture, ...args], { encoding: 'utf8', timeout: 50_000 });
  return { signal: child.signal, status: child.status, stderr: child.stderr, stdout: child.stdout };
};

describe('native objects with calls queued for the JS thread (RESP door, peer server)', () => {
  it('survive being closed, dropped and garbage-collected before those calls run', () => {
    // Before the wraps held themselves until their thread-safe functions finished, the door crashed this process
    // (SIGSEGV, SIGABRT) within a few rounds.
    expect(run('rounds', '100')).toEqual({ signal: null, status: 0, stderr: '', stdout: 'ok 100\n' });
  });

  it('refuse a port in use with a typed error and do not keep the process alive afterwards', () => {
    // Before, the failed objects' thread-safe functions were never released: the process never exited (SIGTERM here).
    expect(run('port-in-use')).toEqual({ signal: null, status: 0, stderr: '', stdout: 'ok ERR_UNAVAILABLE ERR_IO\n' });
  });
});
