#!/bin/sh
# Builds the libFuzzer target with clang in its own build folder and fuzzes the GGUF reader for N seconds.
# usage: tests/fuzz/run.sh [SECONDS (default 60)]
# env: FUZZ_BUILD_DIR (default <repo>/build-fuzz), INFOKV_MODELS_DIR (default <repo>/../shared/models), JOBS (build
#      parallelism, default: all cores).
# Findings are written to $FUZZ_BUILD_DIR/fuzz-artifacts/; the corpus grows in $FUZZ_BUILD_DIR/fuzz-corpus/ and is
# reused by later runs. Exit status: non-zero when the fuzzer found a crash, leak, timeout or sanitizer report.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
models=${INFOKV_MODELS_DIR:-$root/../shared/models}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFOKV_FUZZ=ON -DINFOKV_BUILD_TESTS=OFF -DINFOKV_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target fuzz_gguf fuzz_gguf_seeds -j "$jobs"

seeds="$build/fuzz-seeds"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/tests/fuzz/fuzz_gguf_seeds" "$seeds"
model="$models/stories260K/stories260K.gguf"
if [ -f "$model" ]; then
  cp "$model" "$seeds/stories260K.gguf"
  head -c 16384 "$model" >"$seeds/stories260K_head16k.gguf"  # the header region, small enough to mutate fast
else
  echo "run.sh: warning: $model is missing; fuzzing from the builder seeds only" >&2
fi

exec "$build/tests/fuzz/fuzz_gguf" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -max_len=2000000 -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
  "$corpus" "$seeds"
