import socket


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.port = port
        self.host = host
        self.timeout = timeout
        self.connect()

    def connect(self):
        self.s = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.s.close()
        except Exception:
            pass

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def send(self, args):
        self.s.sendall(self.encode(args))

    def _fill(self):
        d = self.s.recv(1 << 16)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def _line(self, pos):
        while True:
            i = self.buf.find(b"\r\n", pos)
            if i >= 0:
                return i
            self._fill()

    def _parse(self, pos):
        # returns (value, newpos); value: ('+',bytes)|('-',bytes)|(':',int)|('$',bytes|None)|('*',list|None)
        while len(self.buf) <= pos:
            self._fill()
        t = self.buf[pos:pos + 1]
        e = self._line(pos)
        line = self.buf[pos + 1:e]
        p = e + 2
        if t == b"+":
            return ("+", line), p
        if t == b"-":
            return ("-", line), p
        if t == b":":
            return (":", int(line)), p
        if t == b"$":
            n = int(line)
            if n < 0:
                return ("$", None), p
            while len(self.buf) < p + n + 2:
                self._fill()
            return ("$", self.buf[p:p + n]), p + n + 2
        if t == b"*":
            n = int(line)
            if n < 0:
                return ("*", None), p
            items = []
            for _ in range(n):
                v, p = self._parse(p)
                items.append(v)
            return ("*", items), p
        # RESP3 (after HELLO 3): aggregates as lists (a map's keys and
        # values alternate), simple types as their text.
        if t in (b"%", b"~", b">", b"|"):
            n = int(line) * (2 if t in (b"%", b"|") else 1)
            items = []
            for _ in range(n):
                v, p = self._parse(p)
                items.append(v)
            if t == b"|":
                # Attributes come before the reply they describe.
                return self._parse(p)
            return (t.decode(), items), p
        if t in (b"=", b"!"):
            n = int(line)
            while len(self.buf) < p + n + 2:
                self._fill()
            return (t.decode(), self.buf[p:p + n]), p + n + 2
        if t == b"_":
            return ("_", None), p
        if t in (b",", b"#", b"("):
            return (t.decode(), line), p
        return ("?", t + line), p

    def read(self):
        """Return (parsed, raw_bytes)."""
        v, p = self._parse(0)
        raw = self.buf[:p]
        self.buf = self.buf[p:]
        return v, raw

    def call(self, args):
        self.send(args)
        return self.read()
