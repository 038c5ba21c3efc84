#!/usr/bin/env python3
"""Replication fuzzer: cairn as a replica of redis-server 7.0.15.

The same random rounds as fuzz.py run on a Redis primary only; cairn
follows it (REPLICAOF). After each round, once the primary's WAIT says the
replica has everything, the two datasets are compared with DEBUG DIGEST
(cairn computes Redis's digest); where they differ, key by key with
DEBUG DIGEST-VALUE, and the round is written out. See tests/fuzz/README.md.

    CAIRN_PORT=7431 REDIS_PORT=7432 python3 tests/fuzz/replica.py --minutes 5

cairn must allow DEBUG (`enable-debug-command yes`). Python 3 standard
library only.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Conn  # noqa: E402
from fuzz import gen_round  # noqa: E402
from gen import FAMILIES  # noqa: E402

CAIRN = int(os.environ.get("CAIRN_PORT", 7431))
REDIS = int(os.environ.get("REDIS_PORT", 7432))

# What would end the experiment rather than test replication: the primary
# going away or changing role, a client killing the link, DEBUG's reloads
# and sleeps, CONFIG changes that the replica does not share.
SKIP = {"SHUTDOWN", "REPLICAOF", "SLAVEOF", "DEBUG", "CLIENT", "CONFIG", "FAILOVER",
        "MONITOR", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "QUIT", "SYNC", "PSYNC",
        "WAIT", "SAVE", "BGSAVE", "BGREWRITEAOF"}


def undefined(c):
    """Writes whose result Redis leaves undefined, where cairn's may
    differ (fuzz.py compares their replies loosely): a lex range over
    members of different scores, geo members at equal distances cut by
    COUNT. Also what Redis changes on a primary without telling its
    replicas, which a Redis replica misses as cairn does: BITFIELD with
    OVERFLOW FAIL (also called by a script) creates a missing key, or
    pads a short one, even when no write succeeds, and is then not
    propagated; SORT and SORT_RO (also called by a script)
    turn a sorted set's listpack into a skiplist, which later decides
    whether a score of -0 keeps its sign, and are propagated only with
    STORE and only when they succeed."""
    words = [w.upper() if isinstance(w, str) else "" for w in c]
    if words[0] == "ZREMRANGEBYLEX" or (words[0] == "ZRANGESTORE" and "BYLEX" in words):
        return True
    if "BITFIELD" in words and "FAIL" in words:
        return True
    if "SORT" in words or "SORT_RO" in words:
        return True
    return words[0].startswith("GEO") and "COUNT" in words and (
        words[0] == "GEOSEARCHSTORE" or "STORE" in words or "STOREDIST" in words)


def call(conn, args):
    v, _ = conn.call(args)
    return v


def keys_by_db(conn):
    """{db: {key: digest}} of every database holding keys."""
    out = {}
    for db in range(16):
        call(conn, ["SELECT", db])
        kind, keys = call(conn, ["KEYS", "*"])
        if not keys:
            continue
        digests = call(conn, ["DEBUG", "DIGEST-VALUE"] + [k for _, k in keys])[1]
        out[db] = {k: d for (_, k), (_, d) in zip(keys, digests)}
    call(conn, ["SELECT", 0])
    return out


def same(primary, replica):
    """Whether the datasets agree, given the replica a moment to apply
    what it has acknowledged."""
    for _ in range(20):
        if call(primary, ["DEBUG", "DIGEST"]) == call(replica, ["DEBUG", "DIGEST"]):
            return True
        time.sleep(0.05)
    return False


def replay(primary, replica, seq):
    """Runs one round a command at a time (a transaction as one step),
    stopping at the first step after which the datasets differ: prints it,
    the step's commands and replies, and what the differing keys hold on
    each side before and after."""
    step, before = [], None
    for c in seq:
        if not step:
            call(primary, ["HELLO", "2"])
            before = {k: call(primary, ["DUMP", k]) for _, k in call(primary, ["KEYS", "*"])[1]}
        step.append((c, call(primary, c)))
        if c[0].upper() == "MULTI" and step[-1][1][0] == "+":
            continue
        if len(step) > 1 and step[0][0][0].upper() == "MULTI" and \
                c[0].upper() not in ("EXEC", "DISCARD"):
            continue
        call(primary, ["WAIT", 1, 5000])
        if not same(primary, replica):
            print("the datasets differ after:")
            for cmd, reply in step:
                print("   ", cmd, "->", reply)
            p, r = keys_by_db(primary), keys_by_db(replica)
            for db in sorted(set(p) | set(r)):
                for k in sorted(set(p.get(db, {})) | set(r.get(db, {}))):
                    if p.get(db, {}).get(k) != r.get(db, {}).get(k):
                        print("  db %d key %r before (Redis's DUMP): %r" % (db, k, before.get(k)))
                        for name, conn in (("redis", primary), ("cairn", replica)):
                            call(conn, ["SELECT", db])
                            print("    %s: %r" % (name, call(conn, ["DUMP", k])))
                            call(conn, ["SELECT", 0])
            return
        step = []
    print("the round left the datasets alike")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--out", default="replica-findings.jsonl")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--keep", action="store_true",
                    help="keep the data from round to round (longer histories, larger"
                         " values; a finding then needs the rounds before it)")
    ap.add_argument("--replay", type=int, metavar="ROUND",
                    help="run the rounds before ROUND (0-based, as found), then ROUND one"
                         " command at a time, and show the first that leaves the datasets"
                         " differing")
    args = ap.parse_args()
    families = args.families.split(",")

    primary, replica = Conn(REDIS), Conn(CAIRN)
    call(primary, ["FLUSHALL"])
    call(primary, ["FUNCTION", "FLUSH"])
    call(primary, ["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
    call(replica, ["REPLICAOF", "127.0.0.1", REDIS])
    deadline = time.time() + 20
    while call(replica, ["ROLE"])[1][3][1] != b"connected":
        if time.time() > deadline:
            raise SystemExit("the replica did not connect")
        time.sleep(0.05)

    out = open(args.out, "a")
    t0, rounds, cmds, found = time.time(), 0, 0, 0
    while args.replay is not None or time.time() - t0 < args.minutes * 60:
        seed = args.seed * 1000003 + rounds
        seq, _ = gen_round(seed, args.n, families)
        seq = [c for c, _ in seq if c[0].upper() not in SKIP and not undefined(c)]
        if rounds == args.replay:
            call(primary, ["RESET"])
            if not args.keep:
                call(primary, ["FLUSHALL"])
                call(primary, ["FUNCTION", "FLUSH"])
            replay(primary, replica, seq)
            return
        rounds += 1
        # Each round starts empty, so that its commands alone reproduce
        # what it found (the flush replicates too).
        call(primary, ["RESET"])
        if not args.keep:
            call(primary, ["FLUSHALL"])
            call(primary, ["FUNCTION", "FLUSH"])
        for c in seq:
            primary.send(c)
        for _ in seq:
            primary.read()
        cmds += len(seq)
        call(primary, ["RESET"])
        acked = call(primary, ["WAIT", 1, 5000])
        if acked != (":", 1):
            print("round %d: WAIT answered %r" % (rounds, acked), flush=True)
        if args.replay is not None:
            continue
        if not same(primary, replica):
            p, r = keys_by_db(primary), keys_by_db(replica)
            diff = []
            for db in sorted(set(p) | set(r)):
                pk, rk = p.get(db, {}), r.get(db, {})
                for k in sorted(set(pk) | set(rk)):
                    if pk.get(k) != rk.get(k):
                        diff.append([db, k.decode(errors="replace"),
                                     (pk.get(k) or b"-").decode(), (rk.get(k) or b"-").decode()])
            found += 1
            for d in diff[:3]:
                db, k = d[0], d[1]
                for name, conn in (("redis", primary), ("cairn", replica)):
                    call(conn, ["SELECT", db])
                    t = call(conn, ["TYPE", k])
                    d.append([name, t, call(conn, ["DEBUG", "DIGEST-VALUE", k]),
                              call(conn, ["DUMP", k])])
                    call(conn, ["SELECT", 0])
            rec = {"seed": seed, "diff": [[repr(x) for x in d] for d in diff[:20]],
                   "repro": [[a if isinstance(a, str) else str(a) for a in c] for c in seq]}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print("DIFF round %d seed %d: %s" % (rounds - 1, seed, diff[:5]), flush=True)
    print("rounds %d, commands %d, rounds that differed %d" % (rounds, cmds, found))


if __name__ == "__main__":
    main()
