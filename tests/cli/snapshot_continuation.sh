#!/usr/bin/env bash
# Exact continuation across processes: `generate --max-tokens N --save-snapshot F` then, in a new process,
# `generate --load-snapshot F --max-tokens M` must print the same tokens as one run of N + M tokens — with and
# without compression, greedy and seeded. Then damaged copies of a snapshot must each end with a non-zero exit
# status and a message, never a signal. Also checks --config with a flag overriding it.
# usage: snapshot_continuation.sh INFOKV_BINARY MODELS_DIR
set -u
BIN=$1
MODEL=$2/stories260K/stories260K.gguf
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

tokens() { "$PY" -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$1"; }

for pol in "" "--policy infokv --budget 0.25 --compress-interval 6" "--policy h2o --budget 0.5 --compress-interval 4"; do
  for samp in "--temperature 0" "--temperature 0.9 --seed 17 --repeat-penalty 1.1"; do
    # shellcheck disable=SC2086
    "$BIN" generate --model "$MODEL" --prompt "$PROMPT" --max-tokens 30 $samp $pol --json > "$TMP/full.json" || { echo "FAIL: full run ($pol $samp)"; fail=1; continue; }
    # shellcheck disable=SC2086
    "$BIN" generate --model "$MODEL" --prompt "$PROMPT" --max-tokens 12 $samp $pol --json --save-snapshot "$TMP/s.ikvs" > "$TMP/a.json" || { echo "FAIL: first half ($pol $samp)"; fail=1; continue; }
    "$BIN" generate --model "$MODEL" --load-snapshot "$TMP/s.ikvs" --max-tokens 18 --json > "$TMP/b.json" || { echo "FAIL: second half ($pol $samp)"; fail=1; continue; }
    want=$(tokens "$TMP/full.json")
    got="$(tokens "$TMP/a.json") $(tokens "$TMP/b.json")"
    if [ "$want" != "$got" ]; then
      echo "FAIL: continuation differs ($pol $samp)"; echo " want: $want"; echo " got:  $got"; fail=1
    else
      echo "ok: continuation ($pol $samp)"
    fi
  done
done

# inspect works without the model and reports the kept counts
"$BIN" snapshot inspect "$TMP/s.ikvs" --json > "$TMP/inspect.json" || { echo "FAIL: inspect"; fail=1; }
grep -q '"kept_per_layer"' "$TMP/inspect.json" || { echo "FAIL: inspect output"; fail=1; }

# --config with a flag overriding it: the config says temperature 0.9 / seed 5, the flag forces greedy
cat > "$TMP/c.json" <<JSON
{"model_path": "$MODEL", "sampler": {"temperature": 0.9, "seed": 5}, "compression": {"policy": "snapkv", "budget_fraction": 0.5}}
JSON
"$BIN" generate --config "$TMP/c.json" --prompt "$PROMPT" --max-tokens 8 --temperature 0 --json > "$TMP/c1.json" || { echo "FAIL: --config"; fail=1; }
"$BIN" generate --model "$MODEL" --policy snapkv --budget 0.5 --prompt "$PROMPT" --max-tokens 8 --temperature 0 --json > "$TMP/c2.json"
[ "$(tokens "$TMP/c1.json")" = "$(tokens "$TMP/c2.json")" ] || { echo "FAIL: --config with override differs from flags"; fail=1; }
echo '{"threads": 2, "bogus": 1}' > "$TMP/bad.json"
if "$BIN" generate --config "$TMP/bad.json" --prompt x --max-tokens 1 2> "$TMP/err.txt"; then echo "FAIL: bad config accepted"; fail=1; fi
grep -q bogus "$TMP/err.txt" || { echo "FAIL: bad config message does not name the field"; fail=1; }

# Damaged snapshots: flipped bytes across the file and truncations; each must exit 1 or 2 with a message.
"$PY" - "$TMP/s.ikvs" "$TMP" <<'PYEOF'
import sys, random
data = open(sys.argv[1], 'rb').read()
out = sys.argv[2]
rng = random.Random(5)
n = 0
for i in range(0, len(data), max(1, len(data) // 150)):
    b = bytearray(data); b[i] ^= 1 << (i % 8)
    open(f"{out}/bad{n}.ikvs", "wb").write(b); n += 1
for _ in range(60):
    open(f"{out}/bad{n}.ikvs", "wb").write(data[:rng.randrange(len(data))]); n += 1
open(f"{out}/bad{n}.ikvs", "wb").write(data + b"\0"); n += 1
open(f"{out}/count", "w").write(str(n))
PYEOF
n=$(cat "$TMP/count")
bad=0
for ((i = 0; i < n; i++)); do
  "$BIN" generate --model "$MODEL" --load-snapshot "$TMP/bad$i.ikvs" --max-tokens 2 > /dev/null 2> "$TMP/err.txt"
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ ! -s "$TMP/err.txt" ]; then echo "FAIL: damaged snapshot $i: exit $rc"; bad=1; fi
  "$BIN" snapshot inspect "$TMP/bad$i.ikvs" > /dev/null 2>&1
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then echo "FAIL: inspect of damaged snapshot $i: exit $rc"; bad=1; fi
done
[ $bad -eq 0 ] && echo "ok: $n damaged snapshots refused" || fail=1
exit $fail
