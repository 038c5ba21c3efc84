#!/usr/bin/env python3
"""redis-py's RedisCluster against a cairn cluster, used as its users do.

Usage: py_cluster.py PORT   (any node of the cluster on 127.0.0.1:PORT;
redis-py on the import path)

Covers: discovery (CLUSTER SLOTS), keys spread over every node, MGET/MSET
across slots (redis-py splits them per slot), hash-tagged multi-key
commands, a cluster pipeline, a transaction on one slot, the Lua-based
Lock, and a MOVED followed after a slot changes owner under the client.
Exits non-zero naming the failing check.
"""

import sys

import redis
from redis.cluster import RedisCluster

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 7000


def check(what, got, want):
    if got != want:
        raise SystemExit(f"FAIL {what}: got {got!r}, expected {want!r}")


rc = RedisCluster(host="127.0.0.1", port=PORT, decode_responses=True)
nodes = rc.get_primaries()
check("three primaries discovered", len(nodes), 3)

for i in range(300):
    rc.set(f"user:{i}", i)
check("values read back", [rc.get(f"user:{i}") for i in range(300)], [str(i) for i in range(300)])
sizes = [rc.dbsize(target_nodes=n) for n in nodes]
check("keys on every node", all(s > 0 for s in sizes), True)
check("keys in all", sum(sizes), 300)
print("spread:", sizes)

rc.mset_nonatomic({"a": "1", "b": "2", "c": "3"})
check("mget across slots", rc.mget_nonatomic(["a", "b", "c"]), ["1", "2", "3"])
rc.mset({"{cart:7}.items": "3", "{cart:7}.total": "42"})
check("mget one slot", rc.mget("{cart:7}.items", "{cart:7}.total"), ["3", "42"])
check("sunionstore one slot", rc.sadd("{s}1", "x", "y") + rc.sadd("{s}2", "y", "z"), 4)
check("sunion", sorted(rc.sunion("{s}1", "{s}2")), ["x", "y", "z"])

pipe = rc.pipeline()
for i in range(50):
    pipe.incr(f"counter:{i % 7}")
results = pipe.execute()
check("pipeline replies", len(results), 50)
check("pipeline counts", sum(int(rc.get(f"counter:{i}")) for i in range(7)), 50)
print("pipeline ok")

# A transaction of one slot, sent to the slot's node as redis-py does it.
node = rc.get_node_from_key("{acct}.a")
tx = redis.Redis(host=node.host, port=node.port, decode_responses=True)
p = tx.pipeline(transaction=True)
p.set("{acct}.a", 10).incrby("{acct}.a", 5).get("{acct}.a")
check("transaction", p.execute(), [True, 15, "15"])
try:
    tx.execute_command("MSET", "a", "1", "b", "2")
    raise SystemExit("FAIL cross-slot MSET was accepted")
except redis.ResponseError as e:
    check("crossslot", str(e), "CROSSSLOT Keys in request don't hash to the same slot")
print("transaction ok")

lock = rc.lock("resource-lock", timeout=5)
check("lock acquired", lock.acquire(blocking=False), True)
check("lock held elsewhere", rc.lock("resource-lock", timeout=5).acquire(blocking=False), False)
lock.release()
check("lock released", rc.exists("resource-lock"), 0)
print("lock ok")

# Move the slot of a key to another node behind the client's back; the
# client follows the MOVED it then gets.
key = "moving-key"
rc.set(key, "v1")
slot = rc.keyslot(key)
src = rc.get_node_from_key(key)
dst = next(n for n in nodes if n.name != src.name)
s = redis.Redis(host=src.host, port=src.port, decode_responses=True)
d = redis.Redis(host=dst.host, port=dst.port, decode_responses=True)
src_id, dst_id = s.execute_command("CLUSTER MYID"), d.execute_command("CLUSTER MYID")
d.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
s.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
keys = s.execute_command("CLUSTER GETKEYSINSLOT", slot, 100)
s.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "KEYS", *keys)
d.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
s.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
check("read after the move", rc.get(key), "v1")
rc.set(key, "v2")
check("write after the move", d.get(key), "v2")
print("moved ok")
