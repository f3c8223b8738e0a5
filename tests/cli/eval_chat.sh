#!/bin/bash
# infokv eval-chat end to end on SmolLM2: two cases of the project's case set, one policy, one budget, every
# protection mode; the JSON has one row per policy x budget x protect with the documented fields, and a bad case file
# is refused with exit 2 and a message naming the line.
# usage: eval_chat.sh INFOKV_CLI SMOLLM2_GGUF CASES_JSONL CORPORA_DIR
set -u
cli=$1 model=$2 cases=$3 corpora=$4
[ -f "$model" ] || { echo "FAIL: SmolLM2 $model missing (packaging/fetch_models.sh)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/infokv-evalchat.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
grep -m 1 '"kind": "keyword"' "$cases" >"$tmp/c.jsonl"
grep -m 1 '"probe": "leak"' "$cases" >>"$tmp/c.jsonl"
"$cli" eval-chat --model "$model" --cases "$tmp/c.jsonl" --policies snapkv --budgets 0.5 --protect none,system,fair \
  --history-tokens 96 --filler "$corpora/emma.txt" --max-answer 8 --threads 2 --json --plot "$tmp/p.svg" >"$tmp/out.json" 2>"$tmp/err.txt" ||
  { echo "FAIL: eval-chat exited $?"; cat "$tmp/err.txt"; exit 1; }
python3 - "$tmp/out.json" <<'PY' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 3, rows
assert [r["protect"] for r in rows] == ["none", "system", "fair"], rows
for r in rows:
    for k in ("policy", "budget", "protect", "kl", "top1", "exact", "compliance", "compliance_full", "leak", "leak_full", "kv_bytes"):
        assert k in r, (k, r)
    assert r["policy"] == "snapkv" and r["budget"] == 0.5 and r["cases"] == 2 and r["checked"] == 1 and r["leak_probes"] == 1
    assert r["kl"] >= 0 and 0 <= r["top1"] <= 1 and 0 <= r["exact"] <= 1 and r["kv_bytes"] > 0
print("ok:", [(r["protect"], round(r["kl"], 4)) for r in rows])
PY
grep -q "<svg" "$tmp/p.svg" || { echo "FAIL: no plot"; exit 1; }
echo '{"system": "x"}' >"$tmp/bad.jsonl"
"$cli" eval-chat --model "$model" --cases "$tmp/bad.jsonl" --policies snapkv 2>"$tmp/bad.txt"
rc=$?
[ $rc = 2 ] && grep -q 'bad.jsonl:1: no "user"' "$tmp/bad.txt" || { echo "FAIL: bad case: exit $rc"; cat "$tmp/bad.txt"; exit 1; }
echo ok
