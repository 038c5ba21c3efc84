#!/usr/bin/env bash
# Data larger than memory (issue 15's benchmark): cairn runs in a cgroup v1
# memory group, is loaded with KEYS random keys of VALUE bytes by
# redis-benchmark SET at pipeline 16, then read with GET at pipeline 1.
# Reports: load rate (overall, and its slowest whole second, sampled from
# INFO's total_commands_processed), GET rate and p50/p99 latency, peak RSS,
# disk bytes written per user byte (/proc/PID/io write_bytes over
# KEYS * VALUE) and the data directory's size against the data's.
#
# Usage (root, cgroup v1 mounted at /sys/fs/cgroup/memory; build first with
# `cargo build --release`):
#   benches/larger_than_memory.sh      # CI-sized: 400,000 keys in 192 MiB, 16 MiB caches and buffers
#   KEYS=4000000 MEM_MB=1024 CACHE_MB=64 BUFFER_MB=32 benches/larger_than_memory.sh   # the issue's size, config.toml's caches
# Knobs: KEYS [400000], VALUE [1024], MEM_MB [192], CACHE_MB [16] and
#        BUFFER_MB [16] (cache_mb and write_buffer_mb per shard), CLIENTS [50],
#        GETS (GET requests, default KEYS/4), DURABILITY [everysec], PORT [7393],
#        CAIRN_BIN [target/release/cairn], DIR (data dir, default a temp dir).
set -euo pipefail
KEYS=${KEYS:-400000}
VALUE=${VALUE:-1024}
MEM_MB=${MEM_MB:-192}
CACHE_MB=${CACHE_MB:-16}
BUFFER_MB=${BUFFER_MB:-16}
CLIENTS=${CLIENTS:-50}
GETS=${GETS:-$((KEYS / 4))}
PORT=${PORT:-7393}
DURABILITY=${DURABILITY:-everysec}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
DIR=${DIR:-$WORK/data}
CG=/sys/fs/cgroup/memory/cairn-bench-$$
cleanup() {
  [[ -n "${SAMPLER:-}" ]] && kill "$SAMPLER" 2>/dev/null || true
  [[ -n "${CAIRN_PID:-}" ]] && kill "$CAIRN_PID" 2>/dev/null && wait "$CAIRN_PID" 2>/dev/null || true
  rmdir "$CG" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$CG" "$DIR"
printf 'cache_mb = %s\nwrite_buffer_mb = %s\n' "$CACHE_MB" "$BUFFER_MB" >"$WORK/cairn.toml"
echo $((MEM_MB * 1024 * 1024)) >"$CG/memory.limit_in_bytes"
# Start cairn inside the group: the subshell joins it, then execs.
(
  echo $BASHPID >"$CG/cgroup.procs"
  exec "${CAIRN_BIN:-$ROOT/target/release/cairn}" --config "$WORK/cairn.toml" --port "$PORT" --dir "$DIR" \
    --durability "$DURABILITY" >"$WORK/cairn.log" 2>&1
) &
CAIRN_PID=$!
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

field() { redis-cli -p "$PORT" info "$1" | tr -d '\r' | grep "^$2:" | cut -d: -f2; }
io_written() { awk '/^write_bytes/ {print $2}' "/proc/$CAIRN_PID/io"; }
io_read() { awk '/^read_bytes/ {print $2}' "/proc/$CAIRN_PID/io"; }

# About once a second: the commands processed per second since the last
# sample (divided by the time that really passed: INFO can be slow to
# answer under load).
sample() {
  local last now t0 t1
  last=$(field stats total_commands_processed)
  t0=$(date +%s.%N)
  while sleep 1; do
    now=$(field stats total_commands_processed) || break
    t1=$(date +%s.%N)
    awk -v n=$((now - last)) -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f\n", n / (b - a)}'
    last=$now
    t0=$t1
  done
}

written0=$(io_written)
read0=$(io_read)
sample >"$WORK/load.rates" &
SAMPLER=$!
start=$(date +%s.%N)
# -t set writes key:__rand_int__ with a -d byte value (a custom SET
# command could not name the value's size).
redis-benchmark -p "$PORT" -c "$CLIENTS" -n "$KEYS" -r "$KEYS" -P 16 -d "$VALUE" -t set -q >/dev/null
end=$(date +%s.%N)
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=
written=$(( $(io_written) - written0 ))
read=$(( $(io_read) - read0 ))
# Whole samples only: the first and last straddle the run's edges.
slowest=$(sed '1d;$d' "$WORK/load.rates" | sort -n | head -1)
rate=$(awk -v n="$KEYS" -v a="$start" -v b="$end" 'BEGIN {printf "%.0f", n / (b - a)}')

get=$(redis-benchmark -p "$PORT" -c "$CLIENTS" -n "$GETS" -r "$KEYS" -P 1 -q GET 'key:__rand_int__' 2>/dev/null |
  tr '\r' '\n' | grep 'requests per second' | tail -1)
get_rps=$(echo "$get" | grep -o '[0-9.]* requests per second' | cut -d' ' -f1)
get_p50=$(echo "$get" | sed -n 's/.*p50=\([0-9.]*\) msec.*/\1/p')
# redis-benchmark -q prints only the p50; the p99 comes from a full run's summary.
get_p99=$(redis-benchmark -p "$PORT" -c "$CLIENTS" -n "$GETS" -r "$KEYS" -P 1 GET 'key:__rand_int__' 2>/dev/null |
  tr '\r' '\n' | awk '/latency summary/ {getline; getline; print $5}')

peak_rss=$(awk '/^VmHWM/ {print $2}' "/proc/$CAIRN_PID/status")
disk=$(du -sb "$DIR" | cut -f1)
user=$((KEYS * VALUE))
keys=$(redis-cli -p "$PORT" dbsize)

printf 'keys loaded (distinct)      %s from %s SETs over %s random keys, %s B values, cairn in %s MiB\n' "$keys" "$KEYS" "$KEYS" "$VALUE" "$MEM_MB"
printf 'SET P16 load                %s /s overall, slowest second %s /s\n' "$rate" "${slowest:-n/a}"
printf 'GET P1 -c %s              %s /s, p50 %s ms, p99 %s ms\n' "$CLIENTS" "${get_rps:-?}" "${get_p50:-?}" "${get_p99:-?}"
printf 'peak RSS                    %s MiB\n' $((peak_rss / 1024))
printf 'disk written / user bytes   %s\n' "$(awk -v w="$written" -v u="$user" 'BEGIN {printf "%.2f", w / u}')"
printf 'disk read while loading     %s per user byte\n' "$(awk -v r="$read" -v u="$user" 'BEGIN {printf "%.2f", r / u}')"
printf 'data dir / data held        %s (%s MiB for %s MiB of values)\n' \
  "$(awk -v d="$disk" -v u="$((keys * VALUE))" 'BEGIN {printf "%.2f", d / u}')" $((disk / 1048576)) $((keys * VALUE / 1048576))
