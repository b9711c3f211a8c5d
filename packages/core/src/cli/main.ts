/**
 * The `tiersync` command line. Each command lives in its own module; this file only dispatches and turns errors
 * into one line (or, under `--json`, one `{"error":{"code","message"}}` object on stdout) with a non-zero exit code.
 * `--verbose` (any command) prints the stack of an unexpected error.
 */
import { TierSyncError } from '@tiersync/native';
import { demoCommand } from './demo.js';
import { doctorCommand } from './doctor.js';
import { serveCommand } from './serve.js';
import { schemaCommand } from './schema.js';
import { simCommand } from './sim.js';
import { UsageError, type Command } from './command.js';
import { versionCommand } from './version.js';
import { weightsCommand } from './weights.js';

export type { Command } from './command.js';

const commands: Record<string, Command> = {
  demo: demoCommand,
  doctor: doctorCommand,
  sim: simCommand,
  serve: serveCommand,
  schema: schemaCommand,
  version: versionCommand,
  weights: weightsCommand,
};

/** @internal The command table, for white-box tests of the error conventions. */
export const commandTable = commands;

/**
 * Commands that live outside the published package, and where to find them: `tiersync bench` (the benchmark suites)
 * is a development tool of the repository (packages/devtools), run from a checkout as `pnpm tiersync bench`.
 */
const ELSEWHERE: Record<string, string> = {
  bench: 'the benchmark suites are development tools of the tiersync repository, not part of @tiersync/core: in a checkout, run `pnpm tiersync bench ...` (packages/devtools)',
};

function help(table: Record<string, Command>): string {
  const lines = ['Usage: tiersync <command> [options]', '', 'Commands:'];
  for (const [name, c] of Object.entries(table)) lines.push(`  ${name.padEnd(10)} ${c.summary}`);
  lines.push('', 'Run `tiersync <command> --help` for the options of one command.');
  return lines.join('\n');
}

/** One error as the CLI reports it: a code from the TierSyncError table (or ERR_INTERNAL) and a message. */
function describe(e: unknown, command: Command | undefined): { code: string; message: string; exit: number; usage?: string } {
  if (e instanceof UsageError) return { code: e.code, message: e.message, exit: 2, ...(command ? { usage: command.usage } : {}) };
  if (e instanceof TierSyncError) return { code: e.code, message: e.message, exit: 1 };
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (e instanceof TypeError && typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
    return { code: 'ERR_INVALID_ARGUMENT', message: e.message, exit: 2, ...(command ? { usage: command.usage } : {}) };
  }
  const message = e instanceof Error ? e.message.split('\n')[0]! : String(e);
  return { code: 'ERR_INTERNAL', message, exit: 1 };
}

/**
 * Runs one CLI invocation and returns its exit code. Global flags: `--json` (errors as one JSON object on stdout;
 * each command also prints its result as JSON) and `--verbose` (stack traces of unexpected errors).
 * `extraCommands` adds commands to the table (the repository's `pnpm tiersync` adds `bench` from packages/devtools).
 */
export async function main(argv: string[], extraCommands: Readonly<Record<string, Command>> = {}): Promise<number> {
  const table: Record<string, Command> = { ...commands, ...extraCommands };
  const verbose = argv.includes('--verbose');
  const args = argv.filter((a) => a !== '--verbose');
  const [name, ...rest] = args;
  const json = rest.includes('--json');
  const fail = (e: unknown, command: Command | undefined): number => {
    const d = describe(e, command);
    if (json) console.log(JSON.stringify({ error: { code: d.code, message: d.message } }));
    else if (d.code === 'ERR_INTERNAL') {
      console.error(`tiersync ${name}: ${d.message}`);
      console.error(verbose && e instanceof Error ? e.stack : `(unexpected error; rerun with --verbose for the stack)`);
    } else console.error(`tiersync ${name}: ${d.message} (${d.code})${d.usage ? `\n\n${d.usage}` : ''}`);
    return d.exit;
  };
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(help(table));
    return 0;
  }
  if (name === '--version' || name === '-v') return versionCommand.run([]);
  const command = table[name];
  if (!command) {
    const elsewhere = ELSEWHERE[name];
    if (elsewhere !== undefined) {
      if (json) return fail(new TierSyncError(`'${name}': ${elsewhere}`, 'ERR_UNSUPPORTED'), undefined);
      console.error(`tiersync ${name}: ${elsewhere}`);
      return 2;
    }
    if (json) return fail(new UsageError(`unknown command '${name}' (commands: ${Object.keys(table).join(', ')})`), undefined);
    console.error(`tiersync: unknown command '${name}'\n\n${help(table)}`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(command.usage);
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (e) {
    return fail(e, command);
  }
}
