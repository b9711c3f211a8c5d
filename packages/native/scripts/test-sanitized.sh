#!/usr/bin/env bash
# Builds the addon with AddressSanitizer + UndefinedBehaviorSanitizer in a scratch copy of this package and runs
# the native test suite against it. Any ASan/UBSan report fails the run. Usage: packages/native/scripts/test-sanitized.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$here/binding.gyp" "$here/cpp" "$here/scripts" "$here/package.json" "$scratch/"
ln -s "$here/node_modules" "$scratch/node_modules"
(cd "$scratch" && TIERSYNC_SANITIZE=1 node scripts/build-addon.mjs --debug >/dev/null)
addon="$scratch/build/Debug/tiersync_native.node"
[ -f "$addon" ] || addon="$scratch/build/Release/tiersync_native.node"
# Node itself is not instrumented: the runtimes are preloaded; leak checks are off (V8 keeps memory until exit).
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TIERSYNC_NATIVE_ADDON="$addon"
export TIERSYNC_SANITIZED=1
cd "$root"
npx vitest run --project native --pool forks
# The native RESP door (cpp/resp_door.cc, resp_mirror.cc, resp_parse.cc) is driven through core's server: its own
# tests and the door suite, which run on the native engine by default. (Not exec'd: the EXIT trap removes the
# ~130 MB scratch build.)
npx vitest run --pool forks packages/core/src/server/resp/native-engine.test.ts packages/core/src/server/resp/door.test.ts
