#!/bin/sh
# Builds the libFuzzer targets with clang in their own build folder and fuzzes each reader for N seconds:
# the GGUF reader (fuzz_gguf), the snapshot reader (fuzz_snapshot: inspect, and restore into a stories260K session),
# the config reader (fuzz_config: JSON and binary), tuning profiles (fuzz_profile), safetensors headers
# (fuzz_safetensors), Hugging Face tokenizer.json (fuzz_tokenizer_json) and chat inputs (fuzz_chat: roles, contents
# and template texts; no control token may come out of a message's content).
# usage: tests/fuzz/run.sh [SECONDS per target (default 60)]
#        [TARGETS (default "gguf snapshot config profile safetensors tokenizer_json chat")]
# env: FUZZ_BUILD_DIR (default <repo>/build-fuzz), INFOKV_MODELS_DIR (default <repo>/../shared/models), JOBS (build
#      parallelism and how many targets fuzz at once, default: all cores).
# Findings are written to $FUZZ_BUILD_DIR/fuzz-artifacts/<target>/; corpora grow in $FUZZ_BUILD_DIR/fuzz-corpus/<target>/
# and are reused by later runs. Exit status: non-zero when a fuzzer found a crash, leak, timeout or sanitizer report.
set -eu
secs=${1:-60}
targets=${2:-"gguf snapshot config profile safetensors tokenizer_json chat"}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
models=${INFOKV_MODELS_DIR:-$root/../shared/models}
export INFOKV_MODELS_DIR="$models"
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DINFOKV_FUZZ=ON -DINFOKV_BUILD_TESTS=OFF -DINFOKV_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target fuzz_gguf fuzz_snapshot fuzz_config fuzz_profile fuzz_safetensors \
  fuzz_tokenizer_json fuzz_chat fuzz_gguf_seeds -j "$jobs"

model="$models/stories260K/stories260K.gguf"
[ -f "$model" ] || echo "run.sh: warning: $model is missing; the snapshot fuzzer cannot exercise restore" >&2
# The targets run $jobs at a time (each libFuzzer process is single-threaded); each one's output goes to
# $build/fuzz-logs/<target>.log and is printed when it ends, whole if it failed.
logs="$build/fuzz-logs"
mkdir -p "$logs"
fuzz_one() {  # target
  t=$1
  seeds="$build/fuzz-seeds/$t"
  corpus="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  mkdir -p "$seeds" "$corpus" "$artifacts"
  extra=""
  case "$t" in
    gguf)
      "$build/tests/fuzz/fuzz_gguf_seeds" "$seeds"
      if [ -f "$model" ]; then
        cp "$model" "$seeds/stories260K.gguf"
        head -c 16384 "$model" >"$seeds/stories260K_head16k.gguf"  # the header region, small enough to mutate fast
      fi
      extra="-dict=$root/tests/fuzz/gguf.dict -max_len=2000000"
      ;;
    snapshot)
      cp "$root"/tests/data/golden/*.ikvs "$seeds"/
      extra="-max_len=400000"
      ;;
    config)
      cp "$root"/tests/data/golden/config_v1.json "$root"/tests/data/golden/config_v1.bin "$seeds"/
      extra="-max_len=8192"
      ;;
    safetensors)
      cp "$root"/tests/data/tf_made/tf-llama3/model.safetensors "$seeds"/llama3.safetensors
      head -c 4096 "$root"/tests/data/tf_made/tf-qwen2/model.safetensors >"$seeds"/qwen2_head4k.safetensors
      extra="-max_len=500000"
      ;;
    tokenizer_json)
      for d in hf_qwen2_tiny hf_llama2_tiny hf_llama2meta_tiny; do cp "$root/tests/data/$d/tokenizer.json" "$seeds/$d.json"; done
      extra="-max_len=100000"
      ;;
    profile) extra="-max_len=16384" ;;
    chat) extra="-max_len=4096" ;;
  esac
  # Earlier findings (regression inputs, also replayed by ctest's fuzz_replay_<target>) seed the run too.
  [ -d "$root/tests/data/fuzz/$t" ] && cp "$root/tests/data/fuzz/$t"/* "$seeds"/ 2>/dev/null || true
  # shellcheck disable=SC2086
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 $extra "$corpus" "$seeds"
}

failed=""
running=0
pids=""
finish() {  # pid target: waits for one fuzzer and reports it
  if wait "$1"; then
    echo "run.sh: $2 done ($secs s, no finding):"
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$logs/$2.log" | sed 's/^/  /' || true
  else
    echo "run.sh: $2 FAILED; its log:" >&2
    cat "$logs/$2.log" >&2
    failed="$failed $2"
  fi
}
for t in $targets; do
  echo "run.sh: fuzzing $t for $secs s"
  fuzz_one "$t" >"$logs/$t.log" 2>&1 &
  pids="$pids $!:$t"
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    # shellcheck disable=SC2086
    set -- $pids
    first=$1
    shift
    pids="$*"
    finish "${first%%:*}" "${first#*:}"
    running=$((running - 1))
  fi
done
for p in $pids; do finish "${p%%:*}" "${p#*:}"; done
if [ -n "$failed" ]; then
  echo "run.sh: findings in:$failed (inputs under $build/fuzz-artifacts/)" >&2
  exit 1
fi
