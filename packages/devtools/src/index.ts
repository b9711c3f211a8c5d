/**
 * @tiersync/devtools: the repository's development tools, never published. `main` is the `tiersync` CLI of
 * @tiersync/core with the `bench` command added (the benchmark suites, including `bench reliability`, which runs the
 * crash, fault, fuzz and soak harnesses of ./reliability). The root package.json's `pnpm tiersync` runs it.
 */
import { runCli } from '@tiersync/core';
import { benchCommand } from './bench/command.js';

export { benchCommand } from './bench/command.js';

/** Runs one `tiersync` invocation with the development commands added; resolves with the exit code. */
export function main(argv: string[]): Promise<number> {
  return runCli(argv, { bench: benchCommand });
}
