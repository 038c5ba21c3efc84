#!/usr/bin/env python3
"""End-to-end checks of cairn with redis-py, used the way its users call it.

Usage: py_clients.py PORT   (the server on 127.0.0.1:PORT; redis-py on the
import path, e.g. PYTHONPATH=target/client-deps/python)

Covers: plain commands, the transactional pipeline (MULTI/EXEC), optimistic
locking with WATCH under contention (`Redis.transaction`), the Lua-based
`Lock` (acquire, extend, reacquire, release, blocking acquire with a
timeout), `register_script` (EVALSHA with the NOSCRIPT fallback, and in a
pipeline) and a RESP3 connection. Exits non-zero with a message naming the
failing check; prints one line per passed section.
"""

import sys
import threading
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
HOST = "127.0.0.1"


class Mismatch(Exception):
    pass


def check(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, expected {want!r}")


def check_true(what, cond, detail=""):
    if not cond:
        raise Mismatch(f"{what}: {detail}" if detail else what)


def client(**kw):
    kw.setdefault("socket_timeout", 10)
    kw.setdefault("socket_connect_timeout", 5)
    return redis.Redis(host=HOST, port=PORT, decode_responses=True, **kw)


def plain_commands(r):
    check("PING", r.ping(), True)
    check("SET", r.set("plain:s", "v1"), True)
    check("GET", r.get("plain:s"), "v1")
    check("SET NX on existing", r.set("plain:s", "v2", nx=True), None)
    check("SET XX GET", r.set("plain:s", "v2", xx=True, get=True), "v1")
    check("MSET", r.mset({"plain:a": "1", "plain:b": "2"}), True)
    check("MGET", r.mget("plain:a", "plain:b", "plain:none"), ["1", "2", None])
    check("INCRBY", r.incrby("plain:a", 41), 42)
    check("INCRBYFLOAT", r.incrbyfloat("plain:f", 1.5), 1.5)
    check("EXPIRE", r.expire("plain:s", 100), True)
    ttl = r.ttl("plain:s")
    check_true("TTL in (0, 100]", 0 < ttl <= 100, f"got {ttl}")
    check("PERSIST", r.persist("plain:s"), True)
    check("TTL after PERSIST", r.ttl("plain:s"), -1)
    check("HSET mapping", r.hset("plain:h", mapping={"f1": "a", "f2": "b"}), 2)
    check("HGETALL", r.hgetall("plain:h"), {"f1": "a", "f2": "b"})
    check("HINCRBY", r.hincrby("plain:h", "n", 5), 5)
    check("RPUSH", r.rpush("plain:l", "x", "y", "z"), 3)
    check("LRANGE", r.lrange("plain:l", 0, -1), ["x", "y", "z"])
    check("LPOP count", r.lpop("plain:l", 2), ["x", "y"])
    check("SADD", r.sadd("plain:set", "a", "b", "c"), 3)
    check("SMEMBERS", r.smembers("plain:set"), {"a", "b", "c"})
    check("ZADD", r.zadd("plain:z", {"one": 1, "two": 2, "three": 3}), 3)
    check(
        "ZRANGE WITHSCORES",
        r.zrange("plain:z", 0, -1, withscores=True),
        [("one", 1.0), ("two", 2.0), ("three", 3.0)],
    )
    check("ZINCRBY", r.zincrby("plain:z", 10, "one"), 11.0)
    check("ZREVRANGE", r.zrevrange("plain:z", 0, 0), ["one"])
    check("TYPE", r.type("plain:z"), "zset")
    check("EXISTS", r.exists("plain:a", "plain:b", "plain:none"), 2)
    keys = sorted(r.scan_iter(match="plain:*", count=3))
    check(
        "SCAN plain:*",
        keys,
        sorted(["plain:s", "plain:a", "plain:b", "plain:f", "plain:h",
                "plain:l", "plain:set", "plain:z"]),
    )
    check("DEL", r.delete("plain:a", "plain:b", "plain:none"), 2)
    sid = r.xadd("plain:stream", {"k": "v"})
    check("XRANGE", r.xrange("plain:stream"), [(sid, {"k": "v"})])
    # A blocking pop served by a push from another connection.
    other = client()
    t = threading.Timer(0.2, lambda: other.rpush("plain:bl", "late"))
    t.start()
    got = r.blpop(["plain:bl"], timeout=5)
    t.join()
    check("BLPOP served by a later RPUSH", got, ("plain:bl", "late"))
    other.close()
    print("ok plain commands")


def transactional_pipeline(r):
    # Keys chosen to hash to many different slots (and so shards).
    keys = [f"tx:key:{i}" for i in range(8)]
    pipe = r.pipeline()  # transaction=True by default: MULTI ... EXEC
    for i, k in enumerate(keys):
        pipe.set(k, i)
    pipe.incr("tx:counter")
    pipe.incrby("tx:counter", 9)
    pipe.hset("tx:hash", mapping={"a": "1", "b": "2"})
    pipe.rpush("tx:list", "p", "q")
    pipe.zadd("tx:zset", {"m": 1.5})
    pipe.mget(keys)
    pipe.expire("tx:counter", 1000)
    res = pipe.execute()
    want = [True] * len(keys) + [1, 10, 2, 2, 1, [str(i) for i in range(8)], True]
    check("pipeline results", res, want)
    check("after pipeline: counter", r.get("tx:counter"), "10")
    check("after pipeline: hash", r.hgetall("tx:hash"), {"a": "1", "b": "2"})
    check_true("after pipeline: TTL set", r.ttl("tx:counter") > 0)

    # Chained style, as the docs show it.
    res = (r.pipeline().set("tx:chain", "a").append("tx:chain", "bc")
           .get("tx:chain").delete("tx:chain").exists("tx:chain").execute())
    check("chained pipeline", res, [True, 3, "abc", 1, 0])

    # A command failing at EXEC time: the others still apply (Redis has no
    # rollback); redis-py raises the first error, or returns it in place
    # with raise_on_error=False.
    r.set("tx:str", "text")
    pipe = r.pipeline()
    pipe.set("tx:before", "1").lpush("tx:str", "x").set("tx:after", "2")
    res = pipe.execute(raise_on_error=False)
    check("EXEC with failing command: length", len(res), 3)
    check("EXEC with failing command: first", res[0], True)
    check_true("EXEC with failing command: WRONGTYPE in place",
               isinstance(res[1], ResponseError) and "WRONGTYPE" in str(res[1]),
               f"got {res[1]!r}")
    check("EXEC with failing command: third", res[2], True)
    check("other commands applied", r.mget("tx:before", "tx:after"), ["1", "2"])
    pipe = r.pipeline()
    pipe.lpush("tx:str", "x")
    try:
        pipe.execute()
        raise Mismatch("EXEC with WRONGTYPE: execute() did not raise")
    except ResponseError as e:
        check_true("EXEC error text", "WRONGTYPE" in str(e), str(e))

    # A command rejected while queueing (wrong arity): EXECABORT, nothing runs.
    pipe = r.pipeline()
    pipe.set("tx:aborted", "1")
    pipe.execute_command("INCR")  # no key: arity error at queue time
    try:
        pipe.execute()
        raise Mismatch("queue-time error: execute() did not raise")
    except ResponseError as e:
        check_true("queue-time error mentions the command error",
                   "wrong number of arguments" in str(e).lower(), str(e))
    check("EXECABORT: nothing applied", r.exists("tx:aborted"), 0)

    # Explicit WATCH / MULTI with a pipeline, losing the race.
    other = client()
    r.set("tx:watched", "1")
    pipe = r.pipeline()
    pipe.watch("tx:watched")
    check("immediate-mode GET while watching", pipe.get("tx:watched"), "1")
    other.set("tx:watched", "changed")
    pipe.multi()
    pipe.set("tx:watched", "mine")
    try:
        pipe.execute()
        raise Mismatch("WATCH: EXEC after a concurrent write did not abort")
    except redis.WatchError:
        pass
    check("WATCH: concurrent value kept", r.get("tx:watched"), "changed")
    pipe.reset()
    other.close()

    # Non-transactional pipeline for contrast (plain pipelining).
    pipe = r.pipeline(transaction=False)
    for i in range(50):
        pipe.incr("tx:plainpipe")
    check("non-transactional pipeline", pipe.execute()[-1], 50)
    print("ok transactional pipeline")


def optimistic_locking():
    r = client()
    r.set("occ:counter", 0)
    threads, per_thread = 4, 25
    attempts = [0] * threads
    errors = []

    def worker(n):
        c = client()
        try:
            for _ in range(per_thread):
                def incr(pipe):
                    attempts[n] += 1
                    cur = int(pipe.get("occ:counter"))
                    time.sleep(0.001)  # widen the race window
                    pipe.multi()
                    pipe.set("occ:counter", cur + 1)
                    pipe.rpush("occ:log", f"{n}:{cur + 1}")

                c.transaction(incr, "occ:counter")
        except Exception as e:  # reported by the main thread
            errors.append(f"thread {n}: {e!r}")
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        check_true("transaction worker finished", not t.is_alive(), "hung")
    check("transaction worker errors", errors, [])
    total = threads * per_thread
    check("WATCH counter", r.get("occ:counter"), str(total))
    log = r.lrange("occ:log", 0, -1)
    check("every committed value once, in order",
          [int(x.split(":")[1]) for x in log], list(range(1, total + 1)))
    retries = sum(attempts) - total
    check_true("transaction(value_from_callable)",
               r.transaction(lambda p: p.get("occ:counter"), "occ:counter",
                             value_from_callable=True) == str(total))
    r.close()
    print(f"ok optimistic locking ({total} commits, {retries} retries)")


def lua_lock():
    a, b = client(), client()
    name = "lock:resource"
    la = a.lock(name, timeout=10)
    check("acquire", la.acquire(blocking=False), True)
    check("owned", la.owned(), True)
    check("locked", la.locked(), True)
    token = a.get(name)
    check_true("token stored", token is not None and len(token) > 0)
    pttl = a.pttl(name)
    check_true("lock TTL set", 0 < pttl <= 10000, f"pttl {pttl}")

    # thread_local=False: the token acquired in the contender thread below
    # must be visible to this thread too.
    lb = b.lock(name, timeout=10, thread_local=False)
    check("second client non-blocking acquire", lb.acquire(blocking=False), False)
    t0 = time.monotonic()
    check("second client acquire with blocking_timeout",
          lb.acquire(blocking_timeout=0.3), False)
    waited = time.monotonic() - t0
    check_true("blocking_timeout honoured", 0.15 <= waited < 3, f"{waited:.2f}s")
    check("not owned by the second client", lb.owned(), False)
    try:
        lb.release()
        raise Mismatch("releasing an unacquired lock did not raise")
    except LockError:
        pass
    try:
        lb.extend(5)
        raise Mismatch("extending an unacquired lock did not raise")
    except LockError:
        pass
    # Someone else's token: the Lua extend/release scripts must refuse.
    lb.local.token = b"not-the-token"
    try:
        lb.extend(5)
        raise Mismatch("extend with a foreign token did not raise")
    except LockNotOwnedError:
        pass
    try:
        lb.release()
        raise Mismatch("release with a foreign token did not raise")
    except LockNotOwnedError:
        pass
    lb.local.token = None
    check("lock kept after foreign attempts", a.get(name), token)

    check("extend (adds time)", la.extend(20), True)
    pttl = a.pttl(name)
    check_true("extend added to the TTL", 20000 < pttl <= 30000, f"pttl {pttl}")
    check("extend replace_ttl", la.extend(5, replace_ttl=True), True)
    pttl = a.pttl(name)
    check_true("replace_ttl set the TTL", 0 < pttl <= 5000, f"pttl {pttl}")
    check("reacquire", la.reacquire(), True)
    pttl = a.pttl(name)
    check_true("reacquire reset the TTL", 5000 < pttl <= 10000, f"pttl {pttl}")

    # A second client blocks until the first releases.
    result = {}

    def contender():
        t = time.monotonic()
        result["got"] = lb.acquire(blocking=True, blocking_timeout=5)
        result["waited"] = time.monotonic() - t

    th = threading.Thread(target=contender)
    th.start()
    time.sleep(0.5)
    check_true("contender still waiting while the lock is held", th.is_alive())
    la.release()
    th.join(10)
    check_true("contender finished", not th.is_alive(), "hung")
    check("contender acquired after release", result.get("got"), True)
    check_true("contender waited for the release",
               0.4 <= result["waited"] < 5, f"{result['waited']:.2f}s")
    check("owned by the contender now", lb.owned(), True)
    check("not owned by the first client", la.owned(), False)
    try:
        la.release()
        raise Mismatch("first client released twice without an error")
    except LockError:
        pass
    lb.release()
    check("lock key gone after release", a.exists(name), 0)

    # An expired lock: release reports it is no longer owned.
    lx = a.lock("lock:short", timeout=0.2)
    check("short lock acquire", lx.acquire(blocking=False), True)
    time.sleep(0.5)
    check("short lock expired", lx.locked(), False)
    try:
        lx.release()
        raise Mismatch("releasing an expired lock did not raise")
    except LockNotOwnedError:
        pass

    # Context-manager use, the common idiom.
    with a.lock("lock:ctx", timeout=5, blocking_timeout=2) as l:
        check("context lock held", l.owned(), True)
        check("context lock excludes others",
              b.lock("lock:ctx").acquire(blocking=False), False)
    check("context lock released", a.exists("lock:ctx"), 0)
    a.close()
    b.close()
    print("ok lua lock")


def registered_scripts(r):
    r.script_flush()
    src = """
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = 0 end
local nxt = tonumber(cur) + tonumber(ARGV[1])
redis.call('SET', KEYS[1], nxt)
return {nxt, ARGV[2]}
"""
    add = r.register_script(src)
    check("SCRIPT EXISTS before first call", r.script_exists(add.sha), [False])
    # First call: EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA.
    check("script first call", add(keys=["script:n"], args=[5, "x"]), [5, "x"])
    check("SCRIPT EXISTS after first call", r.script_exists(add.sha), [True])
    check("script second call", add(keys=["script:n"], args=[2, "y"]), [7, "y"])
    r.script_flush()
    check("script after SCRIPT FLUSH (fallback again)",
          add(keys=["script:n"], args=[1, "z"]), [8, "z"])

    # In a transactional pipeline: redis-py checks SCRIPT EXISTS and loads
    # missing scripts before sending MULTI.
    r.script_flush()
    pipe = r.pipeline()
    add(keys=["script:n"], args=[10, "p"], client=pipe)
    pipe.get("script:n")
    add(keys=["script:m"], args=[1, "q"], client=pipe)
    check("scripts in a pipeline", pipe.execute(), [[18, "p"], "18", [1, "q"]])

    # Errors raised by the script reach the caller.
    boom = r.register_script("return redis.error_reply('my failure')")
    try:
        boom()
        raise Mismatch("error_reply script did not raise")
    except ResponseError as e:
        check_true("error_reply text", "my failure" in str(e), str(e))
    # Script return-value conversions.
    conv = r.register_script(
        "return {1, 2.9, 'str', true, false, {ok='fine'}, {err='bad'}}")
    res = conv()
    check("script conversions: prefix", res[:5], [1, 2, "str", 1, None])
    check("script conversions: status", res[5], "fine")
    check_true("script conversions: error value", isinstance(res[6], ResponseError)
               and "bad" in str(res[6]), repr(res[6]))
    print("ok registered scripts")


def resp3():
    r = client(protocol=3)
    check("RESP3 PING", r.ping(), True)
    r.hset("r3:h", mapping={"a": "1"})
    check("RESP3 HGETALL (map)", r.hgetall("r3:h"), {"a": "1"})
    r.sadd("r3:s", "m")
    check("RESP3 SMEMBERS (set)", r.smembers("r3:s"), {"m"})
    r.zadd("r3:z", {"m": 2.5})
    check("RESP3 ZSCORE (double)", r.zscore("r3:z", "m"), 2.5)
    pipe = r.pipeline()
    pipe.incr("r3:n").hgetall("r3:h").get("r3:missing")
    check("RESP3 transactional pipeline", pipe.execute(), [1, {"a": "1"}, None])
    r.close()
    print("ok resp3")


def main():
    r = client()
    r.flushdb()
    plain_commands(r)
    transactional_pipeline(r)
    optimistic_locking()
    lua_lock()
    registered_scripts(r)
    resp3()
    r.close()
    print(f"all redis-py checks passed (redis-py {redis.__version__})")


if __name__ == "__main__":
    try:
        main()
    except Mismatch as e:
        print(f"MISMATCH: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # an unexpected client exception is a failure too
        import traceback
        traceback.print_exc()
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
