#!/bin/sh
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer (INFOKV_SANITIZE=ON) in its own folder and
# runs the unit tests (ctest -L unit) under it; any sanitizer report fails the run.
# usage: tests/sanitize.sh [BUILD_DIR (default <repo>/build-asan)]
# env: LABELS (ctest label regex, default "unit"; "unit|cli" adds the corrupted-model CLI runs), JOBS (default: all
#      cores), INFOKV_MODELS_DIR / INFOKV_CORPORA_DIR as for the normal tests, INFOKV_SANITIZE_SKIP (ctest -E regex; default: the
#      runs that take 15-180 s each under the sanitizers and repeat what cheaper ones check there: the 30-turn chat of
#      Trigger.AChatAtAQuarter... (Trigger.ProtectedTokens... runs the same paths), the TinyLlama, 1B, 3B and 7B shapes
#      of the transformers comparison (Qwen2.5-0.5B and the real Qwen2.5-Coder run) and its linear and theta RoPE
#      variants (dynamic and llama3 run), and the two layer-precision decisions on both real models
#      (LayerPrecision.AutoHolds... and ...ARequestForALaterQuestion...: 185 and 255 s there; the layer-dtype
#      mechanisms run under the sanitizers in KvLayerDtype.*, the other LayerPrecision.* tests and the engine's);
#      they all run in the normal builds. INFOKV_SANITIZE_SKIP= runs all),
#      INFOKV_ALLOC_FAULT_STEP (default 3: the allocation-fault sweeps fail every third allocation, not every one;
#      1 as in the normal builds)
set -eu
. "$(dirname "$0")/sanitizer_env.sh"
build=${1:-$root/build-asan}

# -g1: line tables only (reports keep their file:line stack traces; the build takes about a third less time than -g)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DINFOKV_SANITIZE=ON \
  -DINFOKV_WITH_CUDA=OFF -DINFOKV_BUILD_TESTS=ON -DPython3_EXECUTABLE="$py" >/dev/null
cmake --build "$build" -j "$jobs"

# halt_on_error / abort: the first report fails the test that triggered it.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS UBSAN_OPTIONS
cd "$build"
skip=${INFOKV_SANITIZE_SKIP-'Trigger\.AChatAtAQuarter|LayerPrecision\.(AutoHoldsLayersAtQ8|ARequestForALaterQuestion)|Families\..*/(tinyllama_1_1b|llama_3_2_1b|llama_3_2_3b|mistral_7b|rope_linear_long|rope_theta_long)( |$)'}
INFOKV_ALLOC_FAULT_STEP=${INFOKV_ALLOC_FAULT_STEP:-3}
export INFOKV_ALLOC_FAULT_STEP
if [ -n "$skip" ]; then
  exec ctest -L "${LABELS:-unit}" -E "$skip" --output-on-failure -j "$jobs"
fi
exec ctest -L "${LABELS:-unit}" --output-on-failure -j "$jobs"
