#!/usr/bin/env bash
# Runs every libFuzzer harness for DURATION seconds from its seed corpus, one per core
# at a time (FUZZ_JOBS overrides). Builds nothing: configure and build first, e.g.
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
# One harness per core at a time (libFuzzer runs on one thread): FUZZ_JOBS overrides.
jobs=${FUZZ_JOBS:-$(nproc)}

# Runs harness $1; its verdict line goes to artifacts/<harness>.result.
run_one() {
  local h=$1 corpus=$fuzz_dir/corpus/$1 log=$fuzz_dir/artifacts/$1.log result execs cov
  mkdir -p "$corpus"
  if "$fuzz_dir/loom_fuzz_$h" -max_total_time="$duration" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$fuzz_dir/artifacts/$h-" \
       "$corpus" "$fuzz_dir/seeds/$h" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  echo "$h: $result, $execs executions, coverage $cov" >"$fuzz_dir/artifacts/$h.result"
}

echo "=== fuzzing ${#harnesses[@]} harnesses for ${duration}s each, $jobs at a time"
running=0
for h in "${harnesses[@]}"; do
  if (( running >= jobs )); then
    wait -n || true
    running=$((running - 1))
  fi
  rm -f "$fuzz_dir/artifacts/$h.result"
  run_one "$h" &
  running=$((running + 1))
done
wait || true

status=0
echo "=== fuzz summary"
for h in "${harnesses[@]}"; do
  line=$(cat "$fuzz_dir/artifacts/$h.result" 2>/dev/null || echo "$h: FAILED, no result")
  echo "$line"
  if [[ $line != "$h: ok,"* ]]; then
    status=1
    echo "--- $h: the end of its log ($fuzz_dir/artifacts/$h.log)"
    tail -n 40 "$fuzz_dir/artifacts/$h.log" || true
  fi
done
exit $status
