#!/usr/bin/env bash
# Stream throughput, cairn against redis-server (appendfsync everysec), with
# redis-benchmark custom commands (issue 4's benchmark):
#   XADD at pipeline 16, and XRANGE of a 100-entry stream at pipeline 16.
# Usage: benches/streams.sh            (builds nothing: run `cargo build --release` first)
# Knobs: N (requests per run, default 200000), REPS (best of, default 3), CLIENTS (50),
#        CAIRN_BIN (the binary to measure, default target/release/cairn).
set -euo pipefail
N=${N:-200000}
REPS=${REPS:-3}
CLIENTS=${CLIENTS:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
REDIS_PORT=${REDIS_PORT:-7391}
CAIRN_PORT=${CAIRN_PORT:-7392}
cleanup() {
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  [[ -n "${CAIRN_PID:-}" ]] && kill "$CAIRN_PID" 2>/dev/null && wait "$CAIRN_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --save "" \
  --appendonly yes --appendfsync everysec --daemonize yes --logfile "$WORK/redis.log"
mkdir -p "$WORK/cairn"
"${CAIRN_BIN:-$ROOT/target/release/cairn}" --port "$CAIRN_PORT" --dir "$WORK/cairn" --durability everysec \
  >"$WORK/cairn.log" 2>&1 &
CAIRN_PID=$!
for p in "$REDIS_PORT" "$CAIRN_PORT"; do
  for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

# Best rps of REPS runs of one command against one port.
best() {
  local port=$1; shift
  local top=0
  for _ in $(seq "$REPS"); do
    local rps
    rps=$(redis-benchmark -p "$port" -c "$CLIENTS" -n "$N" -P 16 -q "$@" 2>/dev/null \
      | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
    rps=${rps%.*}
    rps=${rps:-0}
    (( rps > top )) && top=$rps
  done
  echo "$top"
}

printf '%-22s %12s %12s %8s\n' test redis cairn ratio
for port in "$REDIS_PORT" "$CAIRN_PORT"; do
  redis-cli -p "$port" del r100 >/dev/null
  for i in $(seq 1 100); do echo "XADD r100 $i-0 field value-$i"; done | redis-cli -p "$port" >/dev/null
done
run() {
  local name=$1; shift
  local r c
  r=$(best "$REDIS_PORT" "$@")
  c=$(best "$CAIRN_PORT" "$@")
  printf '%-22s %12s %12s %8s\n' "$name" "$r" "$c" "$(awk -v c="$c" -v r="$r" 'BEGIN{printf "%.2f", c/r}')"
}
run "xadd (1 key) P16" XADD bench '*' field value
run "xadd (1000 keys) P16" -r 1000 XADD 'bench:__rand_int__' '*' field value
run "xrange 100 P16" XRANGE r100 - +
