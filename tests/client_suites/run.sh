#!/usr/bin/env bash
# Runs client libraries' own test suites against Redis 7.0.15 and then
# against cairn, and lists the tests that fail on cairn only: a developer
# tool outside `cargo test`, for finding what real clients rely on. Each
# suite was written against a real Redis, so a test that passes there and
# fails here is a difference to look at (it becomes a fix and a recorded
# case in tests/compat/).
#
#   tests/client_suites/run.sh                    # redis-py fakeredis rq redis-rs
#   tests/client_suites/run.sh redis-py fakeredis # named suites
#
# Suites (fetched from PyPI and crates.io into target/client-suites, with a
# Python virtual environment there):
#   redis-py   redis-py 5.0.8's tests (sync and asyncio), RESP2 and RESP3,
#              against a server given by --redis-url
#   fakeredis  fakeredis 2.41.0's tests marked `real` (they run against a
#              real server on port 6390, and compare nothing with fakeredis)
#   rq         rq 3.0.0's tests (a job queue; a server on port 6379)
#   redis-rs   the redis crate 0.27.6's tests (each test starts its own
#              server: a `redis-server` on PATH that starts cairn instead)
# The fixed ports must be free. Both servers run with
# `enable-debug-command yes` (redis-py simulates errors with DEBUG ERROR).
# Output per suite and server in target/client-suites/out/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/target/client-suites
out=$work/out
mkdir -p "$work" "$out"
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(redis-py fakeredis rq redis-rs)

cargo build --release --quiet
cairn=$root/target/release/cairn

if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
  # pytest 7 with pytest-asyncio 0.21: what redis-py 5.0's asyncio tests
  # were written for (newer ones skip them all).
  "$work/venv/bin/pip" install -q "pytest<8" "pytest-asyncio==0.21.2" pytest-timeout \
    pytest-mock psutil hypothesis lupa valkey
fi
py=$work/venv/bin/python

# fetch NAME==VERSION: its source distribution, unpacked under $work.
fetch() {
  local dir=$work/${1/==/-}
  if [ ! -d "$dir" ]; then
    (cd "$work" && "$work/venv/bin/pip" download -q --no-binary :all: --no-deps "$1" -d .)
    tar -xzf "$dir".tar.gz -C "$work"
  fi
  echo "$dir"
}

# serve KIND PORT: starts redis-server or cairn on PORT; sets $server_pid.
serve() {
  local dir
  dir=$(mktemp -d "$work/data.XXXXXX")
  if [ "$1" = redis ]; then
    redis-server --port "$2" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
      --enable-debug-command yes >"$dir/log" 2>&1 &
  else
    "$cairn" --port "$2" --dir "$dir" --durability no --enable-debug-command yes >"$dir/log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 50); do
    redis-cli -p "$2" ping >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "the $1 server did not start on port $2" >&2
  exit 1
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}

# compare SUITE: what failed on cairn and not on Redis.
compare() {
  local r=$out/$1-redis.txt c=$out/$1-cairn.txt
  echo "$1: redis: $(grep -E 'passed|failed' "$r" | tail -1)"
  echo "$1: cairn: $(grep -E 'passed|failed' "$c" | tail -1)"
  comm -13 <(grep -E '^(FAILED|ERROR)' "$r" | sed 's/ - .*//' | sort -u) \
    <(grep -E '^(FAILED|ERROR)' "$c" | sed 's/ - .*//' | sort -u) | sed 's/^/    cairn only: /'
}

# pytest_suite NAME PORT DIR ARGS...: the suite in DIR against each server
# on PORT; "{port}" in ARGS becomes the port.
pytest_suite() {
  local name=$1 port=$2 dir=$3
  shift 3
  for kind in redis cairn; do
    serve "$kind" "$port"
    (cd "$dir" && timeout 1800 "$py" -m pytest -p no:cacheprovider -q --timeout 120 -W ignore -rfE \
      "${@//\{port\}/$port}" >"$out/$name-$kind.log" 2>&1) || true
    stop
    grep -E '^(FAILED|ERROR)|passed|failed' "$out/$name-$kind.log" >"$out/$name-$kind.txt" || true
  done
  compare "$name"
}

for suite in "${suites[@]}"; do
  case $suite in
    redis-py)
      dir=$(fetch redis==5.0.8)
      "$work/venv/bin/pip" install -q "$dir"
      tests=(tests/test_commands.py tests/test_scripting.py tests/test_function.py
             tests/test_pipeline.py tests/test_lock.py tests/test_hash.py tests/test_encoding.py
             tests/test_pubsub.py tests/test_monitor.py tests/test_connection.py
             tests/test_connection_pool.py tests/test_asyncio
             --ignore=tests/test_asyncio/test_cluster.py --ignore=tests/test_asyncio/test_bloom.py
             --ignore=tests/test_asyncio/test_json.py --ignore=tests/test_asyncio/test_search.py
             --ignore=tests/test_asyncio/test_timeseries.py --ignore=tests/test_asyncio/test_graph.py
             --ignore=tests/test_asyncio/test_sentinel.py
             --ignore=tests/test_asyncio/test_sentinel_managed_connection.py)
      for proto in 2 3; do
        pytest_suite "redis-py-resp$proto" 7491 "$dir" -o asyncio_mode=auto \
          --redis-url "redis://127.0.0.1:{port}/0" --protocol "$proto" \
          -m "not redismod and not onlycluster and not ssl" "${tests[@]}"
      done
      ;;
    fakeredis)
      dir=$(fetch fakeredis==2.41.0)
      "$work/venv/bin/pip" install -q "$dir"
      pytest_suite fakeredis 6390 "$dir" -m real test/test_mixins test/test_async \
        test/test_keyspace_notifications.py test/test_subkey_notifications.py
      ;;
    rq)
      dir=$(fetch rq==3.0.0)
      "$work/venv/bin/pip" install -q "$dir"
      pytest_suite rq 6379 "$dir" tests
      ;;
    redis-rs)
      crate=$work/redis-0.27.6
      if [ ! -d "$crate" ]; then
        curl -sSfL https://static.crates.io/crates/redis/redis-0.27.6.crate | tar -xz -C "$work"
      fi
      # The tests start `redis-server --port P --bind B ...`: this one
      # starts cairn on that port instead, or Redis while REAL=1.
      mkdir -p "$work/bin"
      cat >"$work/bin/redis-server" <<EOF
#!/usr/bin/env bash
[ "\${REAL:-}" = 1 ] && exec /usr/bin/redis-server "\$@"
port=6379 bind=127.0.0.1
while [ \$# -gt 0 ]; do
  case \$1 in
    --port) port=\$2; shift 2 ;;
    --bind) bind=\$2; shift 2 ;;
    --loadmodule|--tls-port|--unixsocket) echo "not for cairn: \$1" >&2; exit 1 ;;
    --*) shift 2 ;;
    *) shift ;;
  esac
done
exec "$cairn" --port "\$port" --bind "\$bind" --dir "\$(mktemp -d)" --durability no --enable-debug-command yes
EOF
      chmod +x "$work/bin/redis-server"
      for real in 1 0; do
        kind=$([ $real = 1 ] && echo redis || echo cairn)
        (cd "$crate" && PATH=$work/bin:$PATH REAL=$real CARGO_TARGET_DIR=$work/redis-rs-target \
          timeout 1800 cargo test --no-fail-fast \
          --features "tokio-comp script acl geospatial streams num-bigint" \
          --test test_basic --test test_async --test test_script --test test_streams \
          --test test_types --test test_geospatial --test test_acl --test test_bignum \
          -- --test-threads=1 >"$out/redis-rs-$kind.log" 2>&1) || true
        # One line per failed test, as pytest writes them, to compare.
        { grep -E '^test .* FAILED$' "$out/redis-rs-$kind.log" | sed 's/^test /FAILED /; s/ \.\.\. FAILED$//'
          echo "$(grep -c '\.\.\. ok$' "$out/redis-rs-$kind.log") passed, $(grep -c '\.\.\. FAILED$' "$out/redis-rs-$kind.log") failed"
        } >"$out/redis-rs-$kind.txt"
      done
      compare redis-rs
      ;;
    *)
      echo "unknown suite: $suite (known: redis-py fakeredis rq redis-rs)" >&2
      exit 2
      ;;
  esac
done
