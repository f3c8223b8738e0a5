#!/usr/bin/env bash
# infokv serve and llama.cpp's llama-server side by side under the same load (packaging/tools/serve_load.py: N
# concurrent streamed two-turn chats, greedy, each answer checked against the same request sent alone), on the same
# GGUF, threads and KV room (a pool, or llama-server's context, for 8 of these conversations; llama-server gets 8
# slots). Usage: packaging/tools/serve_vs_llamacpp.sh MODEL.gguf LLAMA_SERVER [CLIENTS] [THREADS]
# Needs build/infokv and an interpreter with `openai` (PYTHON=..., default python3). INFOKV_SERVE_ARGS: more options
# for infokv serve (e.g. "--max-prefill 0"); NO_LLAMA=1 runs infokv alone (LLAMA_SERVER is then not used: any word).
set -euo pipefail
MODEL=$1
LLAMA_SERVER=$2
CLIENTS=${3:-32}
THREADS=${4:-2}
PY=${PYTHON:-python3}
INFOKV=${INFOKV:-build/infokv}
HERE=$(cd "$(dirname "$0")" && pwd)
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 120); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.5; done; return 1; }
# One conversation: a ~260-token prompt, 48-token answers, two turns: ~400 tokens, 25 blocks of 16 in each layer.
LAYERS=$("$INFOKV" info --model "$MODEL" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["n_layer"])')
BLOCKS=$((8 * LAYERS * 26))
P1=$(free_port)
"$INFOKV" serve --model "$MODEL" --port "$P1" --threads "$THREADS" --kv-pool-blocks "$BLOCKS" --max-batch 8 \
  ${INFOKV_SERVE_ARGS:-} >/dev/null 2>&1 &
PID1=$!
trap 'kill $PID1 ${PID2:-} 2>/dev/null || true' EXIT
wait_up "$P1"
"$PY" "$HERE/serve_load.py" --base "http://127.0.0.1:$P1" --clients "$CLIENTS" --turns 2 --max-tokens 48 --check --json --label "infokv serve"
kill $PID1; wait $PID1 2>/dev/null || true
[ -n "${NO_LLAMA:-}" ] && exit 0
P2=$(free_port)
LD_LIBRARY_PATH="$(dirname "$LLAMA_SERVER"):${LD_LIBRARY_PATH:-}" "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -c 3200 -np 8 \
  --host 127.0.0.1 --port "$P2" >/dev/null 2>&1 &
PID2=$!
wait_up "$P2"
"$PY" "$HERE/serve_load.py" --base "http://127.0.0.1:$P2" --clients "$CLIENTS" --turns 2 --max-tokens 48 --check --json --label "llama-server"
