#!/usr/bin/env bash
# check_consumer.sh BUILD_DIR CONSUMER_DIR SOURCE_DIR
set -euo pipefail
build=$1
consumer=$2
source=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$prefix/lib
[[ -d $libdir ]] || libdir=$(dirname "$(find "$prefix" -name libloom.so | head -n1)")

echo "== exported symbols of libloom.so are exactly the functions loom.h declares"
nm -D --defined-only "$libdir/libloom.so" | awk '$2 ~ /^[TWDBRV]$/ {sub(/@.*/, "", $3); print $3}' \
  | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' | sort -u >"$work/exported.txt"
# Every declaration starts with LOOM_API; the function's name is the identifier before "(".
grep -E '^LOOM_API ' "$source/capi/loom.h" | sed -E 's/^([^(]*[^a-z0-9_])?(loom_[a-z0-9_]+)\(.*/\2/' \
  | sort -u >"$work/declared.txt"
if ! diff -u "$work/declared.txt" "$work/exported.txt"; then
  echo "exported symbols differ from the functions declared in loom.h" >&2
  exit 1
fi
echo "$(wc -l <"$work/exported.txt") symbols"

echo "== SONAME carries the major version"
objdump -p "$libdir/libloom.so" | grep -E 'SONAME +libloom\.so\.[0-9]+$'

echo "== find_package(loom) consumer (C against loom::loom, C++ against loom::loom_static)"
cmake -S "$consumer/project" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$work/cmake-build/consumer_c"
"$work/cmake-build/consumer_cpp"

echo "== pkg-config consumer, C99 -Wall -Wextra -Werror"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -Werror -pedantic "$consumer/project/consumer.c" -o "$work/pc_consumer" \
  $(pkg-config --cflags --libs loom) -Wl,-rpath,"$libdir"
"$work/pc_consumer"
if [[ -x $prefix/bin/loom ]]; then
  echo "== the installed loom runs its demo model from <prefix>/share/loom (not the source tree)"
  demo_out=$(cd "$work" && "$prefix/bin/loom" run --max-tokens 12 --temperature 0 --no-report 2>&1)
  grep -F "$prefix/share/loom/models/stories260K/stories260K.bin" <<<"$demo_out"
  grep -F "Once upon a time, there was a little girl named Lily." <<<"$demo_out"
fi
echo "consumer checks passed"
