#!/usr/bin/env bash
# ARM64 (aarch64) for real: cross-compiles infokv with Debian's cross toolchain and runs the unit suites and the
# reference checks under qemu-aarch64 (user-mode emulation: correctness, not speed). Part of packaging/test.sh.
# Usage: bash packaging/cross/test_arm64.sh [build-dir]   (from anywhere; default build dir: build-ci/arm64)
# Environment: INFOKV_MODELS_DIR, INFOKV_CORPORA_DIR, INFOKV_SMOLLM2 as packaging/test.sh sets them; JOBS.
#
# What runs (see packaging/docs/arm64.md): the whole unit binary (tests/infokv_tests) under emulation, except the
# tests that start another program (the CLI, Python, a Redis server): qemu-user runs one aarch64 process, and a
# child it starts would need the kernel's binfmt_misc registration, which containers usually lack. Those tests
# run on x86 in the main build. The CPU here takes the portable kernels on aarch64 (IKV_X86 is 0).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DIR="${1:-$ROOT/build-ci/arm64}"
JOBS="${JOBS:-$(nproc)}"
# The cross toolchain, qemu, and the arm64 builds of the libraries infokv links (Debian multiarch).
bash "$ROOT/packaging/setup.sh" g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libflatbuffers-dev:arm64 \
  libxxhash-dev:arm64 libhiredis-dev:arm64 libutf8proc-dev:arm64 libcpp-httplib-dev:arm64 libgtest-dev:arm64

SHARED="${INFOKV_SHARED_DIR:-$ROOT/../shared}"
MODELS="${INFOKV_MODELS_DIR:-$SHARED/models}"
CORPORA="${INFOKV_CORPORA_DIR:-$SHARED/corpora}"
SMOLLM2="${INFOKV_SMOLLM2:-$(bash "$ROOT/packaging/fetch_models.sh" | tail -n 1)}"
QWEN="${INFOKV_QWEN25_CODER:-$(bash "$ROOT/packaging/fetch_models.sh" --model qwen2.5-coder-0.5b | tail -n 1)}"
cmake -S "$ROOT" -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/packaging/cross/aarch64-linux-gnu.cmake" -DINFOKV_WITH_CUDA=OFF \
  -DINFOKV_MODELS_DIR="$MODELS" -DINFOKV_CORPORA_DIR="$CORPORA" \
  -DINFOKV_SMOLLM2_PATH="$SMOLLM2" -DINFOKV_QWEN25_CODER_PATH="$QWEN" >/dev/null
cmake --build "$DIR" -j "$JOBS" --target infokv infokv_cli infokv_tests
file "$DIR/tests/infokv_tests" | grep -q "ARM aarch64" || { echo "test_arm64: not an aarch64 binary" >&2; exit 1; }

# The unit binary under emulation, minus packaging/cross/arm64_skip.txt, one process per suite (below). The
# reference checks must be among those run.
skip=$(grep -v '^[[:space:]]*\(#\|$\)' "$ROOT/packaging/cross/arm64_skip.txt" | paste -sd: -)
if grep -qx 'Reference\..*\|SmolLM2.LogitsAndGreedyTextMatchFloat64Reference' "$ROOT/packaging/cross/arm64_skip.txt"; then
  echo "test_arm64: the reference checks may not be skipped" >&2
  exit 1
fi
list=$(GTEST_FILTER="-$skip" qemu-aarch64 "$DIR/tests/infokv_tests" --gtest_list_tests)
for f in Reference.CoreWithF32KvMatchesExactly SmolLM2.LogitsAndGreedyTextMatchFloat64Reference; do
  grep -qx "  ${f#*.}" <<<"$list" || { echo "test_arm64: $f is not in the run" >&2; exit 1; }
done
# One emulated process per test suite, JOBS at a time, the suites with the most tests first and SmolLM2 (its float64
# reference alone takes three minutes) before all: two fixed shards left one core idle for minutes.
suites=$(awk '/^[^ ]/ {s = $1; sub(/\.$/, "", s); n[s] = 0; order[++k] = s} /^  / {n[s]++}
              END {for (i = 1; i <= k; i++) print (order[i] == "SmolLM2" ? 1e9 : n[order[i]]), order[i]}' <<<"$list" |
         sort -k1,1nr -s | awk '{print $2}')
echo "test_arm64: $(grep -c '^  ' <<<"$list") unit tests in $(wc -l <<<"$suites") suites under qemu-aarch64, $JOBS at a time"
logs="$DIR/arm64_logs"
rm -rf "$logs"
mkdir -p "$logs"
export DIR logs skip
# shellcheck disable=SC2016
xargs -P "$JOBS" -I{} bash -c 'cd "$DIR/tests" && timeout 1800 qemu-aarch64 ./infokv_tests --gtest_brief=1 \
    --gtest_filter="$1.*-$skip" > "$logs/$(tr / _ <<<"$1").log" 2>&1 || echo "$1" >> "$logs/FAILED"' _ {} <<<"$suites"
passed=$(cat "$logs"/*.log | awk '/^\[  PASSED  \] [0-9]+ test/ {n += $4} END {print n + 0}')
echo "test_arm64: $passed tests passed"
if [ -s "$logs/FAILED" ]; then
  while read -r suite; do
    echo "test_arm64: suite $suite failed; its log ends:" >&2
    tail -n 60 "$logs/$(tr / _ <<<"$suite").log" >&2
  done <"$logs/FAILED"
  exit 1
fi
echo "test_arm64: all passed under qemu-aarch64"
