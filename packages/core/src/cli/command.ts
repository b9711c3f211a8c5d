/** One `tiersync` command: what `tiersync --help` lists, what `tiersync <name> --help` prints, and its body. */
export interface Command {
  summary: string;
  usage: string;
  /** Runs the command with the arguments after its name; resolves with the process exit code. */
  run(args: string[]): Promise<number>;
}
