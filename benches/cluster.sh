#!/usr/bin/env bash
# Cluster benchmarks (issue 14), cairn against Redis 7.0, on loopback:
#  1. redis-benchmark --cluster (SET, GET, INCR; -P $PIPELINE -c $CLIENTS)
#     against a 3-node cairn cluster (durability everysec, topology in a
#     local etcd) and a 3-node redis-server cluster (appendfsync everysec);
#  2. the time `redis-cli --cluster reshard` takes to move one slot holding
#     $KEYS keys, with the p99 of a GET load running meanwhile (short
#     redis-benchmark runs back to back: the worst and the median p99);
#  3. the same for a slot holding one hash of $BIG fields, with the longest
#     wait of a client reading another key of the source node meanwhile.
#
# Usage: benches/cluster.sh [path/to/cairn]     (default target/release/cairn)
# Env:   BIG=1000000 (fields of the big hash)
#        N=200000 PIPELINE=16 CLIENTS=50 KEYS=100000 TESTS="set get incr"
#        MOVE_PIPELINE=10 (keys per MIGRATE, redis-cli's --cluster-pipeline)
# Needs: etcd (etcd-server), redis-server, redis-cli, redis-benchmark, python3.
set -euo pipefail
BIN=$(realpath "${1:-target/release/cairn}")
N=${N:-200000}
PIPELINE=${PIPELINE:-16}
CLIENTS=${CLIENTS:-50}
KEYS=${KEYS:-100000}
MOVE_PIPELINE=${MOVE_PIPELINE:-10}
BIG=${BIG:-1000000}
TESTS=${TESTS:-"set get incr"}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

etcd --data-dir "$work/etcd" --listen-client-urls http://127.0.0.1:23791 \
  --advertise-client-urls http://127.0.0.1:23791 --listen-peer-urls http://127.0.0.1:23792 \
  --initial-advertise-peer-urls http://127.0.0.1:23792 \
  --initial-cluster default=http://127.0.0.1:23792 >"$work/etcd.log" 2>&1 &
pids+=($!)

cairn_ports=(7201 7202 7203)
redis_ports=(7301 7302 7303)
for p in "${cairn_ports[@]}"; do
  mkdir -p "$work/c$p"
  cat >"$work/c$p/config.toml" <<EOF
port = $p
dir = "$work/c$p/data"
durability = "everysec"
log_level = "warn"
[cluster]
enabled = true
etcd_endpoints = ["127.0.0.1:23791"]
name = "bench-$$"
EOF
  "$BIN" --config "$work/c$p/config.toml" >"$work/c$p/log" 2>&1 &
  pids+=($!)
done
for p in "${redis_ports[@]}"; do
  mkdir -p "$work/r$p"
  (cd "$work/r$p" && redis-server --port "$p" --cluster-enabled yes --save '' \
    --appendonly yes --appendfsync everysec --logfile log &)
done
sleep 2
for p in "${redis_ports[@]}"; do pids+=("$(redis-cli -p "$p" info server | awk -F: '/^process_id/{print $2}' | tr -d '\r')"); done

create() {
  local ports=("$@") addrs=()
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-yes >/dev/null
  # Every node must see the whole cluster (Redis's gossip takes a moment).
  for _ in $(seq 100); do
    local ok=1
    for p in "${ports[@]}"; do
      redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
      [ "$(redis-cli -p "$p" cluster nodes | wc -l)" = "${#ports[@]}" ] || ok=0
    done
    [ $ok = 1 ] && return
    sleep 0.2
  done
  echo "cluster on ${ports[*]} did not form" >&2
  exit 1
}
create "${cairn_ports[@]}"
create "${redis_ports[@]}"

rps() { # port test
  redis-benchmark --cluster -p "$1" -t "$2" -n "$N" -c "$CLIENTS" -P "$PIPELINE" -r 100000 -q 2>/dev/null |
    tr '\r' '\n' | awk -v t="${2^^}" 'index($0, t":") == 1 {print $2}' | tail -1
}
echo "== redis-benchmark --cluster -P $PIPELINE -c $CLIENTS -n $N (3 nodes each, everysec)"
printf "%-6s %12s %12s %7s\n" test cairn redis ratio
for t in $TESTS; do
  c=$(rps "${cairn_ports[0]}" "$t")
  r=$(rps "${redis_ports[0]}" "$t")
  printf "%-6s %12s %12s %7.2f\n" "$t" "$c" "$r" "$(echo "$c / $r" | bc -l)"
done

# A hash tag ($1 and a number) whose keys hash to slot $2.
tag_for() {
  python3 - "$1" "$2" <<'PY'
import binascii, sys
prefix, slot = sys.argv[1], int(sys.argv[2])
i = 0
while binascii.crc_hqx(f"{prefix}{i}".encode(), 0) & 0x3FFF != slot:
    i += 1
print(f"{prefix}{i}")
PY
}

# Moves the first node's lowest slot to the second node with redis-cli
# (output to $1), tells the load running meanwhile to stop ($work/done),
# and prints how many seconds the move took.
move_one_slot() { # log ports...
  local log=$1
  shift
  local ports=("$@") from to t0 t1
  from=$(redis-cli -p "${ports[0]}" cluster myid)
  to=$(redis-cli -p "${ports[1]}" cluster myid)
  t0=$(date +%s.%N)
  redis-cli --cluster reshard "127.0.0.1:${ports[0]}" --cluster-from "$from" --cluster-to "$to" \
    --cluster-slots 1 --cluster-yes --cluster-pipeline "$MOVE_PIPELINE" >"$log" 2>&1
  t1=$(date +%s.%N)
  touch "$work/done"
  echo "$t1 - $t0" | bc -l
}

# Slot 0 (the first node serves it) for the small keys.
tag=$(tag_for t 0)

reshard() { # label ports...
  local label=$1
  shift
  local ports=("$@")
  python3 - "$tag" "$KEYS" <<'PY' | redis-cli -p "${ports[0]}" --pipe >/dev/null
import sys
tag, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
for i in range(n):
    k, v = f"{{{tag}}}:{i}".encode(), b"x" * 16
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
PY
  local held
  held=$(redis-cli -p "${ports[0]}" cluster countkeysinslot 0)
  # GET load on the other keys meanwhile, in short runs.
  (
    while [ ! -e "$work/done" ]; do
      redis-benchmark --cluster -p "${ports[2]}" -t get -n 20000 -c 20 -r 100000 2>/dev/null |
        tr '\r' '\n' | awk '/latency summary/ {getline; getline; print $5}'
    done >"$work/p99"
  ) &
  local load=$!
  sleep 1
  local secs
  secs=$(move_one_slot "$work/reshard.log" "${ports[@]}")
  wait "$load"
  rm -f "$work/done"
  local moved
  moved=$(redis-cli -p "${ports[1]}" cluster countkeysinslot 0)
  local p99s
  p99s=$(sort -n "$work/p99" | awk '{a[NR]=$1} END {if (NR) printf "median %s, worst %s (%d runs)", a[int((NR+1)/2)], a[NR], NR}')
  printf "%-6s %8.2f s for %s keys (%s on the target after), GET p99 ms during it: %s\n" \
    "$label" "$secs" "$held" "$moved" "$p99s"
}
echo "== reshard of slot 0 ($KEYS keys written to it, plus the benchmark's) with redis-cli --cluster reshard --cluster-slots 1 --cluster-pipeline $MOVE_PIPELINE"
reshard cairn "${cairn_ports[@]}"
reshard redis "${redis_ports[@]}"

# A hash tag for slot 1 (the first node serves it too), and one big hash in
# it; a reader of another key on the same node records its longest wait.
tag1=$(tag_for h 1)
# And one for slot 2000, which stays on the first node: the probe's key.
tag2=$(tag_for p 2000)
big_move() { # label ports...
  local label=$1
  shift
  local ports=("$@")
  python3 - "$tag1" "$BIG" <<'PY' | redis-cli -p "${ports[0]}" --pipe >/dev/null
import sys
tag, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
key = f"{{{tag}}}:big".encode()
for start in range(0, n, 1000):
    args = [b"HSET", key]
    for i in range(start, min(n, start + 1000)):
        args += [b"f%d" % i, b"v%d" % i]
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
PY
  redis-cli -p "${ports[0]}" set "{$tag2}:probe" x >/dev/null
  python3 - "${ports[0]}" "{$tag2}:probe" "$work/done" >"$work/worst" <<'PY' &
import os, socket, sys, time
port, key, done = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
req = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
worst, n = 0.0, 0
while not os.path.exists(done):
    t = time.perf_counter()
    s.sendall(req)
    buf = b""
    while not buf.endswith(b"\r\n") or buf.count(b"\r\n") < 2:
        buf += s.recv(65536)
    worst = max(worst, time.perf_counter() - t)
    n += 1
print(f"{worst * 1000:.1f} ms over {n} reads")
PY
  local reader=$!
  sleep 0.5
  local secs
  secs=$(move_one_slot "$work/big.log" "${ports[@]}")
  wait "$reader"
  rm -f "$work/done"
  printf "%-6s %8.2f s; %s fields on the target after; longest GET of another key on the source: %s\n" \
    "$label" "$secs" \
    "$(redis-cli -p "${ports[1]}" hlen "{$tag1}:big")" "$(cat "$work/worst")"
}
echo "== reshard of slot 1 holding one hash of $BIG fields"
big_move cairn "${cairn_ports[@]}"
big_move redis "${redis_ports[@]}"
