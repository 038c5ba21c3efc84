#!/usr/bin/env bash
# Cluster benchmarks (issue 14), cairn against Redis 7.0, on loopback:
#  1. redis-benchmark --cluster (SET, GET, INCR; -P $PIPELINE -c $CLIENTS)
#     against a 3-node cairn cluster (durability everysec, topology in a
#     local etcd) and a 3-node redis-server cluster (appendfsync everysec);
#  2. the time `redis-cli --cluster reshard` takes to move one slot holding
#     $KEYS keys, with the p99 of a GET load running meanwhile (short
#     redis-benchmark runs back to back: the worst and the median p99);
#  3. the same for a slot holding one hash of $BIG fields, with the longest
#     wait of a client reading another key of the source node meanwhile;
#  4. both moves again on cairn with its own CLUSTER MOVESLOT (one command
#     that streams the slot; Redis has none), on fresh slots of the same node.
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

# The lowest slot the node on port $1 serves.
lowest_slot() {
  redis-cli -p "$1" cluster nodes | awk '$3 ~ /myself/ {split($9, r, "-"); print r[1]}'
}

# Moves slot $2 from the first node to the second (output to $3), $1 says
# how: `reshard` (redis-cli --cluster reshard --cluster-slots 1, which takes
# the source's lowest slot, so $2 must be that one) or `moveslot` (CLUSTER
# MOVESLOT, cairn's). Then tells the load running meanwhile to stop
# ($work/done), and prints how many seconds the move took.
move_one_slot() { # how slot log ports...
  local how=$1 slot=$2 log=$3
  shift 3
  local ports=("$@") from to t0 t1 failed=0
  from=$(redis-cli -p "${ports[0]}" cluster myid)
  to=$(redis-cli -p "${ports[1]}" cluster myid)
  if [ "$how" = reshard ] && [ "$(lowest_slot "${ports[0]}")" != "$slot" ]; then
    touch "$work/done"
    echo "reshard would not move slot $slot: port ${ports[0]}'s lowest is $(lowest_slot "${ports[0]}")" >&2
    return 1
  fi
  t0=$(date +%s.%N)
  case $how in
  reshard)
    redis-cli --cluster reshard "127.0.0.1:${ports[0]}" --cluster-from "$from" --cluster-to "$to" \
      --cluster-slots 1 --cluster-yes --cluster-pipeline "$MOVE_PIPELINE" >"$log" 2>&1
    ;;
  moveslot)
    # An error reply is printed, not always an exit status: check the text.
    redis-cli -p "${ports[0]}" cluster moveslot "$slot" "$to" >"$log" 2>&1 || failed=1
    [ "$(cat "$log")" = OK ] || failed=1
    ;;
  esac
  t1=$(date +%s.%N)
  touch "$work/done"
  if [ "$failed" = 1 ]; then
    echo "CLUSTER MOVESLOT $slot $to on port ${ports[0]} failed: $(cat "$log")" >&2
    return 1
  fi
  echo "$t1 - $t0" | bc -l
}

# Fills slot $3 (the first node serves it) with $KEYS small keys, moves it
# to the second node the way $2 says (see move_one_slot) while a GET load
# runs on the cluster, and prints the time and the load's p99s.
reshard() { # label how slot ports...
  local label=$1 how=$2 slot=$3
  shift 3
  local ports=("$@") tag
  tag=$(tag_for t "$slot")
  python3 - "$tag" "$KEYS" <<'PY' | redis-cli -p "${ports[0]}" --pipe >/dev/null
import sys
tag, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
for i in range(n):
    k, v = f"{{{tag}}}:{i}".encode(), b"x" * 16
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
PY
  local held
  held=$(redis-cli -p "${ports[0]}" cluster countkeysinslot "$slot")
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
  secs=$(move_one_slot "$how" "$slot" "$work/reshard.log" "${ports[@]}")
  wait "$load"
  rm -f "$work/done"
  local moved
  moved=$(redis-cli -p "${ports[1]}" cluster countkeysinslot "$slot")
  local p99s
  p99s=$(sort -n "$work/p99" | awk '{a[NR]=$1} END {if (NR) printf "median %s, worst %s (%d runs)", a[int((NR+1)/2)], a[NR], NR}')
  printf "%-6s %8.2f s for %s keys (%s on the target after), GET p99 ms during it: %s\n" \
    "$label" "$secs" "$held" "$moved" "$p99s"
}
echo "== reshard of slot 0 ($KEYS keys written to it, plus the benchmark's) with redis-cli --cluster reshard --cluster-slots 1 --cluster-pipeline $MOVE_PIPELINE"
reshard cairn reshard 0 "${cairn_ports[@]}"
reshard redis reshard 0 "${redis_ports[@]}"

# A hash tag for slot 2000, which stays on the first node: the probe's key.
tag2=$(tag_for p 2000)
# And one for slot 8000, on the second node (the target of the moves).
tag3=$(tag_for p 8000)
# Fills slot $3 (the first node serves it) with one big hash, moves it to
# the second node the way $2 says (see move_one_slot) while a reader of
# another key on the first node records its longest wait, and prints both.
big_move() { # label how slot ports...
  local label=$1 how=$2 slot=$3
  shift 3
  local ports=("$@") tag1
  tag1=$(tag_for h "$slot")
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
  redis-cli -p "${ports[1]}" set "{$tag3}:probe" x >/dev/null
  probe "${ports[0]}" "{$tag2}:probe" >"$work/worst" &
  local reader=$!
  probe "${ports[1]}" "{$tag3}:probe" >"$work/worst-target" &
  local reader2=$!
  sleep 0.5
  local secs
  secs=$(move_one_slot "$how" "$slot" "$work/big.log" "${ports[@]}")
  wait "$reader" "$reader2"
  rm -f "$work/done"
  printf "%-6s %8.2f s; %s fields on the target after; longest GET of another key on the source: %s, on the target: %s\n" \
    "$label" "$secs" \
    "$(redis-cli -p "${ports[1]}" hlen "{$tag1}:big")" "$(cat "$work/worst")" "$(cat "$work/worst-target")"
}

# Reads key $2 on port $1 in a loop until $work/done appears, then prints
# the longest wait.
probe() { # port key
  python3 - "$1" "$2" "$work/done" <<'PY'
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
}
echo "== reshard of slot 1 holding one hash of $BIG fields"
big_move cairn reshard 1 "${cairn_ports[@]}"
big_move redis reshard 1 "${redis_ports[@]}"

# Last, so a failing MOVESLOT costs none of the numbers above. Slots 2 and 3
# are fresh slots of the first node, filled as 0 and 1 were.
echo "== CLUSTER MOVESLOT of slot 2 ($KEYS keys written to it, plus the benchmark's); cairn only"
reshard cairn moveslot 2 "${cairn_ports[@]}"
echo "== CLUSTER MOVESLOT of slot 3 holding one hash of $BIG fields; cairn only"
big_move cairn moveslot 3 "${cairn_ports[@]}"
