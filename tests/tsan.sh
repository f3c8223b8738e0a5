#!/bin/sh
# Builds the library and the unit-test binary with ThreadSanitizer (INFOKV_SANITIZE=thread) in its own folder and
# runs the concurrency tests (ctest -L concurrency: suites named *Concurrency, threads through the C ABI) under it;
# any data race or lock-order report fails the test that triggered it.
# Only the target infokv_tests is built, with the core and libinfokv it links; in a TSan build it holds just the test
# files that have a *Concurrency suite (tests/CMakeLists.txt). No CLI, bindings, benchmarks or fuzz replays: this is
# a short CI step (about 2 CPU-minutes of build, so about 1 minute on 2 idle cores, and 10 s of tests).
# usage: tests/tsan.sh [BUILD_DIR (default <repo>/build-tsan)]
# env: LABELS (ctest label regex, default "concurrency"), JOBS (default: all cores), INFOKV_MODELS_DIR as for the
#      normal tests, TSAN_OPTIONS to override the defaults below.
set -eu
. "$(dirname "$0")/sanitizer_env.sh"
build=${1:-$root/build-tsan}
models=${INFOKV_MODELS_DIR:-$root/../shared/models}

# RelWithDebInfo: TSan slows code 5-15x, so keep the optimiser on; -g gives reports with file:line.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DINFOKV_SANITIZE=thread \
  -DINFOKV_WITH_CUDA=OFF -DINFOKV_BUILD_TESTS=ON -DINFOKV_BUILD_BINDINGS=OFF -DINFOKV_BUILD_BENCHMARKS=OFF \
  -DINFOKV_MODELS_DIR="$models" -DPython3_EXECUTABLE="$py" >/dev/null
cmake --build "$build" -j "$jobs" --target infokv_tests

# halt_on_error + abort: the first report fails the test that made it (exitcode alone would let the run go on).
# The suppressions file is empty unless a third-party false positive needs a narrowly scoped entry (see its header).
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/tests/tsan.supp}
export TSAN_OPTIONS
cd "$build"
# -j 1: the concurrency tests start their own threads, and TSan's cost grows with contention for the 2 CI cores.
exec ctest -L "${LABELS:-concurrency}" --output-on-failure -j 1 --no-tests=error
