import { probeMachine } from '@tiersync/native';

/** One-line description of how the native core was built and what it found here. */
export function nativeBuild(): string {
  const m = probeMachine();
  return `io ${m.ioUring.available ? 'io_uring' : 'thread pool'}, cuda ${m.cuda.available ? `${m.cuda.devices} device(s)` : 'unavailable'}, crc32c ${m.crc32c}`;
}
