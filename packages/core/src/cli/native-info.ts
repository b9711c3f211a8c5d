import { probeMachine } from '@tiersync/native';

/** One-line description of how the native core was built and what it found. */
export function nativeBuild(): string {
  const m = probeMachine();
  return `io ${m.ioUring.available ? 'io_uring' : 'thread pool'}, cuda ${m.cuda.available ? `${m.cuda.devices} device(s)` : 'unavailable'}`;
}

export function crc32cHardwareName(): string {
  return probeMachine().crc32c;
}
