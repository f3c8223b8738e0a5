#!/bin/bash
# infokv eval-retrieval (issue 39): the protocol runs end to end and reports what it held; on a model that
# follows instructions (Qwen2.5-Coder-0.5B-Instruct) the full cache finds a single needle, so the tasks it generates
# are answerable and a compressed cache's misses are the compression's; the needles' tokens are found (needles_kept).
# Also: the same seed gives the same result, and bad options are refused.
# usage: eval_retrieval.sh INFOKV_CLI QWEN_GGUF
set -u
cli=$1
qwen=${2:-}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" eval-retrieval --context 256 --cases 2 --policies snapkv,auto --budgets 0.5,0.25 --json >"$tmp/a.json" 2>/dev/null \
  || { echo "FAIL: eval-retrieval on stories260K"; fail=1; }
"$cli" eval-retrieval --context 256 --cases 2 --policies snapkv,auto --budgets 0.5,0.25 --json >"$tmp/b.json" 2>/dev/null
python3 - "$tmp/a.json" "$tmp/b.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [r["policy"] for r in a] == ["full", "snapkv", "snapkv", "auto", "auto"], a
assert all(r["cases"] == 10 and set(r["tasks"]) == {"niah_single", "niah_multikey", "niah_multivalue",
           "niah_multiquery", "vt"} for r in a), a
for r in a[1:]:  # bytes held after compression follow the budget (whole blocks)
    ratio = r["kv_bytes"] / r["kv_bytes_full"]
    assert abs(ratio - r["budget"]) < 0.1, (r["policy"], r["budget"], ratio)
    assert r["compress_seconds"] > 0, r
assert a[0]["question"] == "-" and all(r["question"] == "later" for r in a[1:]), a  # the default
# The needles' tokens are found in the context (a SentencePiece vocabulary here): the full cache holds them all,
# a compressed one part of them.
assert a[0]["needles_kept"] == 1.0, a[0]
assert all(0 <= r["needles_kept"] < 1 for r in a[1:]), a
drop = lambda rows: [{k: v for k, v in r.items() if k != "compress_seconds"} for r in rows]
assert drop(a) == drop(b), "the same seed must give the same cases and answers"
PY
"$cli" eval-retrieval --context 256 --cases 1 --policies snapkv,streaming --budgets 0.5 --question later --json \
  >"$tmp/l.json" 2>/dev/null || { echo "FAIL: --question later"; fail=1; }
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert [x["question"] for x in r] == ["-", "later", "next"], r' \
  "$tmp/l.json" || { echo "FAIL: snapkv serves --question later, streaming reads no queries: $(cat "$tmp/l.json")"; fail=1; }
for bad in "--query sideways" "--tasks niah_single,cwe" "--budgets 0" "--policies nope" "--question soon"; do
  # shellcheck disable=SC2086
  if "$cli" eval-retrieval --context 256 --cases 1 $bad >/dev/null 2>&1; then echo "FAIL: accepted $bad"; fail=1; fi
done
if [ ! -f "$qwen" ]; then
  echo "FAIL: Qwen2.5-Coder-0.5B GGUF missing: '$qwen' (packaging/fetch_models.sh --model qwen2.5-coder-0.5b)"; fail=1
else
  "$cli" eval-retrieval --model "$qwen" --tasks niah_single --context 512 --cases 2 --policies streaming \
    --budgets 0.5 --json --cases-out "$tmp/q.jsonl" >"$tmp/q.json" 2>/dev/null || { echo "FAIL: eval-retrieval on Qwen"; fail=1; }
  # --cases-out: one line a case with the tokens both runs saw and every answer; the context turn opens with Qwen2.5's
  # default system turn (its template writes one when the app gives none), protected by default.
  python3 - "$tmp/q.json" "$tmp/q.jsonl" <<'PY' || { echo "FAIL: --cases-out"; fail=1; }
import json, sys
rows = json.load(open(sys.argv[1]))
cases = [json.loads(l) for l in open(sys.argv[2])]
assert len(cases) == 2 and [c["task"] for c in cases] == ["niah_single"] * 2, cases
system = [151644, 8948, 198, 2610, 525, 1207, 16948, 11, 3465, 553, 54364, 14817, 13, 1446, 525, 264, 10950, 17847, 13,
          151645, 198]
for c in cases:
    assert c["context_ids"][:21] == system, c["context_ids"][:24]
    assert c["protected"][:2] == [0, 21], c["protected"]
    assert c["after_ids"][:3] == [151644, 872, 198] and len(c["after_ids"]) > 10, c["after_ids"]
    assert len(c["expected"]) == 1 and c["expected"][0] in c["answers"]["full"]["answer"], c
    assert set(c["answers"]) == {"full", "streaming@0.5"}, c["answers"]
    assert all(0 < p < len(c["context_ids"]) for p in c["needle_positions"]), c["needle_positions"]
for key, row in (("full", rows[0]), ("streaming@0.5", rows[1])):
    assert abs(sum(c["answers"][key]["score"] for c in cases) / 2 - row["accuracy"]) < 1e-9, (key, row)
PY
  if "$cli" eval-retrieval --model "$qwen" --context 256 --cases 1 --policies streaming --cases-out "$tmp/no/such/dir/x" \
      >/dev/null 2>&1; then echo "FAIL: an unwritable --cases-out was accepted"; fail=1; fi
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r[0]["policy"] == "full" and r[0]["accuracy"] == 1.0 and r[0]["needles_kept"] == 1.0 and 0 <= r[1]["needles_kept"] < 1, r' \
    "$tmp/q.json" || { echo "FAIL: the full cache misses a needle: $(cat "$tmp/q.json")"; fail=1; }
fi
[ $fail = 0 ] && echo "ok"
exit $fail
