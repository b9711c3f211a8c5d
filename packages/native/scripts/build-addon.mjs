// Builds the addon with node-gyp. When node-gyp's header cache is empty and Node's headers are installed
// (Debian's nodejs puts them under /usr/include/node), point node-gyp at them instead of letting it download.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js');
const args = [nodeGyp, 'rebuild', '--jobs', String(Math.max(1, os.availableParallelism()))];
if (process.argv.includes('--debug')) args.push('--debug');

const cacheRoot = process.env.XDG_CACHE_HOME ? path.join(process.env.XDG_CACHE_HOME, 'node-gyp') : path.join(os.homedir(), '.cache', 'node-gyp');
const cached = fs.existsSync(path.join(cacheRoot, process.versions.node, 'include', 'node', 'common.gypi'));
const prefix = path.resolve(process.execPath, '..', '..');
if (!cached && !process.env.npm_config_nodedir && fs.existsSync(path.join(prefix, 'include', 'node', 'common.gypi'))) {
  args.push(`--nodedir=${prefix}`);
}
const result = spawnSync(process.execPath, args, { stdio: 'inherit', cwd: path.resolve(import.meta.dirname, '..') });
process.exit(result.status ?? 1);
