#!/usr/bin/env bash
# The one entry point for a fresh Debian 12 machine: installs the Debian packages loom
# needs (cmake/bootstrap-deps.sh), configures and builds, then
#   run  [ARGS...]  runs `loom run ARGS...` (the built-in demo model when no --model), or
#   test [ARGS...]  runs every test through ctest (ARGS go to ctest).
# Environment: BUILD_DIR (default build), LOOM_CMAKE_ARGS (extra configure flags),
# JOBS (default: number of cores).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
shift || true
case "$mode" in
  run|test) ;;
  *) echo "usage: bash cmake/loom-dev.sh run [loom run flags...] | test [ctest flags...]" >&2; exit 2 ;;
esac

bash cmake/bootstrap-deps.sh

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LOOM_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"

if [[ "$mode" == run ]]; then
  exec "$build_dir/examples/loom" run "$@"
fi
cd "$build_dir"
exec ctest --output-on-failure -j "$jobs" "$@"
