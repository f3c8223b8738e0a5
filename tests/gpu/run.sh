#!/usr/bin/env bash
# GPU check for infokv (issue 8). On a machine with an NVIDIA GPU: builds with CUDA for this card only, runs the
# `gpu` tests (kernel parity with the CPU twins), the GPU kernel-pipeline benchmark and the logits comparison with
# transformers' LlamaForCausalLM from the same random weights, then prints a summary. Meant to finish in under
# 10 minutes on a data-centre card. On a machine without a GPU it still builds and says plainly that nothing ran
# on a GPU.
#
#   tests/gpu/run.sh [BUILD_DIR]        (env: CUDA_ARCH to override the detected architecture, JOBS, PRESET)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
PRESET=${PRESET:-llama-3.2-1b}
# A Python with torch + transformers if there is one, else one with NumPy (the reference then runs in NumPy).
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3 /usr/bin/python3 python; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import numpy, torch, transformers' 2>/dev/null; then PY=$c; break; fi
  done
fi
if [ -z "$PY" ]; then
  for c in python3 /usr/bin/python3 python; do
    command -v "$c" >/dev/null 2>&1 && "$c" -c 'import numpy' 2>/dev/null && { PY=$c; break; }
  done
fi
PY=${PY:-python3}
LOG="$BUILD/gpu-check"
T0=$(date +%s)
say() { printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - T0 )); }
summary=()

say "device"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
  CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
  ARCH=${CUDA_ARCH:-${CC}-real}
  HAVE_GPU=1
else
  echo "no NVIDIA GPU visible (nvidia-smi missing or failing): nothing below runs on a GPU"
  ARCH=${CUDA_ARCH:-75-virtual;80-real}
  HAVE_GPU=0
fi

mkdir -p "$BUILD"
say "configure + build (CUDA architectures: $ARCH)"
export PATH=/usr/local/cuda/bin:$PATH
GEN=Ninja; command -v ninja >/dev/null 2>&1 || GEN="Unix Makefiles"
command -v cmake >/dev/null 2>&1 || { echo "cmake is not installed: cannot build"; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DINFOKV_WITH_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" -DPython3_EXECUTABLE="$(command -v "$PY")" >"$LOG.configure.log" 2>&1 \
  || { tail -30 "$LOG.configure.log"; echo "configure FAILED (GoogleTest missing? install libgtest-dev, or see the log)"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" >"$LOG.build.log" 2>&1 || { tail -40 "$LOG.build.log"; echo "build FAILED"; exit 1; }
echo "built in $BUILD"
if readelf -d "$BUILD/libinfokv.so" | grep NEEDED | grep -Eiq 'cuda|cublas'; then
  echo "FAIL: libinfokv.so needs a CUDA library at load time"; summary+=("load-time CUDA dependency: FAIL")
else
  echo "libinfokv.so NEEDED: $(readelf -d "$BUILD/libinfokv.so" | awk '/NEEDED/{print $5}' | tr -d '[]' | tr '\n' ' ')"
  summary+=("no CUDA library among libinfokv.so's NEEDED: ok")
fi
"$BUILD/infokv" info --json | "$PY" -c 'import json,sys; print("infokv info devices:", json.dumps(json.load(sys.stdin)["devices"]))' \
  2>/dev/null || "$BUILD/infokv" info | grep devices

say "ctest -L gpu (kernel parity with the CPU twins)"
if (cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 300 >"$LOG.gpu-tests.log" 2>&1); then gpu_ok=pass; else gpu_ok=FAIL; fi
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$LOG.gpu-tests.log" | head -40
skipped=$(grep -c "(Skipped)" "$LOG.gpu-tests.log" || true)
summary+=("gpu tests: $gpu_ok ($skipped skipped; log $LOG.gpu-tests.log)")

say "CPU tests (ctest -L unit)"
if (cd "$BUILD" && ctest -L unit --timeout 300 >"$LOG.unit-tests.log" 2>&1); then unit_ok=pass; else unit_ok=FAIL; fi
grep -E "tests passed|tests failed" "$LOG.unit-tests.log"
summary+=("unit tests: $unit_ok")

say "GPU kernel-pipeline benchmark ($PRESET, f16)"
if [ "$HAVE_GPU" = 1 ]; then
  timeout 300 "$BUILD/tests/infokv_gpu_bench" --preset "$PRESET" --iters 5 | tee "$LOG.bench.txt"
  summary+=("benchmark: table above (kernel pipeline, not an end-to-end Session run)")
else
  "$BUILD/tests/infokv_gpu_bench" --preset "$PRESET"
  summary+=("benchmark: not run (no GPU)")
fi

say "end-to-end Session decode (infokv generate, synthetic $PRESET f16: full cache and InfoKV at 25%)"
E2E="$BUILD/synth-$PRESET-f16.gguf"
if [ "$HAVE_GPU" = 1 ]; then
  "$BUILD/infokv" synth --preset "$PRESET" --dtype f16 --seed 1 --quiet --out "$E2E"
  PROMPT=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 200))  # about 2K tokens
  for run in "cuda none" "cuda infokv" "cpu none"; do
    set -- $run
    dev=$1; pol=$2; n=128; [ "$dev" = cpu ] && n=8
    extra=""; [ "$pol" != none ] && extra="--policy $pol --budget 0.25 --compress-interval 64"
    if timeout 240 "$BUILD/infokv" generate --model "$E2E" --device "$dev" $extra --prompt "$PROMPT" --max-tokens $n --json \
        >"$LOG.e2e-$dev-$pol.json" 2>"$LOG.e2e-$dev-$pol.err"; then
      "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); t=j["timings"]; k=j["kv"]; print("%-5s %-7s prefill %6d tok %10.1f tok/s   decode %4d tok %8.1f tok/s   kv %8.1f MiB" % (sys.argv[2], sys.argv[3], t["prefill_tokens"], t["prefill_tokens_per_second"], t["decode_tokens"], t["decode_tokens_per_second"], k["bytes"] / 2**20))' \
        "$LOG.e2e-$dev-$pol.json" "$dev" "$pol"
    else
      echo "$dev $pol: generate FAILED: $(tail -2 "$LOG.e2e-$dev-$pol.err")"; summary+=("end-to-end $dev $pol generate: FAIL")
    fi
  done
  rm -f "$E2E"
else
  echo "not run (no GPU)"
fi

say "logits vs transformers (same random weights)"
SYN="$BUILD/synth-smollm2-135m-f32.gguf"
"$BUILD/infokv" synth --preset smollm2-135m --dtype f32 --seed 1 --quiet --out "$SYN"
if "$PY" -c 'import torch, transformers' 2>/dev/null; then ref=transformers; else ref=numpy; echo "torch/transformers not importable with $PY: using the NumPy reference"; fi
cmp_status=pass
devices="cpu"; [ "$HAVE_GPU" = 1 ] && devices="cpu cuda"
for m in "$ROOT/../shared/models/stories260K/stories260K.gguf" "$SYN"; do
  [ -f "$m" ] || { echo "skip $m (missing)"; continue; }
  for dev in $devices; do
    timeout 300 "$PY" "$ROOT/tests/gpu/compare_transformers.py" --lib "$BUILD/libinfokv.so" --model "$m" --tokens 32 \
      --reference "$ref" --device "$dev" || cmp_status=FAIL
  done
done
summary+=("logits vs $ref reference (infokv on: $devices): $cmp_status")

say "summary"
for s in "${summary[@]}"; do echo "  - $s"; done
[ "$HAVE_GPU" = 1 ] || echo "  - NOTHING RAN ON A GPU on this machine."
echo "  total $(( $(date +%s) - T0 )) s"
[ "$gpu_ok" = pass ] && [ "$unit_ok" = pass ] && [ "$cmp_status" = pass ]
