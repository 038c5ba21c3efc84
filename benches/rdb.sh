#!/usr/bin/env bash
# RDB import and BGSAVE (issue 13's benchmark):
#   1. redis-server is filled with KEYS string keys of SIZE random bytes
#      (incompressible, so the file is as big as the data) and SAVEs;
#   2. `cairn --import` loads that file: MB/s and peak RSS (/usr/bin/time);
#   3. cairn serves the imported data; a GET load (redis-benchmark, random
#      keys, pipeline 1) runs alone, then again while BGSAVE writes the
#      whole data set: BGSAVE's time and the GET p50/p99 of both runs.
# Usage: benches/rdb.sh   (run `cargo build --release` first)
# Knobs: KEYS (default 1000000), SIZE (bytes per value, default 1000),
#        CLIENTS (50), CAIRN_BIN (default target/release/cairn).
set -euo pipefail
KEYS=${KEYS:-1000000}
SIZE=${SIZE:-1000}
CLIENTS=${CLIENTS:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CAIRN_BIN:-$ROOT/target/release/cairn}
WORK=$(mktemp -d)
REDIS_PORT=${REDIS_PORT:-7393}
CAIRN_PORT=${CAIRN_PORT:-7394}
cleanup() {
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  [[ -n "${CAIRN_PID:-}" ]] && kill "$CAIRN_PID" 2>/dev/null && wait "$CAIRN_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (Debian package time)"; exit 1; }

mkdir -p "$WORK/redis" "$WORK/cairn"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" --save "" \
  --appendonly no --daemonize yes --logfile "$WORK/redis.log"
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "filling redis-server with $KEYS keys of $SIZE random bytes"
python3 - "$REDIS_PORT" "$KEYS" "$SIZE" <<'PY'
import os, socket, sys
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
batch, pending = 1000, 0
buf = []
def drain(k):
    # Every reply is "+OK\r\n".
    want, got = 5 * k, b""
    while len(got) < want:
        got += s.recv(want - len(got))
for i in range(n):
    key = b"key:%d" % i
    val = os.urandom(size)
    buf.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(val), val))
    if len(buf) == batch:
        s.sendall(b"".join(buf)); drain(len(buf)); buf = []
if buf:
    s.sendall(b"".join(buf)); drain(len(buf))
PY
redis-cli -p "$REDIS_PORT" save >/dev/null
FILE="$WORK/redis/dump.rdb"
BYTES=$(stat -c %s "$FILE")
redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
echo "RDB file: $BYTES bytes"

/usr/bin/time -v "$BIN" --dir "$WORK/cairn" --import "$FILE" 2>"$WORK/import.txt" >/dev/null
SECS=$(grep "Elapsed (wall clock)" "$WORK/import.txt" | awk '{print $NF}' | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
RSS=$(grep "Maximum resident set size" "$WORK/import.txt" | awk '{print $NF}')
grep "cairn: imported" "$WORK/import.txt" || true
awk -v b="$BYTES" -v s="$SECS" -v r="$RSS" 'BEGIN { printf "import: %.1f s, %.1f MB/s, peak RSS %.0f MiB\n", s, b/1e6/s, r/1024 }'

"$BIN" --port "$CAIRN_PORT" --dir "$WORK/cairn" --durability everysec >"$WORK/cairn.log" 2>&1 &
CAIRN_PID=$!
for _ in $(seq 100); do redis-cli -p "$CAIRN_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "cairn DBSIZE: $(redis-cli -p "$CAIRN_PORT" dbsize)"

get_load() {
  redis-benchmark -p "$CAIRN_PORT" -c "$CLIENTS" -n "$1" -r "$KEYS" -t get 2>/dev/null \
    | tr '\r' '\n' | grep -A4 "Summary" | tail -4
}
echo "GET alone:"
get_load 200000
echo "GET while BGSAVE runs:"
START=$(date +%s.%N)
redis-cli -p "$CAIRN_PORT" bgsave
get_load 200000 &
LOAD=$!
while redis-cli -p "$CAIRN_PORT" info persistence | grep -q "rdb_bgsave_in_progress:1"; do sleep 0.1; done
END=$(date +%s.%N)
wait "$LOAD"
awk -v a="$START" -v b="$END" 'BEGIN { printf "BGSAVE: %.1f s\n", b-a }'
echo "dump.rdb: $(stat -c %s "$WORK/cairn/dump.rdb") bytes"
