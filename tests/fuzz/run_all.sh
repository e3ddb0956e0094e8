#!/usr/bin/env bash
# Runs every libFuzzer harness for DURATION seconds from its seed corpus. Builds
# nothing: configure and build first, e.g.
#   cmake --preset fuzz && cmake --build build-fuzz -j"$(nproc)"
# Usage: tests/fuzz/run_all.sh DURATION [BUILD_DIR]   (BUILD_DIR defaults to build-fuzz)
# New inputs go to BUILD_DIR/tests/fuzz/corpus/<harness>/ (kept between runs), crash
# reproducers to BUILD_DIR/tests/fuzz/artifacts/. Exits non-zero if any harness fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

duration=${1:?usage: tests/fuzz/run_all.sh DURATION [BUILD_DIR]}
build=${2:-build-fuzz}
fuzz_dir=$build/tests/fuzz
harnesses=(safetensors shard_index gguf zip unpickler npy config_json tokenizer_json tokenizer_encode gguf_tokenizer
           pack_index generation_config llama2c chat_template batch server_request sentencepiece_model)

for h in "${harnesses[@]}"; do
  if [[ ! -x $fuzz_dir/loom_fuzz_$h || ! -d $fuzz_dir/seeds/$h ]]; then
    echo "missing $fuzz_dir/loom_fuzz_$h or its seeds: build the fuzz preset first" >&2
    exit 2
  fi
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$fuzz_dir/artifacts"
status=0
summary=()
for h in "${harnesses[@]}"; do
  corpus=$fuzz_dir/corpus/$h
  mkdir -p "$corpus"
  log=$fuzz_dir/artifacts/$h.log
  echo "=== fuzz $h for ${duration}s"
  if "$fuzz_dir/loom_fuzz_$h" -max_total_time="$duration" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$fuzz_dir/artifacts/$h-" \
       "$corpus" "$fuzz_dir/seeds/$h" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 40 "$log"
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  summary+=("$h: $result, $execs executions, coverage $cov")
done
echo "=== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
