#!/usr/bin/env bash
# The demo: installs what is missing, builds infokv (CPU), generates with a compressed cache on the default model
# (policy auto: the runtime chooses, per layer, what ranks the tokens and how the budget is spread) and shows what
# compression saved (KV bytes) and what it cost (KL to the full cache, top-1 agreement) against fixed policies.
# Usage: bash packaging/demo.sh [PROMPT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash packaging/setup.sh
SHARED="${INFOKV_SHARED_DIR:-$ROOT/../shared}"
export INFOKV_MODELS_DIR="${INFOKV_MODELS_DIR:-$SHARED/models}"
MODEL="${INFOKV_MODEL:-$INFOKV_MODELS_DIR/stories260K/stories260K.gguf}"
TEXT="${INFOKV_DEMO_TEXT:-$SHARED/corpora/sample_story.txt}"
[ -f "$MODEL" ] || { echo "demo: no model at $MODEL (see README: Models)" >&2; exit 1; }
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFOKV_WITH_CUDA=OFF -DINFOKV_BUILD_TESTS=OFF >/dev/null
cmake --build build-demo --target infokv_cli >/dev/null
BIN=build-demo/infokv
PROMPT="${1:-Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball.}"

echo "== generate, full cache"
"$BIN" generate --model "$MODEL" --prompt "$PROMPT" --temperature 0 --max-tokens 120
echo
echo "== generate, auto-compressed cache at 25% (compressed after the prompt, then whenever it holds more than"
echo "   its budget plus a slack of a quarter of it: no interval to set)"
"$BIN" generate --model "$MODEL" --prompt "$PROMPT" --temperature 0 --max-tokens 120 \
  --policy auto --budget 0.25
"$BIN" generate --model "$MODEL" --prompt "$PROMPT" --temperature 0 --max-tokens 120 \
  --policy auto --budget 0.25 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["compression"]; b = c["kv_before"]; a = c["kv_after"]; e = d["kv"]
print("   KV after the prompt: %d bytes for %d tokens; after compression: %d bytes (%.0f%%), kept per layer %s"
      % (b["bytes"], b["logical_length"], a["bytes"], 100.0 * a["bytes"] / b["bytes"], a["tokens_kept_per_layer"]))
full = e["uncompressed_bytes"]
print("   at the end: %d bytes for %d tokens, %.0f%% of the %d bytes a full cache would hold; %d compressions,"
      " held to a budget of %d + slack %d tokens per layer"
      % (e["bytes"], e["logical_length"], 100.0 * e["bytes"] / full, full, c["compressions"], e["budget_tokens"],
         e["slack_tokens"]))
r = c["auto"]
if r:
    from collections import Counter
    ev = Counter(l["evidence"] for l in r["layers"])
    print("   auto chose, at its latest compression: per-layer budgets %s, evidence %s, mean proxy loss %.4f"
          % ([l["budget"] for l in r["layers"]], dict(ev), r["loss"]))'

echo
echo "== what it costs: next-token distributions against the full cache (infokv eval, prefix 256, continuation 64)"
CORPUS="$SHARED/corpora/prideandprejudice.txt"
"$BIN" eval --model "$MODEL" --file "$CORPUS" --prefix 256 --continuation 64 --windows 4 --offset 2000 \
  --policies auto,infokv,snapkv,h2o,tova,streaming --budgets 0.5,0.25
