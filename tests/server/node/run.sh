#!/usr/bin/env bash
# ctest driver of the Node tests of loom serve: copies the tests and the pinned
# package.json / package-lock.json into the build tree, `npm ci` there when the lock
# changed (or node_modules is absent), then `node --test`. Exits 77 (ctest: skipped) with
# the reason when node or npm is missing or the packages cannot be installed.
# Usage: run.sh BUILD_DIR LOOM_CLI SOURCE_DIR TEST_FILE...
set -euo pipefail
build=$1 loom=$2 source=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (apt-get install nodejs npm)"
    exit 77
  fi
done
mkdir -p "$build"
cp "$here"/package.json "$here"/package-lock.json "$here"/*.mjs "$here"/*.jinja "$build"/
if [[ ! -d $build/node_modules/openai ]] || ! cmp -s "$here/package-lock.json" "$build/node_modules/.loom-lock"; then
  if ! (cd "$build" && npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1); then
    echo "SKIP: npm ci could not install the pinned packages (offline?):"
    tail -n 5 "$build/npm-ci.log"
    exit 77
  fi
  cp "$here/package-lock.json" "$build/node_modules/.loom-lock"
fi
cd "$build"
export LOOM_CLI=$loom LOOM_SOURCE_DIR=$source
exec node --test --test-reporter=spec "$@"
