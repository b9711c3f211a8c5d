import { TierSyncError } from '@tiersync/native/errors';

/** One `tiersync` command: what `tiersync --help` lists, what `tiersync <name> --help` prints, and its body. */
export interface Command {
  summary: string;
  usage: string;
  /** Runs the command with the arguments after its name; resolves with the process exit code. */
  run(args: string[]): Promise<number>;
}

/**
 * A command line that names nothing the command knows (an unknown command, suite or subcommand): ERR_INVALID_ARGUMENT,
 * exit code 2 and, without --json, the command's usage, as for an unknown flag.
 */
export class UsageError extends TierSyncError {
  constructor(message: string) {
    super(message, 'ERR_INVALID_ARGUMENT');
  }
}
