#!/usr/bin/env bash
# Installs the Debian 12 packages loom builds against. Runs apt-get when it is
# root (or has passwordless sudo); otherwise prints the exact command to run.
# Usage: cmake/bootstrap-deps.sh [--with-fuzz]   (--with-fuzz adds clang's runtimes)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git python3
  libeigen3-dev libsimdjson-dev libspdlog-dev libfmt-dev catch2 libbenchmark-dev
  libpcre2-dev libutf8proc-dev libssl-dev libcpp-httplib-dev
  curl  # the loom serve tests read SSE framing and /health through it
)
# The loom serve tests drive the server with the official `openai` npm client (pinned in
# tests/server/node/package-lock.json, installed by `npm ci` at test time). Node.js comes
# from Debian unless the machine already has a node (e.g. NodeSource's, whose nodejs
# package conflicts with Debian's npm).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
if [[ "${1:-}" == "--with-fuzz" ]]; then
  packages+=(clang libclang-rt-14-dev llvm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
if [[ $(id -u) -eq 0 ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  "${cmd[@]}"
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  sudo -n apt-get update -qq
  sudo -n "${cmd[@]}"
else
  echo "loom: missing Debian packages: ${missing[*]}" >&2
  echo "loom: run as root:  apt-get update && ${cmd[*]}" >&2
  exit 1
fi
