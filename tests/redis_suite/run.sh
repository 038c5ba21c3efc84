#!/usr/bin/env bash
# Runs units of Redis 7.0.15's own test suite (tests/unit/*.tcl) against a
# cairn release build, in the suite's external-server mode: a developer
# tool outside `cargo test`, for mining the behaviours Redis's tests pin.
#
#   tests/redis_suite/run.sh pause tracking type/list     # named units
#   tests/redis_suite/run.sh                              # the default set
#   CAIRN_ARGS="--durability always" tests/redis_suite/run.sh multi
#
# It fetches Debian's source package of redis (the same 7.0.15 as the
# redis-server the transcripts are recorded from) into target/redis-src,
# installs tclsh if missing, builds cairn (release) and starts it on a
# free loopback port with a fresh data dir and enable-debug-command yes.
# Each unit's output goes to target/redis-src/out/<unit>.txt; the summary
# lists, per unit, its passed and failed tests and its first failures.
#
# Tests tagged needs:config-maxmemory are skipped (cairn keeps data on
# disk and does not evict), and so are those tagged needs:repl (they read
# the replication stream, and cairn has no replicas: one that failed left
# the suite's client in another database, and the next blocking test of
# type/list waited forever); tests the suite itself marks external:skip are
# skipped by the suite. Failures that remain are listed in the latest
# session note; most are replication-stream tests (cairn has no replicas).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
src=$root/target/redis-src
units=("$@")
if [ ${#units[@]} -eq 0 ]; then
  units=(pause introspection introspection-2 slowlog latency-monitor info-command
         pubsub pubsubshard tracking scripting functions multi keyspace expire dump
         protocol sort bitops bitfield geo hyperloglog scan
         type/string type/incr type/list type/hash type/set type/zset
         type/stream type/stream-cgroups)
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
if ! command -v tclsh >/dev/null 2>&1; then
  $sudo apt-get update -qq && $sudo apt-get install -y -qq tcl
fi
if [ ! -d "$src/redis-7.0.15/tests" ]; then
  mkdir -p "$src"
  # Debian's source lists are not configured by default: add one for the
  # fetch, and take it away again.
  list=/etc/apt/sources.list.d/cairn-redis-src.sources
  $sudo tee "$list" >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  $sudo apt-get update -qq
  (cd "$src" && apt-get source --download-only redis >/dev/null)
  $sudo rm -f "$list"
  $sudo apt-get update -qq
  tar -xzf "$src"/redis_7.0.15.orig.tar.gz -C "$src"
fi

cargo build --release --quiet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
data=$(mktemp -d)
# CAIRN_ARGS adds options, for example `--durability always` to run the
# units through the write path of that mode.
# shellcheck disable=SC2086
"$root/target/release/cairn" --port "$port" --dir "$data" --enable-debug-command yes ${CAIRN_ARGS:-} \
  >"$data/cairn.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 50); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

# Tests of Redis's in-memory hash tables (rehashing, bucket chains, read
# with DEBUG HTSTATS-KEY), which cairn's on-disk sets do not have: without
# the command the test aborts its whole unit.
skip=(--skiptest "SRANDMEMBER with a dict containing long chain")
# Tests that read the replication stream without the needs:repl tag: the
# stream's SYNC fails on cairn (no replicas) after the test has moved the
# suite's client to database 1, and the next blocking test of type/list
# then waits forever for a key written in the wrong database.
skip+=(--skiptest "SWAPDB wants to wake blocked client, but the key already expired")
skip+=(--skiptest "MULTI + LPUSH + EXPIRE + DEBUG SLEEP on blocked client, key already expired")

mkdir -p "$src/out"
cd "$src/redis-7.0.15"
for unit in "${units[@]}"; do
  out="$src/out/$(echo "$unit" | tr / _).txt"
  # A test that waits for a reply cairn never sends would hang the unit:
  # each unit gets a bounded time.
  timeout "${UNIT_SECONDS:-300}" ./runtest --host 127.0.0.1 --port "$port" \
    --single "unit/$unit" --clients 1 --tags -needs:config-maxmemory --tags -needs:repl \
    "${skip[@]}" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >"$out" || true
  ok=$(grep -c '^\[ok\]' "$out" || true)
  bad=$(grep -cE '^\[(err|exception)\]' "$out" || true)
  echo "$unit: $ok passed, $bad failed"
  # A unit without failures lists none (grep's status must not end the run).
  { grep -E '^\[(err|exception)\]' "$out" || true; } | head -5 | cut -c1-160 | sed 's/^/    /'
done
