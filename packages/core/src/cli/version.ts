import { readFileSync } from 'node:fs';
import { nativeBuild } from './native-info.js';
import type { Command } from './main.js';

export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export const versionCommand: Command = {
  summary: 'print the version of tiersync and of its native core',
  usage: 'Usage: tiersync version',
  async run() {
    console.log(`tiersync ${packageVersion()} (node ${process.versions.node}, napi ${process.versions.napi}; native: ${nativeBuild()})`);
    return 0;
  },
};
