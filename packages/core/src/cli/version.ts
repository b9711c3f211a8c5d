import { parseArgs } from 'node:util';
import { nativeBuild, packageVersion } from '../build-info.js';
import type { Command } from './command.js';

export const versionCommand: Command = {
  summary: 'print the version of tiersync and of its native core',
  usage: 'Usage: tiersync version [--json]',
  async run(args) {
    const { values } = parseArgs({ args, options: { json: { type: 'boolean' } } });
    const v = { version: packageVersion(), node: process.versions.node, napi: process.versions.napi, native: nativeBuild() };
    console.log(values.json ? JSON.stringify(v) : `tiersync ${v.version} (node ${v.node}, napi ${v.napi}; native: ${v.native})`);
    return 0;
  },
};
