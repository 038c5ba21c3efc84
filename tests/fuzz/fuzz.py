#!/usr/bin/env python3
"""Differential fuzzer: cairn against redis-server 7.0.15, reply by reply.

Random command sequences over a tiny keyspace run on both servers; the first
reply that differs is shrunk to a minimal reproduction and written out as a
JSON line. See tests/fuzz/README.md. Python 3 standard library only, RESP2.
"""
import argparse
import os
import json
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Conn  # noqa: E402
from gen import Gen, FAMILIES, KEYS  # noqa: E402

CAIRN = int(os.environ.get("CAIRN_PORT", 7411))
REDIS = int(os.environ.get("REDIS_PORT", 7412))


# ---------------------------------------------------------------- normalisation
def bulk_sort_key(v):
    return repr(v)


def as_resp2(v):
    """A RESP3 reply in RESP2's shapes, for the comparisons that are not
    byte for byte: maps and sets as arrays, the null as a nil bulk."""
    t, x = v
    if t in ("%", "~", "*") and x is not None:
        return ("*", [as_resp2(e) for e in x])
    if t == "_":
        return ("$", None)
    return v


def normalize(v, norm):
    if norm == "ignore":
        return ("ignored",)
    v = as_resp2(v)
    t, x = v
    if t == "-":
        return v
    if norm == "sortlist" and t == "*" and x is not None:
        return ("*", sorted(x, key=bulk_sort_key))
    if norm == "sortpairs" and t == "*" and x is not None:
        pairs = [(x[i], x[i + 1]) for i in range(0, len(x) - 1, 2)]
        return ("*pairs", sorted(pairs, key=bulk_sort_key), len(x) % 2)
    if norm in ("scanpairs", "scanset") and t == "*" and x is not None and len(x) == 2:
        cur, items = x
        if items[0] == "*" and items[1] is not None:
            it = items[1]
            if norm == "scanpairs":
                it = sorted([(it[i], it[i + 1]) for i in range(0, len(it) - 1, 2)], key=bulk_sort_key)
            else:
                it = sorted(it, key=bulk_sort_key)
            return ("scan", cur, it)
        return v
    if norm == "function_list" and t == "*" and x is not None:
        # Libraries and a library's functions come in Redis's hash-table
        # order.
        libs = []
        for lib in x:
            if lib[0] == "*" and lib[1] is not None:
                items = list(lib[1])
                for i in range(0, len(items) - 1, 2):
                    if items[i] == ("$", b"functions") and items[i + 1][0] == "*":
                        items[i + 1] = ("*", sorted(items[i + 1][1] or [], key=repr))
                lib = ("*", items)
            libs.append(lib)
        return ("*", sorted(libs, key=repr))
    if norm == "arraylen" and t == "*" and x is not None:
        return ("*len", len(x))
    if norm == "ttl" and t == ":":
        return (":", "POS" if x >= 0 else x)
    if norm == "xpending_ext" and t == "*" and x is not None:
        out = []
        for e in x:
            if e[0] == "*" and e[1] is not None and len(e[1]) == 4:
                e = ("*", [e[1][0], e[1][1], ("IDLE",), e[1][3]])
            out.append(e)
        return ("*", out)
    if norm == "xinfo_consumers" and t == "*" and x is not None:
        out = []
        for e in x:
            if e[0] == "*" and e[1] is not None:
                items = list(e[1])
                for i in range(0, len(items) - 1, 2):
                    if items[i] in (("$", b"idle"), ("$", b"inactive")):
                        items[i + 1] = ("IDLE",)
                e = ("*", items)
            out.append(e)
        return ("*", out)
    if norm == "xinfo_stream" and t == "*" and x is not None:
        items = list(x)
        out = []
        for i in range(0, len(items) - 1, 2):
            if items[i] in (("$", b"radix-tree-keys"), ("$", b"radix-tree-nodes")):
                continue
            out += [items[i], items[i + 1]]
        return ("*", out)
    return v


def kind(v):
    t, x = v
    if t == "-":
        msg = x.decode("latin1")
        msg = re.sub(r"'[^']*'", "'_'", msg)
        msg = re.sub(r"\d+", "N", msg)
        return "ERR[" + msg[:60] + "]"
    if t == "*" and x is None:
        return "nil*"
    if t == "$" and x is None:
        return "nil$"
    return t


def show(v):
    """Pretty-print a parsed RESP value in redis-cli-ish compact form."""
    t, x = v
    if t == "+":
        return "+" + x.decode("latin1")
    if t == "-":
        return "(error) " + x.decode("latin1")
    if t == ":":
        return "(integer) %d" % x
    if t == "$":
        return "(nil)" if x is None else json.dumps(x.decode("latin1"))
    if t == "*":
        return "(nil array)" if x is None else "[" + ", ".join(show(e) for e in x) + "]"
    return repr(v)


# ---------------------------------------------------------------- runner
class Runner:
    def __init__(self):
        self.c = Conn(CAIRN)
        self.r = Conn(REDIS)
        self.ncmds = 0

    def reconnect(self):
        self.c.close()
        self.r.close()
        for _ in range(50):
            try:
                self.c = Conn(CAIRN)
                self.r = Conn(REDIS)
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("cannot reconnect")

    def flush(self):
        for conn in (self.c, self.r):
            # A shrunk sequence may have left a MULTI open.
            v, _ = conn.call(["RESET"])
            assert v == ("+", b"RESET"), v
            v, _ = conn.call(["FLUSHALL"])
            assert v == ("+", b"OK"), v
            # Libraries outlive FLUSHALL; each round starts without any.
            v, _ = conn.call(["FUNCTION", "FLUSH"])
            assert v == ("+", b"OK"), v

    def run(self, seq, stop_first=True, flush=True):
        """Run seq of (cmd, norm). Return list of diffs (index, cmd, redis, cairn, rawr, rawc)."""
        try:
            if flush:
                self.flush()
        except (OSError, ConnectionError):
            self.reconnect()
            self.flush()
        diffs = []
        for i, (cmd, norm) in enumerate(seq):
            self.ncmds += 1
            try:
                self.r.send(cmd)
                self.c.send(cmd)
                rv, rraw = self.r.read()
            except (OSError, ConnectionError) as e:
                raise SystemExit("redis failed: %r" % e)
            try:
                cv, craw = self.c.read()
            except (OSError, ConnectionError) as e:
                cv, craw = ("CRASH/TIMEOUT", repr(e)), b""
                diffs.append((i, cmd, rv, cv, rraw, craw))
                self.reconnect()
                return diffs
            if norm == "strict":
                same = rraw == craw
            else:
                same = normalize(rv, norm) == normalize(cv, norm)
            if not same:
                diffs.append((i, cmd, rv, cv, rraw, craw))
                if stop_first:
                    return diffs
        return diffs


READONLY = set("""GET STRLEN GETRANGE SUBSTR MGET GETBIT BITCOUNT BITPOS LCS EXISTS TYPE TTL PTTL EXPIRETIME
PEXPIRETIME HGET HMGET HLEN HSTRLEN HEXISTS HKEYS HVALS HGETALL HSCAN LRANGE LINDEX LLEN LPOS SMEMBERS SISMEMBER
SMISMEMBER SCARD SINTER SINTERCARD SUNION SDIFF SSCAN ZCARD ZSCORE ZMSCORE ZRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE
ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE ZRANK ZREVRANK ZUNION ZINTER ZDIFF ZINTERCARD ZCOUNT ZLEXCOUNT ZSCAN XRANGE
XREVRANGE XLEN XPENDING XINFO XREAD KEYS DBSIZE BITFIELD_RO PFCOUNT GEODIST GEOPOS GEOHASH GEOSEARCH
SORT_RO""".split())


def signature(cmd, rv, cv):
    name = cmd[0].upper()
    if name in ("XGROUP", "XINFO") and len(cmd) > 1:
        name += " " + cmd[1].upper()
    return "%s | redis=%s | cairn=%s" % (name, kind(rv), kind(cv))


def contents(k):
    """The reads that show what key `k` holds, whatever its type."""
    return [
        (["TYPE", k], "strict"),
        (["GET", k], "strict"),
        (["HGETALL", k], "sortpairs"),
        (["LRANGE", k, "0", "-1"], "strict"),
        (["SMEMBERS", k], "sortlist"),
        (["ZRANGE", k, "0", "-1", "WITHSCORES"], "strict"),
        (["XRANGE", k, "-", "+"], "strict"),
        (["XINFO", "STREAM", k], "xinfo_stream"),
        (["XINFO", "GROUPS", k], "strict"),
    ]


def dump_cmds():
    out = []
    for k in KEYS:
        out += contents(k) + [(["TTL", k], "ttl")]
    out.append((["DBSIZE"], "strict"))
    return out


def restored_view(conn, key):
    """What is compared of a key restored from a DUMP payload: its
    contents and its encoding."""
    out = []
    for cmd, norm in contents(key) + [(["OBJECT", "ENCODING", key], "strict")]:
        v, _ = conn.call(cmd)
        out.append((" ".join(cmd), normalize(v, norm)))
    return out


class Events:
    """A subscriber on each server to every keyspace and keyevent
    notification (notify-keyspace-events KEA): what a round's commands
    published, in order, must be Redis's. Active expiry's `expired`
    events come when the reaper gets there, and are left out."""

    def __init__(self):
        self.subs = None

    def start(self, runner):
        """Turns notifications on, subscribes once, and drops whatever
        earlier commands published."""
        for conn in (runner.r, runner.c):
            conn.call(["CONFIG", "SET", "notify-keyspace-events", "KEA"])
        if self.subs is None:
            self.subs = (Conn(REDIS), Conn(CAIRN))
            for sub in self.subs:
                v, _ = sub.call(["PSUBSCRIBE", "__key*__:*"])
                assert v[0] == "*", v
        self.take()

    def take(self):
        """Every message each subscriber got so far: a PING answers after
        what was published before it."""
        out = []
        for sub in self.subs:
            sub.send(["PING"])
            got = []
            while True:
                v, _ = sub.read()
                items = v[1] if v[0] == "*" else None
                if items and items[0] == ("$", b"pong"):
                    break
                if items and items[0] == ("$", b"pmessage") and items[3][1] != b"expired":
                    got.append((items[2][1], items[3][1]))
            out.append(got)
        return out

    def compare(self):
        """The first difference between the two servers' messages, with
        the messages before it, or None."""
        time.sleep(0.05)
        r, c = self.take()
        for i in range(max(len(r), len(c))):
            a = r[i] if i < len(r) else None
            b = c[i] if i < len(c) else None
            if a != b:
                return {"index": i, "before": [x for x in r[max(0, i - 6):i]], "redis": a, "cairn": b,
                        "counts": (len(r), len(c))}
        return None


def dump_check(runner):
    """Moves every key of the round both ways: each server restores its
    own DUMP of the key and the other's, and the two copies must read the
    same (types, encodings, contents, stream metadata). Returns what
    differed, as (key, text) pairs."""
    found = []
    for k in KEYS:
        rp = as_resp2(runner.r.call(["DUMP", k])[0])
        cp = as_resp2(runner.c.call(["DUMP", k])[0])
        if rp == ("$", None) and cp == ("$", None):
            continue
        if rp[0] != "$" or cp[0] != "$" or (rp[1] is None) != (cp[1] is None):
            found.append((k, "DUMP: redis %s, cairn %s" % (show(rp), show(cp))))
            continue
        for name, conn, own, other in (("redis", runner.r, rp[1], cp[1]),
                                       ("cairn", runner.c, cp[1], rp[1])):
            copies = []
            for copy, payload in (("dumpcheck:own", own), ("dumpcheck:other", other)):
                v, _ = conn.call(["RESTORE", copy, "0", payload, "REPLACE"])
                if v != ("+", b"OK"):
                    found.append((k, "%s refuses the other's DUMP: %s" % (name, show(v))))
                copies.append(restored_view(conn, copy))
            conn.call(["DEL", "dumpcheck:own", "dumpcheck:other"])
            for (cmd, a), (_, b) in zip(*copies):
                if a != b:
                    found.append((k, "%s: %s of its own DUMP %r, of the other's %r" % (name, cmd, a, b)))
    return found


def gen_round(seed, n, families=FAMILIES):
    rng = random.Random(seed)
    fams = rng.sample(families, min(len(families), rng.choice([1, 1, 2, 2, 3])))
    g = Gen(rng, fams)
    seq = [g.gen() for _ in range(n)]
    if rng.random() < 0.3:
        seq = with_transactions(rng, seq)
    if rng.random() < 0.3:
        seq = in_scripts(rng, seq)
    if rng.random() < 0.3:
        # The round speaks RESP3: maps, sets, doubles, nulls and booleans
        # are compared byte for byte too (the runner's RESET at the next
        # round goes back to RESP2). HELLO's own reply names the server.
        seq = [(["HELLO", "3"], "ignore")] + seq
    return seq + dump_cmds(), fams


# Run by EVAL: the command's reply goes through Lua and back (RESP2), and
# an error raised by redis.call carries the script's name and line.
SCRIPTS = ["return redis.call(unpack(ARGV))", "return redis.pcall(unpack(ARGV))",
           # Replies reach the script in RESP3 (maps, sets, doubles, big
           # numbers, booleans as Lua tables) and go back in the client's.
           "redis.setresp(3) return redis.call(unpack(ARGV))"]


def in_scripts(rng, seq):
    """Runs some commands compared byte for byte from a script instead:
    EVAL of redis.call or redis.pcall with the command's words as ARGV
    (no declared keys: cairn runs such a script holding every shard)."""
    out = []
    for cmd, norm in seq:
        if (norm == "strict" and rng.random() < 0.1
                and cmd[0].upper() not in ("MULTI", "EXEC", "DISCARD")):
            out.append((["EVAL", rng.choice(SCRIPTS), "0"] + cmd, "strict"))
        else:
            out.append((cmd, norm))
    return out


def with_transactions(rng, seq):
    """Wraps some runs of commands compared byte for byte in MULTI ... EXEC:
    each must be queued (or refused) as Redis does, and EXEC's array must
    be Redis's (blocking commands run as their non-blocking forms there)."""
    out, i = [], 0
    while i < len(seq):
        k = rng.randint(1, 4)
        run = seq[i:i + k]
        if rng.random() < 0.1 and all(norm == "strict" for _, norm in run):
            out.append((["MULTI"], "strict"))
            out.extend(run)
            out.append((["EXEC"], "strict"))
            i += k
        else:
            out.append(seq[i])
            i += 1
    return out


# ---------------------------------------------------------------- shrinking
def shrink(runner, seq, sig):
    def still(s):
        ds = runner.run(s, stop_first=False)
        for d in ds:
            if signature(d[1], d[2], d[3]) == sig:
                return d[0]
        return None

    idx = still(seq)
    if idx is None:
        return None
    seq = seq[:idx + 1]
    n = 2
    while len(seq) >= 2:
        rem = len(seq) - 1
        chunk = max(1, -(-rem // n))
        some = False
        for st in range(0, rem, chunk):
            cand = seq[:st] + seq[min(st + chunk, rem):]
            j = still(cand)
            if j is not None:
                seq = cand[:j + 1]
                n = max(n - 1, 2)
                some = True
                break
        if not some:
            if chunk == 1:
                break
            n = min(n * 2, len(seq) - 1)
    return seq


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1000000)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=25)
    ap.add_argument("--out", default="findings.jsonl")
    ap.add_argument("--known", default="known.txt", help="signatures to treat as already known")
    ap.add_argument("--dumps", action="store_true",
                    help="after each round without differences, move every key both ways with"
                         " DUMP and RESTORE and compare the copies")
    ap.add_argument("--events", action="store_true",
                    help="subscribe to every keyspace notification and compare what each round"
                         " published, in order")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help="comma-separated families a round draws from (a few commands of the"
                         " others still come)")
    args = ap.parse_args()
    families = args.families.split(",")
    events = Events() if args.events else None
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error("unknown families: %s (known: %s)" % (",".join(unknown), ",".join(FAMILIES)))

    known = {}
    try:
        for line in open(args.known):
            line = line.rstrip("\n")
            if line:
                known[line] = 0
    except FileNotFoundError:
        pass
    out = open(args.out, "a")
    shapes = set()
    try:
        for line in open(args.out):
            r = json.loads(line)
            if "shape" in r:
                shapes.add(r["shape"])
    except FileNotFoundError:
        pass
    runner = Runner()
    t0 = time.time()
    rounds = 0
    fuzz_cmds = 0
    unknown_cmds = set()
    for rnd in range(args.rounds):
        if time.time() - t0 > args.minutes * 60:
            break
        seed = args.seed * 1000003 + rnd
        seq, fams = gen_round(seed, args.n, families)
        rounds += 1
        fuzz_cmds_before = runner.ncmds
        if events:
            runner.flush()
            events.start(runner)
        # run; on known error-only differences continue, else stop the round
        ds = runner.run(seq, stop_first=False, flush=not events)
        fuzz_cmds += runner.ncmds - fuzz_cmds_before
        if events and not ds:
            d = events.compare()
            if d is not None:
                sig = "EVENTS %r | %r" % (d["redis"], d["cairn"])
                sig = re.sub(r"\d+", "N", sig)[:100]
                if sig not in known:
                    known[sig] = 1
                    rec = {"sig": sig, "seed": seed, "events": repr(d), "repro": [c for c, _ in seq]}
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print("NEW:", sig, "\n   ", repr(d)[:700], flush=True)
        if not ds and args.dumps:
            for k, what in dump_check(runner):
                sig = "DUMPCHECK " + re.sub(r"'.*", "", what)[:60]
                if sig in known:
                    continue
                known[sig] = 1
                rec = {"sig": sig, "seed": seed, "key": k, "what": what,
                       "repro": [c for c, _ in seq]}
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print("NEW:", sig, "\n   ", k, what[:600], flush=True)
        for d in ds:
            i, cmd, rv, cv, rraw, craw = d
            if cv[0] == "-" and cv[1].startswith(b"ERR unknown command"):
                unknown_cmds.add(cmd[0].upper())
            sig = signature(cmd, rv, cv)
            both_err = rv[0] == "-" and cv[0] == "-"
            ro = cmd[0].upper() in READONLY
            if sig in known:
                known[sig] += 1
                if both_err or known[sig] > 20:
                    if both_err or ro:
                        continue
                    break
            else:
                known[sig] = 1
            m = shrink(runner, seq, sig)
            if m is not None:
                shape = sig + " || " + ",".join(sorted(set(c[0].upper() for c, _ in m)))
                if shape in shapes:
                    if ro:
                        continue
                    break
                shapes.add(shape)
            if m is None:
                rec = {"sig": sig, "seed": seed, "flaky": True, "cmd": cmd, "redis": show(rv), "cairn": show(cv)}
            else:
                last = runner.run(m, stop_first=False)
                lastd = [x for x in last if signature(x[1], x[2], x[3]) == sig]
                ld = lastd[0] if lastd else d
                rec = {"sig": sig, "shape": shape, "seed": seed, "repro": [c for c, _ in m], "redis": show(ld[2]),
                       "cairn": show(ld[3]), "redis_raw": ld[4].decode("latin1"),
                       "cairn_raw": ld[5].decode("latin1") if isinstance(ld[5], bytes) else ld[5]}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print("NEW:", sig, flush=True)
            if m:
                for c, _ in m:
                    print("   ", " ".join(json.dumps(a) if (not a or " " in a or not a.isprintable()) else a for a in c))
                print("    redis:", rec["redis"])
                print("    cairn:", rec["cairn"], flush=True)
            break  # stop the round after a new finding (state may diverge)
        if rounds % 100 == 0:
            print("rounds=%d cmds=%d (incl shrink %d) elapsed=%.0fs" % (rounds, fuzz_cmds, runner.ncmds, time.time() - t0), flush=True)
    print("DONE rounds=%d cmds=%d (incl shrink %d) elapsed=%.0fs" % (rounds, fuzz_cmds, runner.ncmds, time.time() - t0))
    print("unknown commands:", sorted(unknown_cmds))
    print("known signature hit counts:")
    for k, v in sorted(known.items(), key=lambda kv: -kv[1]):
        print("  %6d  %s" % (v, k))


if __name__ == "__main__":
    main()
