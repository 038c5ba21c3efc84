#!/usr/bin/env python3
"""redis-py's Pub/Sub API end to end against cairn.

Usage: py_pubsub.py PORT   (the server on 127.0.0.1:PORT; redis-py on the
import path)

Covers, in RESP2 and RESP3: `pubsub()` with subscribe/psubscribe and
`get_message`, message handlers run by `run_in_thread`, `listen()`,
sharded Pub/Sub (ssubscribe / spublish), PUBSUB introspection, publishing
from a transactional pipeline, and RESP3 push handling on a connection
that also runs ordinary commands. Exits non-zero naming the failed check.
"""

import logging
import sys
import threading
import time

import redis

# redis-py 5.0 logs every RESP3 push at INFO level, unconfigured loggers
# included; the messages are checked below, not printed.
logging.getLogger("push_response").setLevel(logging.WARNING)

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379


class Mismatch(Exception):
    pass


def check(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, expected {want!r}")


def client(protocol):
    return redis.Redis(
        host="127.0.0.1",
        port=PORT,
        protocol=protocol,
        decode_responses=True,
        socket_timeout=10,
    )


def next_message(p, timeout=5.0):
    """The next real message (not a subscribe confirmation)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if m is not None:
            return m
    raise Mismatch("no message arrived within %.1fs" % timeout)


def channels_and_patterns(protocol):
    pub = client(protocol)
    p = client(protocol).pubsub()
    p.subscribe("news.tech", "news.art")
    p.psubscribe("news.*")
    # Confirmations, in order, with running counts.
    seen = [p.get_message(timeout=5) for _ in range(3)]
    check(
        "confirmations",
        [(m["type"], m["channel"], m["data"]) for m in seen],
        [
            ("subscribe", "news.tech", 1),
            ("subscribe", "news.art", 2),
            ("psubscribe", "news.*", 3),
        ],
    )
    check("publish counts channel + pattern", pub.publish("news.tech", "hello"), 2)
    first = next_message(p)
    second = next_message(p)
    got = sorted(
        [(m["type"], m["pattern"], m["channel"], m["data"]) for m in (first, second)],
        key=lambda t: t[0],
    )
    check(
        "message and pmessage",
        got,
        [
            ("message", None, "news.tech", "hello"),
            ("pmessage", "news.*", "news.tech", "hello"),
        ],
    )
    check("pattern only", pub.publish("news.sport", "goal"), 1)
    m = next_message(p)
    check("pmessage of news.sport", (m["type"], m["channel"], m["data"]), ("pmessage", "news.sport", "goal"))
    check("numsub", pub.pubsub_numsub("news.tech", "nobody"), [("news.tech", 1), ("nobody", 0)])
    check("numpat", pub.pubsub_numpat(), 1)
    check("channels", sorted(pub.pubsub_channels("news.*")), ["news.art", "news.tech"])
    # Order: a burst from one publisher arrives in publish order.
    for i in range(500):
        pub.publish("news.art", str(i))
    got = []
    while len(got) < 1000:
        m = next_message(p)
        if m["type"] == "message":
            got.append(int(m["data"]))
        else:
            got.append(None)
    check("burst order", [x for x in got if x is not None], list(range(500)))
    p.unsubscribe()
    p.punsubscribe()
    deadline = time.monotonic() + 5
    while pub.pubsub_numpat() != 0 and time.monotonic() < deadline:
        p.get_message(timeout=0.1)
    check("numpat after punsubscribe", pub.pubsub_numpat(), 0)
    p.close()


def handler_thread(protocol):
    pub = client(protocol)
    got = []
    done = threading.Event()

    def on_message(m):
        got.append(m["data"])
        if len(got) == 3:
            done.set()

    p = client(protocol).pubsub()
    p.subscribe(**{"jobs": on_message})
    worker = p.run_in_thread(sleep_time=0.05, daemon=True)
    deadline = time.monotonic() + 5
    while pub.pubsub_numsub("jobs")[0][1] != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    for x in ("a", "b", "c"):
        pub.publish("jobs", x)
    check("handler got every message", done.wait(5), True)
    check("handler order", got, ["a", "b", "c"])
    worker.stop()
    worker.join(5)
    p.close()


def listen_and_sharded(protocol):
    pub = client(protocol)
    p = client(protocol).pubsub()
    p.ssubscribe("orders{1}")
    check("ssubscribe confirmation", p.get_sharded_message(timeout=5)["type"], "ssubscribe")
    check("shard numsub", pub.pubsub_shardnumsub("orders{1}"), [("orders{1}", 1)])
    check("shard channels", pub.pubsub_shardchannels(), ["orders{1}"])
    check("spublish", pub.spublish("orders{1}", "o-1"), 1)
    check("publish does not reach a shard channel", pub.publish("orders{1}", "x"), 0)
    m = None
    deadline = time.monotonic() + 5
    while m is None and time.monotonic() < deadline:
        m = p.get_sharded_message(ignore_subscribe_messages=True, timeout=0.2)
    check("smessage", (m["type"], m["channel"], m["data"]), ("smessage", "orders{1}", "o-1"))
    p.sunsubscribe()
    p.close()

    p = client(protocol).pubsub()
    p.subscribe("feed")
    pub_thread = threading.Thread(
        target=lambda: [time.sleep(0.2), [pub.publish("feed", str(i)) for i in range(3)]]
    )
    pub_thread.start()
    got = []
    for m in p.listen():
        if m["type"] == "message":
            got.append(m["data"])
            if len(got) == 3:
                break
    pub_thread.join()
    check("listen", got, ["0", "1", "2"])
    p.close()


def transactional_publish(protocol):
    pub = client(protocol)
    p = client(protocol).pubsub()
    p.subscribe("tx")
    p.get_message(timeout=5)
    with pub.pipeline(transaction=True) as pipe:
        pipe.set("tx:key", "v1")
        pipe.publish("tx", "changed")
        check("pipeline replies", pipe.execute(), [True, 1])
    m = next_message(p)
    check("message from EXEC", m["data"], "changed")
    # The subscriber can read what the transaction wrote once told.
    check("value visible to the subscriber", pub.get("tx:key"), "v1")
    p.close()


def resp3_push_with_commands():
    c = client(3)
    p = c.pubsub()
    p.subscribe("r3")
    p.get_message(timeout=5)
    # RESP3 allows ordinary commands on the subscribed connection.
    conn = p.connection
    conn.send_command("PING")
    check("PING on a subscribed RESP3 connection", conn.read_response(), "PONG")
    client(3).publish("r3", "pushed")
    check("push after command", next_message(p)["data"], "pushed")
    p.close()


def main():
    client(2).flushall()
    for protocol in (2, 3):
        channels_and_patterns(protocol)
        handler_thread(protocol)
        listen_and_sharded(protocol)
        transactional_publish(protocol)
        print(f"RESP{protocol}: channels, patterns, handlers, listen, sharded, transactions ok")
    resp3_push_with_commands()
    print("RESP3 pushes between replies ok")


if __name__ == "__main__":
    try:
        main()
    except Mismatch as e:
        print("FAILED:", e)
        sys.exit(1)
