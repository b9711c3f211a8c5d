// One-step install for a fresh machine: the system packages the native core and the tests use (through apt when
// root), node-gyp's header cache (see seed-node-gyp-headers.mjs), then pnpm installs every workspace package,
// builds the native addon and compiles the TypeScript. liburing-dev and libipsec-mb-dev must be present before the
// addon is built so that io_uring and IPsec-MB's GCM are compiled in.
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { missingSystemPackages, SYSTEM_PACKAGES } from './system-packages.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd, args, env = process.env) => execFileSync(cmd, args, { cwd: root, stdio: 'inherit', env });

function installSystemPackages() {
  const missing = missingSystemPackages();
  if (missing.length === 0) {
    console.log(`system packages: present (${SYSTEM_PACKAGES.map((p) => p.apt).join(', ')})`);
    return;
  }
  const names = missing.map((p) => p.apt);
  const command = `apt-get update && apt-get install -y ${names.join(' ')}`;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status === 0;
  if (!isRoot || !hasApt) {
    console.warn(
      `system packages missing: ${missing.map((p) => `${p.apt} (${p.why})`).join(', ')}\n` +
        `  install them as root with:  ${command}\n` +
        '  then rerun this step. The demo runs without them; the native core falls back to a thread pool without\n' +
        '  liburing-dev, and the tests that need a missing tool fail naming it.',
    );
    return;
  }
  console.log(`+ ${command}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  // A failed index refresh (one unreachable mirror) should not stop an install from the lists already present.
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  run('apt-get', ['install', '-y', '-qq', ...names], env);
  const still = missingSystemPackages();
  if (still.length) throw new Error(`apt-get finished but these are still missing: ${still.map((p) => p.apt).join(', ')}`);
}

installSystemPackages();
run(process.execPath, [path.join(root, 'scripts', 'seed-node-gyp-headers.mjs')]);
run('pnpm', ['install', ...process.argv.slice(2)]);
