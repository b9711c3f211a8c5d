// One-step install for a fresh machine: seed node-gyp's header cache (see seed-node-gyp-headers.mjs), then let
// pnpm install every workspace package, build the native addon and compile the TypeScript.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: 'inherit' });

run(process.execPath, [path.join(root, 'scripts', 'seed-node-gyp-headers.mjs')]);
run('pnpm', ['install', ...process.argv.slice(2)]);
