// node-gyp downloads Node's headers before it builds an addon; on machines that reach only the npm registry
// that download fails. Debian's Node ships the same headers under /usr/include/node, so we seed node-gyp's header
// cache with a folder pointing at them. node-gyp looks there first, so every native dependency (better-sqlite3,
// @tiersync/native) then builds with no environment variable. This must run before `pnpm install`: pnpm runs
// dependencies' build scripts before any root lifecycle script.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const version = process.versions.node;
const cacheRoot = process.env.XDG_CACHE_HOME
  ? path.join(process.env.XDG_CACHE_HOME, 'node-gyp')
  : path.join(os.homedir(), '.cache', 'node-gyp');
const target = path.join(cacheRoot, version);
// node-gyp 12 accepts a cached header folder whose installVersion is at least this.
const NODE_GYP_INSTALL_VERSION = '11';

function installedHeaders() {
  const candidates = [path.resolve(process.execPath, '..', '..', 'include'), '/usr/include', '/usr/local/include'];
  return candidates.find((dir) => fs.existsSync(path.join(dir, 'node', 'common.gypi')) && fs.existsSync(path.join(dir, 'node', 'node_api.h')));
}

if (fs.existsSync(path.join(target, 'include', 'node', 'common.gypi'))) {
  console.log(`node-gyp headers: cached at ${target}`);
} else {
  const headers = installedHeaders();
  if (!headers) {
    console.log('node-gyp headers: none installed locally; node-gyp will try to download them');
  } else {
    fs.mkdirSync(target, { recursive: true });
    fs.rmSync(path.join(target, 'include'), { force: true, recursive: true });
    fs.symlinkSync(headers, path.join(target, 'include'));
    fs.writeFileSync(path.join(target, 'installVersion'), `${NODE_GYP_INSTALL_VERSION}\n`);
    console.log(`node-gyp headers: seeded ${target} -> ${headers}`);
  }
}
