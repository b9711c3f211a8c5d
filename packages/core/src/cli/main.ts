/**
 * The `tiersync` command line. Each command lives in its own module; this file only dispatches and turns
 * TierSyncErrors into one-line messages with a non-zero exit code.
 */
import { TierSyncError } from '@tiersync/native';
import { benchCommand } from './bench.js';
import { demoCommand } from './demo.js';
import { doctorCommand } from './doctor.js';
import { serveCommand } from './serve.js';
import { simCommand } from './sim.js';
import { versionCommand } from './version.js';
import { weightsCommand } from './weights.js';

export interface Command {
  summary: string;
  usage: string;
  run(args: string[]): Promise<number>;
}

const commands: Record<string, Command> = {
  demo: demoCommand,
  doctor: doctorCommand,
  bench: benchCommand,
  sim: simCommand,
  serve: serveCommand,
  version: versionCommand,
  weights: weightsCommand,
};

function help(): string {
  const lines = ['Usage: tiersync <command> [options]', '', 'Commands:'];
  for (const [name, c] of Object.entries(commands)) lines.push(`  ${name.padEnd(10)} ${c.summary}`);
  lines.push('', 'Run `tiersync <command> --help` for the options of one command.');
  return lines.join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return 0;
  }
  if (name === '--version' || name === '-v') return versionCommand.run([]);
  const command = commands[name];
  if (!command) {
    console.error(`tiersync: unknown command '${name}'\n\n${help()}`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(command.usage);
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (e) {
    if (e instanceof TierSyncError) {
      console.error(`tiersync ${name}: ${e.message} (${e.code})`);
      return 1;
    }
    if (e instanceof TypeError && (e as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      console.error(`tiersync ${name}: ${e.message}\n\n${command.usage}`);
      return 2;
    }
    throw e;
  }
}
