import { parseArgs } from 'node:util';
import { configJsonSchema, openApiDocument } from '../server/index.js';
import { UsageError, type Command } from './command.js';

/** The machine-readable descriptions tiersync publishes, each generated from the zod schemas it validates with. */
const documents: Record<string, () => unknown> = {
  config: configJsonSchema,
  openapi: openApiDocument,
};

export const schemaCommand: Command = {
  summary: 'print what tiersync validates: the config\'s JSON Schema, the daemon\'s OpenAPI document',
  usage: `Usage: tiersync schema <${Object.keys(documents).join('|')}>

  config   JSON Schema (draft 2020-12) of the daemon and hierarchy config file, for editors and CI; the same file
           ships as packages/core/schema/config.schema.json
  openapi  OpenAPI 3.1 document of the daemon's HTTP API (also served at GET /openapi.json)`,
  async run(args) {
    const { positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
    const make = documents[positionals[0] ?? ''];
    if (!make) throw new UsageError(`name one of ${Object.keys(documents).join(', ')}, got '${positionals[0] ?? ''}'`);
    console.log(JSON.stringify(make(), null, 2));
    return 0;
  },
};
