#!/usr/bin/env bash
# cairn's shards against one redis-server on a many-core machine.
#
# The servers run on the first half of the cores and the load tools on the
# second half (taskset), so neither steals the other's CPU. It measures:
#   * redis-benchmark -c 256 -P 16 --threads 8 over random keys: Redis
#     (appendfsync everysec) against cairn with 1, 2, 4 and 8 shards;
#   * EVALSHA of a one-INCR script over random keys, the same way;
#   * transactions (examples/txbench.rs, MULTI; SET; INCR; EXEC) on keys of
#     one slot and on keys of two shards, 256 connections at pipeline 16;
#   * the PUBLISH load tool (examples/pubbench.rs): one subscriber, and
#     1,000 subscriptions over 50 connections, against Redis and cairn with
#     1 and 8 shards.
# Each line also gives the server's CPU time per request.
#
# It needs no registry: the binaries come from BIN (default .dev), which
# holds cairn, pubbench, txbench, redis-server, redis-benchmark and, in
# BIN/lib, the shared libraries Debian's redis binaries link to. Fill it with:
#   cargo build --release --bin cairn --example pubbench --example txbench
#   mkdir -p .dev/lib && cp target/release/cairn \
#     target/release/examples/pubbench target/release/examples/txbench \
#     /usr/bin/redis-server /usr/bin/redis-benchmark .dev/
#   strip .dev/cairn .dev/pubbench .dev/txbench
#   (and the non-libc libraries `ldd /usr/bin/redis-server` names into .dev/lib)
#
# Knobs: N (requests per redis-benchmark test, 1000000), SECS (seconds per
# pubbench and txbench case, 5), SHARDS ("1 2 4 8"), TESTS (the
# redis-benchmark tests), PUB (0 skips pubbench), SCRIPTS (0 skips EVALSHA
# and the transactions).
set -u
BIN=${BIN:-.dev}
BIN=$(cd "$BIN" && pwd)
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
N=${N:-1000000}
SECS=${SECS:-5}
SHARDS=${SHARDS:-"1 2 4 8"}
TESTS=${TESTS:-set,get,incr,lpush,rpop,sadd,hset,zadd,mset}
PUB=${PUB:-1}
SCRIPTS=${SCRIPTS:-1}
INCR_SCRIPT="return redis.call('INCR', KEYS[1])"
INCR_SHA=$(printf '%s' "$INCR_SCRIPT" | sha1sum | cut -d' ' -f1)
OUT=${OUT:-/tmp/many_cores}
mkdir -p "$OUT"
CORES=$(nproc)
HALF=$((CORES / 2))
SERVER_CPUS="0-$((HALF - 1))"
LOAD_CPUS="$HALF-$((CORES - 1))"
# Pinned where taskset works (a sandbox may refuse CPU affinity).
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
    on() { local cpus=$1; shift; taskset -c "$cpus" "$@"; }
    SERVER_PIN=(taskset -c "$SERVER_CPUS")
else
    on() { shift; "$@"; }
    SERVER_PIN=()
    echo "no taskset: nothing is pinned"
fi
echo "cores: $CORES; servers on $SERVER_CPUS, load on $LOAD_CPUS"

# Server CPU time in clock ticks (utime + stime).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)

wait_port() {
    for _ in $(seq 100); do
        # A PING over bash's /dev/tcp: redis-benchmark waits forever on a
        # port nobody listens on yet.
        if exec 3<>"/dev/tcp/127.0.0.1/$1"; then
            printf 'PING\r\n' >&3
            if read -r -t 2 reply <&3 && [ "${reply%$'\r'}" = "+PONG" ]; then
                exec 3<&-
                return 0
            fi
            exec 3<&-
        fi 2>/dev/null
        sleep 0.1
    done
    echo "port $1 never answered" >&2
    return 1
}

start_redis() {
    rm -rf /tmp/mc-redis && mkdir -p /tmp/mc-redis
    "${SERVER_PIN[@]}" "$BIN/redis-server" --port 7000 --save "" \
        --appendonly yes --appendfsync everysec --dir /tmp/mc-redis \
        --daemonize no >"$OUT/redis.log" 2>&1 &
    PID=$!
    PORT=7000
    wait_port $PORT
}

start_cairn() {
    rm -rf /tmp/mc-cairn && mkdir -p /tmp/mc-cairn
    # From /tmp, so the embedded default config is the one used.
    (cd /tmp && exec "${SERVER_PIN[@]}" "$BIN/cairn" --port 7001 \
        --shards "$1" --dir /tmp/mc-cairn/d --durability everysec \
        >"$OUT/cairn-$1.log" 2>&1) &
    PID=$!
    PORT=7001
    wait_port $PORT
}

stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }

# One redis-benchmark run (the arguments after the label), with the CPU
# the server spent.
bench_one() {
    local name=$1 label=$2 before after rps
    shift 2
    before=$(ticks "$PID")
    rps=$(on "$LOAD_CPUS" "$BIN/redis-benchmark" -p "$PORT" -c 256 -P 16 \
        --threads 8 -r 1000000 -n "$N" --csv "$@" 2>/dev/null |
        awk -F'"' 'NR == 2 {print $4}')
    after=$(ticks "$PID")
    awk -v n="$name" -v t="$label" -v r="$rps" -v c=$((after - before)) \
        -v hz="$TCK" -v req="$N" \
        'BEGIN {printf "%-10s %-8s %12s rps  %6.2f us/req\n", n, t, r, c * 1e6 / hz / req}' |
        tee -a "$OUT/table.txt"
}

# One redis-benchmark run per test.
bench() {
    local name=$1 tests=$2 t
    for t in ${tests//,/ }; do
        bench_one "$name" "$t" -t "$t"
    done
}

# EVALSHA of the one-INCR script, then the transactions on one slot and on
# two shards.
scripts() {
    local name=$1 keys out
    [ "$SCRIPTS" = 0 ] && return
    "$BIN/redis-benchmark" -p "$PORT" -n 1 -c 1 SCRIPT LOAD "$INCR_SCRIPT" \
        >/dev/null 2>&1
    # Keys of their own: redis-benchmark's SET test leaves strings under key:*
    # that INCR refuses, and the tool stops at the first error.
    bench_one "$name" evalsha EVALSHA "$INCR_SHA" 1 'ev:__rand_int__'
    for keys in one-slot two-shards; do
        out=$(on "$LOAD_CPUS" "$BIN/txbench" --port "$PORT" --clients 256 \
            --pipeline 16 --keys "$keys" --seconds "$SECS" --pid "$PID" 2>&1)
        printf '%-10s tx %-10s %s\n' "$name" "$keys" "$out" |
            tee -a "$OUT/table.txt"
    done
}

pub() {
    local name=$1 label=$2 out
    shift 2
    [ "$PUB" = 0 ] && return
    out=$(on "$LOAD_CPUS" "$BIN/pubbench" --port "$PORT" --seconds "$SECS" \
        --pid "$PID" "$@" 2>&1)
    printf '== %s pubbench %s\n%s\n' "$name" "$label" "$out" >>"$OUT/pub.txt"
    printf '%-10s pub %s  %s\n' "$name" "$label" "$(echo "$out" |
        sed -n 's/.*size=[0-9]*: //p; s/server CPU: //p' | tr '\n' ' ')" |
        tee -a "$OUT/table.txt"
}

start_redis
bench redis "$TESTS"
scripts redis
pub redis a --conns 1 --patterns 0
pub redis b --conns 50 --patterns 19
stop

for s in $SHARDS; do
    start_cairn "$s"
    if [ "$s" = "${SHARDS##* }" ]; then
        bench "cairn-$s" "$TESTS"
        scripts "cairn-$s"
    else
        bench "cairn-$s" set,get,incr,sadd
    fi
    case " 1 ${SHARDS##* } " in
    *" $s "*)
        pub "cairn-$s" a --conns 1 --patterns 0
        pub "cairn-$s" b --conns 50 --patterns 19
        ;;
    esac
    stop
done
echo "== table"
cat "$OUT/table.txt"
