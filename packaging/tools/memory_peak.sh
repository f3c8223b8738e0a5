#!/usr/bin/env bash
# Peak RSS of `infokv generate` with the full cache against compressed caches, on a long prompt: what the memory
# manager promises (a compressed run's peak below the full run's by most of the KV bytes it saved).
# Usage: packaging/tools/memory_peak.sh [INFOKV_BINARY] [MODEL] [PROMPT_CHARS] [MAX_TOKENS]
#   defaults: build/infokv, smollm2, 15500 characters of Emma (about 3,600 SmolLM2 tokens), 512 generated.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${1:-$ROOT/build/infokv}"
MODEL="${2:-smollm2}"
CHARS="${3:-15500}"
GEN="${4:-512}"
CORPUS="${INFOKV_CORPORA_DIR:-$ROOT/../shared/corpora}/emma.txt"
PROMPT="$(python3 -c "import sys; t=open(sys.argv[1]).read(); print(t[20000:20000+int(sys.argv[2])])" "$CORPUS" "$CHARS")"
THREADS="${THREADS:-2}"
printf '| run | prompt tokens | generated | KV bytes at end | peak RSS (time -v) | peak RSS (self) | prefill tok/s | decode tok/s |\n|---|---|---|---|---|---|---|---|\n'
run() {  # label, extra args...
  local label="$1"; shift
  local out err
  out=$(mktemp); err=$(mktemp)
  /usr/bin/time -v "$BIN" generate --model "$MODEL" --prompt "$PROMPT" --max-tokens "$GEN" --temperature 0 \
    --threads "$THREADS" --json "$@" >"$out" 2>"$err"
  python3 - "$label" "$out" "$err" <<'PY'
import json, re, sys
label, out, err = sys.argv[1:4]
d = json.load(open(out))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(err).read()).group(1))
print(f"| {label} | {len(d['prompt_tokens'])} | {len(d['tokens'])} | {d['kv']['bytes']/2**20:.1f} MiB | "
      f"{rss/1024:.1f} MiB | {d['memory']['peak_rss_bytes']/2**20:.1f} MiB | "
      f"{d['timings']['prefill_tokens_per_second']:.1f} | {d['timings']['decode_tokens_per_second']:.1f} |")
PY
  rm -f "$out" "$err"
}
run "full f16"
run "infokv 25%" --policy infokv --budget 0.25
run "snapkv 25%" --policy snapkv --budget 0.25
