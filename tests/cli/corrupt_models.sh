#!/bin/bash
# Feeds ~300 corrupted copies of stories260K.gguf to `infokv info` and `infokv generate`. Every run must end with an
# exit status (never a signal, never a hang); a failing run must say why on stderr. Truncations and header-field
# changes must all fail; random byte flips may land somewhere harmless (tensor data, a vocabulary letter) and then
# exit 0 — those are counted, not failed.
# usage: corrupt_models.sh INFOKV_CLI MODELS_DIR [SEED]
set -u
cli=$1
model="$2/stories260K/stories260K.gguf"
seed=${3:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
[ -x "$cli" ] || { echo "FAIL: CLI $cli not found" >&2; exit 1; }
[ -f "$model" ] || { echo "FAIL: model $model is missing (set INFOKV_MODELS_DIR)" >&2; exit 1; }
echo "seed $seed (rerun with: $0 $cli $2 $seed)"
RANDOM=$seed

tmp=$(mktemp -d "${TMPDIR:-/tmp}/infokv-corrupt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
size=$(stat -c %s "$model")

rand() { echo $(( ((RANDOM << 15) | RANDOM) % $1 )); }
# put_bytes FILE OFFSET OCTAL-ESCAPES: overwrite bytes in place
put_bytes() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

n=0
newfile() {  # newfile KIND: sets f to a fresh path whose name records the kind
  n=$((n + 1))
  f="$tmp/c$(printf %03d $n)_$1.gguf"
}

# 1. Truncations (must fail): every byte of the 24-byte header, then spread over the file, and just short of the end.
for len in $(seq 0 24) 25 31 32 33 40 47 48 64 100 255 256 1000 4095 4096; do
  newfile trunc; head -c "$len" "$model" >"$f"
done
for i in $(seq 1 100); do
  newfile trunc; head -c "$(rand "$size")" "$model" >"$f"
done
for d in 1 2 3 4 7 8 31 32 33 64; do
  newfile trunc; head -c $((size - d)) "$model" >"$f"
done

# 2. Header fields (must fail): magic, version, counts, the first key's length, the first key's type.
hdr() { newfile header; cp "$model" "$f"; put_bytes "$f" "$1" "$2"; }
hdr 0 'X';  hdr 0 'gguf'; hdr 3 '\000'; hdr 0 '\000\000\000\000'
for v in '\000' '\001' '\004' '\005' '\377'; do hdr 4 "$v\000\000\000"; done
hdr 7 '\200'
# tensor count (offset 8) and metadata count (offset 16): zero, huge, all ones, and off by one
hdr 8 '\000\000\000\000\000\000\000\000'
hdr 8 '\377\377\377\377\377\377\377\377'
hdr 8 '\000\000\000\000\000\000\000\200'
hdr 8 '\061'; hdr 8 '\057'; hdr 8 '\377\377\377\000'
hdr 16 '\377\377\377\377\377\377\377\377'
hdr 16 '\000\000\000\000\000\000\000\200'
hdr 16 '\000\000\000\000\000\000\000\000'
hdr 16 '\377\377\000\000'
# first key: its length (offset 24), a length running past the file, its bytes' type field
hdr 24 '\377\377\377\377\377\377\377\377'
hdr 24 '\000\000\000\000\000\000\000\200'
hdr 24 '\000\000\000\000\001\000\000\000'
hdr 24 '\000\000\020\000'
first_key_len=$(od -An -j24 -N8 -tu8 "$model" | tr -d ' ')
type_at=$((32 + first_key_len))
for t in '\015' '\377' '\000' '\007' '\010'; do hdr "$type_at" "$t\000\000\000"; done
hdr "$type_at" '\014\000\000\000'  # (the first key is an array: 9 would change nothing)

# 3. Random flips: half in the first 16 KiB (metadata and tensor infos), half anywhere. May stay valid.
for i in $(seq 1 120); do
  newfile flip; cp "$model" "$f"
  k=$((1 + RANDOM % 6))
  for j in $(seq 1 $k); do
    if [ $((i % 2)) -eq 0 ]; then at=$(rand 16384); else at=$(rand "$size"); fi
    put_bytes "$f" "$at" "\\$(printf %03o $((RANDOM % 256)))"
  done
done

fail=0; flip_ok=0; flip_fail=0; must_fail=0
run_one() {  # run_one FILE KIND ARGS...
  local f=$1 k=$2; shift 2
  timeout 60 "$cli" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local base; base=$(basename "$f")
  if [ $rc -eq 124 ]; then echo "FAIL $base: '$1' timed out (hang)"; fail=$((fail + 1)); return; fi
  if [ $rc -gt 128 ]; then echo "FAIL $base: '$1' killed by signal $((rc - 128))"; cat "$tmp/err"; fail=$((fail + 1)); return; fi
  if [ $rc -eq 0 ]; then
    if [ "$k" = flip ]; then flip_ok=$((flip_ok + 1)); else echo "FAIL $base ($k): '$1' exited 0"; fail=$((fail + 1)); fi
    return
  fi
  if [ ! -s "$tmp/err" ]; then echo "FAIL $base: '$1' exited $rc with nothing on stderr"; fail=$((fail + 1)); return; fi
  if [ "$k" = flip ]; then flip_fail=$((flip_fail + 1)); else must_fail=$((must_fail + 1)); fi
}

for f in "$tmp"/c*.gguf; do
  k=${f##*_}; k=${k%.gguf}
  run_one "$f" "$k" info --model "$f"
  run_one "$f" "$k" generate --model "$f" --prompt hi --max-tokens 4
done
total=$(ls "$tmp"/c*.gguf | wc -l)
echo "files: $total; structural corruptions failing cleanly: $must_fail runs;" \
     "flips: $flip_fail runs failed cleanly, $flip_ok runs still valid (exit 0); problems: $fail"
example=$(ls "$tmp"/c*_trunc.gguf | sed -n 30p)
"$cli" info --model "$example" 2>&1 | head -n 1
[ "$fail" -eq 0 ] && [ "$total" -ge 250 ]
