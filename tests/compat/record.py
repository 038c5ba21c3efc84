#!/usr/bin/env python3
"""Record compatibility transcripts against a real Redis 7.0.x.

Usage:
    python3 tests/compat/record.py              # record every cases/*.txt
    python3 tests/compat/record.py strings bits # record only these cases
    python3 tests/compat/record.py --addr 127.0.0.1:6379 strings
                                                # use an already-running server
                                                # (must be Redis 7.0.x on loopback;
                                            # a cluster node for !cluster cases)

For each tests/compat/cases/<name>.txt this writes tests/compat/expected/<name>.txt.
The format of both files is described in tests/compat/README.md; tests/compat.rs
replays the same files against cairn.

Python 3.11 standard library only.  If redis-server is missing it is installed
with apt-get (Debian package `redis-server`).  The server runs on a free port on
127.0.0.1 with a temporary directory and no persistence, and is stopped at the
end.  A case whose first line is `!cluster` runs on a fresh cluster-mode server
of its own, one whose first line is `!debug` on a fresh server started with
`--enable-debug-command local --enable-module-command local`.  Nothing is
ever sent anywhere but 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
EXPECTED = HERE / "expected"

# Timeouts (seconds).
READ_TIMEOUT = 5.0  # any single reply
RAW_NO_REPLY_WAIT = 1.0  # !raw: how long to wait for a first complete reply
RAW_GRACE = 0.3  # !raw: after a complete reply, quiet time that ends the read
DRAIN_QUIET = 0.2  # !drain: quiet time that ends the read

# The connection every case starts on (`!conn main` switches back to it).
MAIN_CONN = b"main"


# Expected-file header line giving the port of the server that was recorded.
PORT_HEADER = "# recorded on port: "


class CaseError(Exception):
    pass


# --------------------------------------------------------------------------
# Tokenising case lines (the rules of redis-cli's argument splitter)
# --------------------------------------------------------------------------

def _is_hex(c: int) -> bool:
    return c in b"0123456789abcdefABCDEF"


def split_args(line: bytes) -> list[bytes]:
    """Split a line the way redis-cli does.

    Whitespace separates tokens.  "double quoted" tokens understand
    \\" \\\\ \\n \\r \\t \\b \\a and \\xHH; any other escaped character stands
    for itself.  'single quoted' tokens are literal except \\' for a quote.
    A closing quote must be followed by whitespace or the end of the line.
    """
    args: list[bytes] = []
    p = 0
    n = len(line)
    ws = b" \n\r\t\x00"
    while True:
        while p < n and line[p] in b" \t\r\n\v\f":
            p += 1
        if p >= n:
            return args
        cur = bytearray()
        inq = insq = False
        done = False
        while not done:
            c = line[p] if p < n else None
            if inq:
                if c is None:
                    raise CaseError("unterminated double quote")
                if (c == 0x5C and p + 3 < n and line[p + 1] == ord("x")
                        and _is_hex(line[p + 2]) and _is_hex(line[p + 3])):
                    cur.append(int(line[p + 2:p + 4], 16))
                    p += 3
                elif c == 0x5C and p + 1 < n:
                    p += 1
                    e = line[p]
                    cur.append({ord("n"): 10, ord("r"): 13, ord("t"): 9,
                                ord("b"): 8, ord("a"): 7}.get(e, e))
                elif c == ord('"'):
                    if p + 1 < n and line[p + 1] not in b" \t\r\n\v\f":
                        raise CaseError("closing quote must be followed by a space")
                    done = True
                else:
                    cur.append(c)
            elif insq:
                if c is None:
                    raise CaseError("unterminated single quote")
                if c == 0x5C and p + 1 < n and line[p + 1] == ord("'"):
                    p += 1
                    cur.append(ord("'"))
                elif c == ord("'"):
                    if p + 1 < n and line[p + 1] not in b" \t\r\n\v\f":
                        raise CaseError("closing quote must be followed by a space")
                    done = True
                else:
                    cur.append(c)
            else:
                if c is None or c in ws:
                    done = True
                elif c == ord('"'):
                    inq = True
                elif c == ord("'"):
                    insq = True
                else:
                    cur.append(c)
            if p < n:
                p += 1
        args.append(bytes(cur))


# --------------------------------------------------------------------------
# Case files
# --------------------------------------------------------------------------

class Entry:
    """One non-blank, non-comment line of a case file."""

    def __init__(self, lineno: int, text: bytes, kind: str, args=None,
                 raw: bytes = b"", sleep_ms: int = 0, unordered: bool = False,
                 conn: bytes = b""):
        self.lineno = lineno
        self.text = text  # the line as written (trailing whitespace stripped)
        self.kind = kind  # "cmd" | "raw" | "sleep" | "reconnect" | "unordered"
        #                   | "ignore" | "shape" | "topology" | "cluster"
        #                   | "conn" | "drain" | "frames"
        self.args = args or []
        self.raw = raw
        self.sleep_ms = sleep_ms
        self.unordered = unordered  # for "cmd": compare as a multiset
        self.ignore = False  # for "cmd": read the reply, compare nothing
        self.shape = False  # for "cmd": compare by shape (ids, integers vary)
        self.topology = False  # for "cmd": compare with node ids/ports normalized
        self.frames = 1  # for "cmd": how many frames its reply is (!frames N)
        self.conn = conn  # for "conn": the connection's name


def parse_case_file(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    pending_unordered = False
    pending_ignore = False
    pending_shape = False
    pending_topology = False
    pending_frames = 0  # !frames N seen, N not yet given to a command
    data = path.read_bytes()
    for i, line in enumerate(data.split(b"\n"), start=1):
        text = line.rstrip(b" \t\r")
        stripped = text.lstrip(b" \t")
        if not stripped or stripped.startswith(b"#"):
            continue
        where = f"{path.name}:{i}"
        if stripped.startswith(b"!"):
            toks = split_args(stripped[1:])
            if not toks:
                raise CaseError(f"{where}: empty directive")
            name = toks[0].decode()
            pending = (pending_unordered or pending_ignore or pending_shape
                       or pending_topology or pending_frames > 0)
            if (name in ("unordered", "ignore", "shape", "topology")
                    and len(toks) == 1):
                if pending:
                    raise CaseError(f"{where}: two prefix directives in a row")
                if name == "unordered":
                    pending_unordered = True
                elif name == "ignore":
                    pending_ignore = True
                elif name == "shape":
                    pending_shape = True
                else:
                    pending_topology = True
                entries.append(Entry(i, text, name))
            elif name in ("cluster", "debug") and len(toks) == 1:
                # A file-level directive: the case runs on a fresh cluster
                # node, or a fresh server that allows DEBUG from local
                # clients.
                if entries:
                    raise CaseError(f"{where}: !{name} must be the first line")
                entries.append(Entry(i, text, name))
            elif name == "frames" and len(toks) == 2 and toks[1].isdigit():
                if pending:
                    raise CaseError(f"{where}: two prefix directives in a row")
                n = int(toks[1])
                if n < 1:
                    raise CaseError(f"{where}: !frames needs N >= 1")
                pending_frames = n
                entries.append(Entry(i, text, "frames"))
            elif name == "sleep" and len(toks) == 2 and toks[1].isdigit():
                entries.append(Entry(i, text, "sleep", sleep_ms=int(toks[1])))
            elif name == "raw" and len(toks) == 2:
                if pending:
                    raise CaseError(f"{where}: !{name} must follow no prefix directive")
                entries.append(Entry(i, text, "raw", raw=toks[1]))
            elif name in ("reconnect", "drain") and len(toks) == 1:
                if pending:
                    raise CaseError(f"{where}: !{name} must follow no prefix directive")
                entries.append(Entry(i, text, name))
            elif name == "conn" and len(toks) == 2:
                if pending:
                    raise CaseError(f"{where}: !{name} must follow no prefix directive")
                if not valid_conn_name(toks[1]):
                    raise CaseError(f"{where}: a connection name is letters, "
                                    f"digits, '_' and '-'")
                entries.append(Entry(i, text, "conn", conn=toks[1]))
            else:
                raise CaseError(f"{where}: unknown or malformed directive")
            continue
        try:
            args = split_args(stripped)
        except CaseError as e:
            raise CaseError(f"{where}: {e}") from None
        if not args:
            raise CaseError(f"{where}: no command")
        ent = Entry(i, text, "cmd", args=args, unordered=pending_unordered)
        ent.ignore = pending_ignore
        ent.shape = pending_shape
        ent.topology = pending_topology
        ent.frames = pending_frames or 1
        entries.append(ent)
        pending_unordered = pending_ignore = pending_shape = False
        pending_topology = False
        pending_frames = 0
    if (pending_unordered or pending_ignore or pending_shape or pending_topology
            or pending_frames):
        raise CaseError(f"{path.name}: prefix directive at end of file")
    return entries


def valid_conn_name(name: bytes) -> bool:
    """`!conn` names: non-empty, letters, digits, '_' and '-' only."""
    return bool(name) and all(chr(c).isascii() and (chr(c).isalnum() or c in b"_-")
                              for c in name)


# --------------------------------------------------------------------------
# Escaping reply bytes for the expected files
# --------------------------------------------------------------------------

def escape(b: bytes) -> str:
    out = []
    for c in b:
        if c == 0x5C:
            out.append("\\\\")
        elif c == 13:
            out.append("\\r")
        elif c == 10:
            out.append("\\n")
        elif c == 9:
            out.append("\\t")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append(f"\\x{c:02x}")
    return "".join(out)


# --------------------------------------------------------------------------
# RESP2 / RESP3 reply framing
# --------------------------------------------------------------------------

class Incomplete(Exception):
    pass


class BadReply(Exception):
    pass


def _line(buf: bytes, pos: int) -> tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return buf[pos:end], end + 2


def _int(b: bytes) -> int:
    try:
        return int(b)
    except ValueError:
        raise BadReply(f"bad length {b!r}") from None


def reply_end(buf: bytes, pos: int = 0) -> int:
    """Return the offset just past one complete reply starting at pos.

    Raises Incomplete if more bytes are needed, BadReply if the bytes are not
    RESP.  An attribute (|) is framed together with the reply it annotates.
    """
    if pos >= len(buf):
        raise Incomplete
    t = buf[pos:pos + 1]
    body, nxt = _line(buf, pos + 1)
    if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return nxt
    if t in (b"$", b"!", b"="):
        n = _int(body)
        if n < 0:
            return nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete
        if buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise BadReply("bulk not terminated by CRLF")
        return nxt + n + 2
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = _int(body)
        if n < 0:
            return nxt
        if t in (b"%", b"|"):
            n *= 2
        p = nxt
        for _ in range(n):
            p = reply_end(buf, p)
        if t == b"|":
            return reply_end(buf, p)
        return p
    raise BadReply(f"unknown reply type {t!r}")


def sorted_aggregate(reply: bytes) -> bytes:
    """An array/set reply with its elements sorted bytewise.

    Used for !unordered replies so that re-recording gives the same file no
    matter which order the server happened to use.
    """
    head_end = reply.index(b"\r\n") + 2
    n = int(reply[1:head_end - 2])
    elems = []
    p = head_end
    for _ in range(max(n, 0)):
        e = reply_end(reply, p)
        elems.append(reply[p:e])
        p = e
    if p != len(reply):
        raise BadReply("trailing bytes after aggregate")
    return reply[:head_end] + b"".join(sorted(elems))


def complete_replies(buf: bytes) -> tuple[int, int]:
    """How many complete replies buf starts with, and the bytes they take."""
    n = 0
    p = 0
    while p < len(buf):
        try:
            p = reply_end(buf, p)
        except (Incomplete, BadReply):
            break
        n += 1
    return n, p


def frames_len(buf: bytes) -> int:
    """How many bytes of buf the complete replies it starts with take."""
    return complete_replies(buf)[1]


def count_replies(buf: bytes) -> int:
    return complete_replies(buf)[0]


# --------------------------------------------------------------------------
# Talking to the server
# --------------------------------------------------------------------------

def encode_command(args: list[bytes]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=READ_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> bool:
        if self.closed:
            return False
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def _recv(self, timeout: float) -> bytes | None:
        """Bytes, b"" on EOF/reset, None on timeout."""
        self.sock.settimeout(max(timeout, 0.001))
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            return None
        except OSError:
            return b""
        return d

    def read_reply(self) -> tuple[bytes, bool]:
        """One complete reply (bytes, closed).  On EOF returns what came."""
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            try:
                end = reply_end(self.buf)
                r, self.buf = self.buf[:end], self.buf[end:]
                return r, False
            except Incomplete:
                pass
            if self.closed:
                r, self.buf = self.buf, b""
                return r, True
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete reply within {READ_TIMEOUT}s "
                                   f"(got {self.buf!r})")
            d = self._recv(left)
            if d is None:
                continue
            if d == b"":
                self.closed = True
            else:
                self.buf += d

    def read_raw(self) -> tuple[bytes, bool]:
        """Everything the server sends after a !raw write.

        Waits up to RAW_NO_REPLY_WAIT for one complete reply (or the close),
        then keeps reading until the server has been quiet for RAW_GRACE or
        closes, so pipelined replies and a close right after a protocol error
        are both captured.
        """
        start = time.monotonic()
        while not self.closed and count_replies(self.buf) == 0:
            left = start + RAW_NO_REPLY_WAIT - time.monotonic()
            if left <= 0 or not self._take(left):
                break
        while not self.closed and self._take(RAW_GRACE):
            pass
        r, self.buf = self.buf, b""
        return r, self.closed

    def _take(self, wait: float) -> bool:
        """Reads what arrives within `wait` into the buffer, noting a close;
        False when nothing came."""
        d = self._recv(wait)
        if d is None:
            return False
        if d == b"":
            self.closed = True
        else:
            self.buf += d
        return True

    def read_drain(self) -> tuple[bytes, bool]:
        """Every frame the server pushes without being asked (!drain).

        Reads until the server has been quiet for DRAIN_QUIET or closes
        (bounded by READ_TIMEOUT).  What came must be whole frames: a partial
        one means the case is racing the server, which is not recordable.
        """
        deadline = time.monotonic() + READ_TIMEOUT
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0 or not self._take(min(DRAIN_QUIET, left)):
                break
        r, self.buf = self.buf, b""
        if not self.closed and frames_len(r) != len(r):
            raise RuntimeError(f"!drain read a partial frame: {r!r}")
        return r, self.closed


MYID = b"$MYID"


def node_id(host: str, port: int) -> bytes:
    """The server's cluster node id, asked on a connection of its own so the
    case's connection (perhaps inside MULTI) sees nothing of it."""
    c = Conn(host, port)
    try:
        c.send(encode_command([b"CLUSTER", b"MYID"]))
        r, _ = c.read_reply()
    finally:
        c.close()
    if not r.startswith(b"$40\r\n"):
        raise RuntimeError(f"CLUSTER MYID answered {r!r}")
    return r[5:45]


def is_cluster_case(entries: list[Entry]) -> bool:
    return bool(entries) and entries[0].kind == "cluster"


def is_debug_case(entries: list[Entry]) -> bool:
    return bool(entries) and entries[0].kind == "debug"


def run_case(host: str, port: int, entries: list[Entry]) -> list[str]:
    """Replay entries; return the lines of the expected file body."""
    out: list[str] = []
    conn = Conn(host, port)
    # Every connection the case opened, by name (!conn); `conn` is the
    # current one.
    cur = MAIN_CONN
    conns = {cur: conn}
    try:
        conn.send(encode_command([b"FLUSHALL"]))
        r, closed = conn.read_reply()
        if closed or r != b"+OK\r\n":
            raise RuntimeError(f"FLUSHALL failed: {r!r}")
        for e in entries:
            out.append("> " + e.text.decode("utf-8", "surrogateescape"))
            if e.kind in ("unordered", "ignore", "shape", "topology", "cluster",
                          "debug", "frames"):
                continue
            if e.kind == "conn":
                cur = e.conn
                if cur not in conns:
                    conns[cur] = Conn(host, port)
                conn = conns[cur]
                continue
            if e.kind == "sleep":
                time.sleep(e.sleep_ms / 1000)
                continue
            if e.kind == "reconnect":
                # Only the current connection is reopened.
                conn.close()
                conn = Conn(host, port)
                conns[cur] = conn
                continue
            if e.kind == "raw":
                conn.send(e.raw)
                reply, closed = conn.read_raw()
            elif e.kind == "drain":
                reply, closed = conn.read_drain()
            else:
                if conn.closed:
                    reply, closed = b"", True
                else:
                    args = e.args
                    if MYID in args:
                        # Asked afresh each time: CLUSTER RESET HARD renews it.
                        me = node_id(host, port)
                        args = [me if a == MYID else a for a in args]
                    conn.send(encode_command(args))
                    # !frames N: N replies, recorded as one line.
                    reply, closed = b"", False
                    for _ in range(e.frames):
                        r, closed = conn.read_reply()
                        reply += r
                        if closed:
                            break
            if e.kind == "cmd" and e.ignore:
                if closed:
                    raise RuntimeError(f"line {e.lineno}: !ignore reply closed "
                                       f"the connection")
                # Only the reply's type byte is kept (and compared).
                out.append("<ignored " + escape(reply[:1]))
                continue
            if closed:
                tag = "<closed"
            elif e.kind == "cmd" and e.unordered:
                if reply[:1] not in (b"*", b"~"):
                    raise RuntimeError(f"line {e.lineno}: !unordered reply is "
                                       f"not an array: {reply!r}")
                tag = "<unordered"
                reply = sorted_aggregate(reply)
            elif e.kind == "cmd" and e.shape:
                # The recorded bytes; the replayer compares them by shape.
                tag = "<shape"
            elif e.kind == "cmd" and e.topology:
                # The recorded bytes; the replayer normalizes node ids, this
                # server's port and bus port, and ping/pong times first.
                tag = "<topology"
            else:
                tag = "<"
            esc = escape(reply)
            out.append(f"{tag} {esc}" if esc else tag)
    finally:
        for c in conns.values():
            c.close()
    return out


# --------------------------------------------------------------------------
# Server management
# --------------------------------------------------------------------------

def ensure_redis_installed():
    if shutil.which("redis-server"):
        return
    print("redis-server not found; installing with apt-get", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "redis-server", "redis-tools"],
                   check=True, env=env)


def free_port(highest: int = 65535) -> int:
    """A free loopback port no higher than `highest`."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= highest:
            return port
    raise RuntimeError(f"no free port up to {highest}")


class RedisServer:
    def __init__(self, cluster: bool = False, debug: bool = False):
        self.dir = tempfile.mkdtemp(prefix="cairn-compat-")
        # A cluster node's bus port is its port + 10000, so Redis refuses
        # ports above 55535.
        self.port = free_port(55535 if cluster else 65535)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no",
                "--logfile", os.path.join(self.dir, "redis.log")]
        if debug:
            # The protected commands (DEBUG; MODULE LOAD, LOADEX, UNLOAD)
            # from local clients (a `!debug` case).
            argv += ["--enable-debug-command", "local",
                     "--enable-module-command", "local"]
        if cluster:
            # A fresh node that knows only itself and owns no slots. The
            # announced ip makes CLUSTER NODES/SLOTS/SHARDS show 127.0.0.1
            # (a node that never met another shows an empty ip otherwise);
            # tests/compat.rs gives cairn the same announce_ip.
            argv += ["--cluster-enabled", "yes",
                     "--cluster-config-file", os.path.join(self.dir, "nodes.conf"),
                     "--cluster-announce-ip", "127.0.0.1"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                c = Conn("127.0.0.1", self.port)
                c.send(encode_command([b"PING"]))
                r, _ = c.read_reply()
                c.close()
                if r == b"+PONG\r\n":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def info_field(host: str, port: int, section: bytes, field: bytes) -> str:
    c = Conn(host, port)
    try:
        c.send(encode_command([b"INFO", section]))
        r, _ = c.read_reply()
    finally:
        c.close()
    for line in r.split(b"\r\n"):
        if line.startswith(field + b":"):
            return line.split(b":", 1)[1].decode()
    raise RuntimeError(f"INFO {section.decode()} has no {field.decode()}")


def server_version(host: str, port: int) -> str:
    return info_field(host, port, b"server", b"redis_version")


# --------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    addr = None
    names: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--addr":
            addr = next(it)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            names.append(a[:-4] if a.endswith(".txt") else a)
    if not names:
        names = sorted(p.stem for p in CASES.glob("*.txt"))
    parsed = {}
    for name in names:
        path = CASES / f"{name}.txt"
        if not path.exists():
            print(f"no such case file: {path}", file=sys.stderr)
            return 2
        parsed[name] = parse_case_file(path)

    if addr:
        host, port_s = addr.rsplit(":", 1)
        if not host.startswith("127.") and host not in ("localhost", "::1"):
            print("refusing a non-loopback address", file=sys.stderr)
            return 2
        port = int(port_s)
        # Every case on that one server: a cluster case needs a cluster node
        # (a fresh one, owning no slots), any other case a plain server.
        want = {"1" if is_cluster_case(e) else "0" for e in parsed.values()}
        have = info_field(host, port, b"cluster", b"cluster_enabled")
        if want != {have}:
            print(f"{addr} has cluster_enabled:{have}; record cluster cases "
                  f"(first line !cluster) and the others separately",
                  file=sys.stderr)
            return 2
        return record_all(parsed, lambda cluster, debug: None, host, port)
    ensure_redis_installed()
    return record_all(parsed, RedisServer, "127.0.0.1", None)


def record_all(parsed: dict, start, host: str, port: int | None) -> int:
    """Record every parsed case.  With `port` None, `start(cluster, debug)`
    starts a server: one plain server shared by the plain cases, a fresh
    cluster node for each cluster case, and a fresh server allowing DEBUG
    for each debug case."""
    shared = None
    try:
        for name, entries in parsed.items():
            cluster = is_cluster_case(entries)
            debug = is_debug_case(entries)
            server = None
            if port is not None:
                use_port = port
            elif cluster or debug:
                server = start(cluster, debug)
                use_port = server.port
            else:
                if shared is None:
                    shared = start(False)
                use_port = shared.port
            try:
                rc = record_one(name, entries, host, use_port)
            finally:
                if server:
                    server.stop()
            if rc:
                return rc
    finally:
        if shared:
            shared.stop()
    return 0


def record_one(name: str, entries: list[Entry], host: str, port: int) -> int:
    """Record one case against the server on `port`; write its expected file."""
    version = server_version(host, port)
    if not version.startswith("7.0."):
        print(f"expected Redis 7.0.x, found {version}", file=sys.stderr)
        return 1
    EXPECTED.mkdir(exist_ok=True)
    body = run_case(host, port, entries)
    header = [
        f"# Recorded from Redis {version} by tests/compat/record.py "
        f"from cases/{name}.txt. Do not edit: re-record.",
        "# '> ' case line; '< ' reply bytes; '<unordered ' reply "
        "compared as a multiset; '<closed ' bytes then connection closed;",
        "# '<ignored T' reply read, only its type byte T compared.",
    ]
    if any(e.kind == "shape" for e in entries):
        header.append("# '<shape ' compared by shape: stream ids and "
                      "integers may differ.")
    topology = any(e.kind == "topology" for e in entries)
    if topology:
        header.append("# '<topology ' compared with node ids, the port, the "
                      "bus port and ping/pong times normalized.")
    if topology or is_cluster_case(entries):
        # The replayer needs Redis's port to normalize <topology replies.
        header.append(f"{PORT_HEADER}{port}")
    text = "\n".join(header + body) + "\n"
    (EXPECTED / f"{name}.txt").write_text(text, encoding="utf-8",
                                          errors="surrogateescape")
    n = sum(1 for e in entries if e.kind in ("cmd", "raw"))
    print(f"{name}: {n} commands recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
