/**
 * What is running: @tiersync/core's version and how its native core was built. One home for both, read by the
 * CLI (`version`), the daemon's metrics (`tiersync_build_info`) and the RESP door (INFO, HELLO).
 */
import { readFileSync } from 'node:fs';
import { formatCrc32c, probeMachine } from '@tiersync/native';

let version: string | undefined;

/** @tiersync/core's version from its package.json (the same relative path from src/ and dist/). */
export function packageVersion(): string {
  version ??= (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  return version;
}

let build: string | undefined;

/** One-line description of how the native core was built and what it found here (probed once per process). */
export function nativeBuild(): string {
  if (build !== undefined) return build;
  const m = probeMachine();
  return (build = `io ${m.ioUring.available ? 'io_uring' : 'thread pool'}, cuda ${m.cuda.available ? `${m.cuda.devices} device(s)` : 'unavailable'}, crc32c ${formatCrc32c(m.crc32c)}, peer frames ${'error' in m.peerFrames ? 'none' : m.peerFrames.source}`);
}
