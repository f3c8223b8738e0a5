#!/bin/bash
# infokv bench on stories260K: llama-bench's short options, one JSON row per test with llama-bench's field names, a
# compressed-depth row holding fewer KV bytes than the full one, and bad lists refused with exit 2.
# usage: bench.sh INFOKV_CLI MODELS_DIR
set -u
cli=$1 model="$2/stories260K/stories260K.gguf"
out=$("$cli" bench -m "$model" -p 32 -n 8 -t 1,2 -r 2 -d 0,256 --policy none,snapkv --budget 0.25 -o json) ||
  { echo "FAIL: bench exited $?"; exit 1; }
python3 - "$out" <<'PY' || exit 1
import json, sys
rows = json.loads(sys.argv[1])
# threads 2 x (none + snapkv@0.25) x depths 2 x (pp32, tg8) = 16 rows
assert len(rows) == 16, len(rows)
for r in rows:
    for k in ("model_filename", "n_prompt", "n_gen", "n_threads", "avg_ts", "stddev_ts", "type_k", "samples_ts", "policy", "kv_bytes"):
        assert k in r, (k, r)
    assert r["avg_ts"] > 0 and len(r["samples_ts"]) == 2 and (r["n_prompt"] == 0) != (r["n_gen"] == 0)
full = [r for r in rows if r["n_depth"] == 256 and r["policy"] == "none"]
comp = [r for r in rows if r["n_depth"] == 256 and r["policy"] == "snapkv"]
assert full and comp and max(r["kv_bytes"] for r in comp) < min(r["kv_bytes"] for r in full)
print("ok:", len(rows), "rows")
PY
"$cli" bench -m "$model" -p 16 -n 4 -r 1 | grep -q "| pp16 |" || { echo "FAIL: no markdown table"; exit 1; }
"$cli" bench -m "$model" -p x 2>/dev/null; [ $? = 2 ] || { echo "FAIL: -p x accepted"; exit 1; }
"$cli" bench -m "$model" -ctk q8 2>/dev/null; [ $? = 2 ] || { echo "FAIL: -ctk q8 accepted"; exit 1; }
echo ok
