#!/usr/bin/env bash
# Time to first token of a request whose 2K-token prefix was seen before: prefilled, or started from the prefix cache
# in memory, in a directory, and in a Redis server (Debian's redis-server, started here on a free loopback port with a
# temporary directory and stopped at the end). Usage: packaging/tools/prefix_bench.sh [infokv bench --prefix options]
# e.g. --model smollm2 --threads 2. Run from the repository root after building (build/infokv).
set -euo pipefail
INFOKV=${INFOKV:-build/infokv}
SERVER=$(command -v redis-server || command -v valkey-server || true)
if [ -z "$SERVER" ]; then echo "prefix_bench: redis-server is missing (packaging/setup.sh installs it)" >&2; exit 1; fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DIR=$(mktemp -d)
"$SERVER" --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" --maxmemory 1gb \
  --maxmemory-policy allkeys-lru --loglevel warning --daemonize no > "$DIR/redis.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do
  if python3 - "$PORT" <<'PY' 2>/dev/null; then break; fi
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2)
s.sendall(b"PING\r\n")
assert s.recv(16).startswith(b"+PONG")
PY
  sleep 0.05
done
"$INFOKV" bench --prefix --redis "127.0.0.1:$PORT" "$@"
