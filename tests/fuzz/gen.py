import random
import zlib

KEYS = ["k1", "k2", "k3", "k4"]
FIELDS = ["f1", "f2", "f3", "a", "b", ""]
MEMBERS = ["a", "b", "c", "d", "e", "m1", ""]
VALUES = ["", "a", "b", "abc", "0", "1", "-1", "10", "3.5", "-0", "1e3", "foo", "bar",
          "12345678901234567890", "x" * 17, " 1", "\x00\xff"]
BADNUM = ["abc", "1.5", "", "9223372036854775808", "-9223372036854775809", "+1", " 1",
          "0x10", "1e3", "nan", "inf", "-inf", "1 ", "--1", "1.", ".5", "-", "01", "-0"]
FLOATS = ["0", "1", "-1", "1.5", "-2.5", "0.1", "inf", "-inf", "+inf", "3", "1e2", "-0",
          "2.0", "10", "1e-5", "123456789.123", "5", "1.7976931348623157e308", ".5", "1e400"]
SCORES = ["0", "1", "2", "3", "-1", "1.5", "0.1", "inf", "-inf", "+inf", "2.5", "10", "-0", "1e3"]


class Gen:
    def __init__(self, rng, families):
        self.r = rng
        self.families = families
        self.ms = 1
        self.ids = []  # ids we've used in xadd
        self.groups = ["g1", "g2"]
        self.consumers = ["c1", "c2", "c3"]
        self.lex = rng.random() < 0.4  # lex rounds: all zset scores equal, lex commands allowed
        self.keyset = KEYS if rng.random() < (0.3 if "stream" in families else 0.6) else KEYS[:2]
        big = rng.random() < 0.25
        self.members = MEMBERS if not big else MEMBERS + [str(i) for i in range(-3, 30)] + ["m%d" % i for i in range(30)]
        self.intmembers = rng.random() < 0.2
        self.maxvar = 4 if not big else 12
        self.safe_weights = rng.random() < 0.7
        # Set once a SORT has run: Redis then holds a small sorted set it
        # sorted as a skiplist, which cairn does not (DESIGN-NOTES, "SORT
        # and a small sorted set's encoding"): OBJECT ENCODING and a -0
        # score, which a skiplist keeps, are left out from there on.
        self.sorted = False

    # ---------- helpers ----------
    def ch(self, seq):
        return self.r.choice(seq)

    def p(self, prob):
        return self.r.random() < prob

    def key(self):
        if self.p(0.03):
            return "k5"  # usually missing
        return self.ch(self.keyset)

    def keys(self, lo=1, hi=3):
        return [self.key() for _ in range(self.r.randint(lo, hi))]

    def val(self):
        return self.ch(VALUES)

    def sint(self, lo=-4, hi=6):
        if self.p(0.04):
            return self.ch(BADNUM)
        if self.p(0.03):
            return self.ch(["9223372036854775807", "-9223372036854775808", "1000000", "-1000000"])
        return str(self.r.randint(lo, hi))

    def posint(self, lo=0, hi=5):
        if self.p(0.04):
            return self.ch(BADNUM + ["-1", "-5"])
        return str(self.r.randint(lo, hi))

    def flt(self):
        if self.p(0.04):
            return self.ch(BADNUM)
        return self.ch(FLOATS)

    def score(self):
        if self.lex:
            return "0"
        if self.p(0.03):
            return self.ch(["nan", "abc", "", "1e", "0x1"])
        return self.ch(SCORES)

    def member(self):
        if self.intmembers and self.p(0.8):
            return str(self.r.randint(-3, 12))
        return self.ch(self.members)

    def field(self):
        return self.ch(FIELDS)

    # ---------- dispatch ----------
    def gen(self):
        if self.p(0.05):
            cmd, norm = self.g_ttl()
        else:
            fam = self.ch(self.families) if self.p(0.85) else self.ch(list(FAMILIES))
            cmd, norm = getattr(self, "g_" + fam)()
        cmd = [str(x) for x in cmd]
        if self.sorted and cmd[0].upper().startswith(("Z", "GEO", "BZ")):
            cmd = [cmd[0]] + ["0" if x == "-0" else x for x in cmd[1:]]
        # arity mutations
        # Cut short, these become random picks or SCAN pages, whose
        # contents Redis does not fix.
        # Geo searches and SORT lose the option that fixed their order.
        if self.p(0.015) and cmd[0] not in ("SPOP", "SRANDMEMBER", "ZRANDMEMBER", "SSCAN",
                                            "HSCAN", "ZSCAN", "GEOSEARCH", "GEORADIUS",
                                            "GEORADIUSBYMEMBER", "SORT", "SORT_RO"):
            if len(cmd) > 1:
                cmd = cmd[:self.r.randint(1, len(cmd) - 1)]
        elif self.p(0.01):
            cmd = cmd + [self.ch(["x", "1", "k1", "NX"])]
        if self.p(0.05):
            cmd[0] = cmd[0].lower()
        return cmd, norm

    # ---------- strings ----------
    def g_string(self):
        r = self.r
        c = self.ch(["SET", "SET", "SET", "GET", "GET", "GETDEL", "GETEX", "APPEND", "INCR", "DECR", "INCRBY",
                     "DECRBY", "INCRBYFLOAT", "SETRANGE", "GETRANGE", "SUBSTR", "STRLEN", "MSET", "MGET",
                     "MSETNX", "SETNX", "SETEX", "PSETEX", "GETSET", "SETBIT", "GETBIT", "BITCOUNT",
                     "BITPOS", "BITOP", "LCS", "SETBIT", "BITCOUNT", "BITPOS", "BITFIELD",
                     "BITFIELD", "BITFIELD_RO"])
        k = self.key()
        if c == "SET":
            cmd = ["SET", k, self.val()]
            opts = []
            if self.p(0.3):
                opts.append(self.ch(["NX", "XX"]))
            if self.p(0.25):
                opts.append("GET")
            if self.p(0.3):
                e = self.ch(["EX", "PX", "EXAT", "PXAT", "KEEPTTL"])
                if e == "EX":
                    opts += [e, self.ch(["100000", "200000", "0", "-1", "abc", "9999999999999999"])]
                elif e == "PX":
                    opts += [e, self.ch(["100000000", "300000000", "0", "1.5"])]
                elif e == "EXAT":
                    opts += [e, self.ch(["4000000000", "4100000000", "0"])]
                elif e == "PXAT":
                    opts += [e, self.ch(["4000000000000", "4200000000000"])]
                else:
                    opts.append(e)
            if self.p(0.05):
                opts.append(self.ch(["EX", "NX", "KEEPTTL", "PERSIST", "GET"]))
            r.shuffle(opts) if self.p(0.2) else None
            return cmd + opts, "strict"
        if c in ("GET", "GETDEL", "STRLEN", "INCR", "DECR"):
            return [c, k], "strict"
        if c == "GETEX":
            cmd = ["GETEX", k]
            if self.p(0.6):
                e = self.ch(["EX", "PX", "EXAT", "PXAT", "PERSIST"])
                if e == "EX":
                    cmd += [e, self.ch(["100000", "0", "-5", "x"])]
                elif e == "PX":
                    cmd += [e, self.ch(["100000000"])]
                elif e == "EXAT":
                    cmd += [e, "4000000000"]
                elif e == "PXAT":
                    cmd += [e, "4100000000000"]
                else:
                    cmd.append(e)
            if self.p(0.05):
                cmd.append(self.ch(["PERSIST", "EX", "KEEPTTL"]))
            return cmd, "strict"
        if c == "APPEND":
            return [c, k, self.val()], "strict"
        if c in ("INCRBY", "DECRBY"):
            return [c, k, self.sint(-10, 10)], "strict"
        if c == "INCRBYFLOAT":
            return [c, k, self.flt()], "strict"
        if c == "SETRANGE":
            return [c, k, self.ch(["0", "1", "3", "10", "-1", "536870912", "x", "2"]), self.val()], "strict"
        if c in ("GETRANGE", "SUBSTR"):
            return [c, k, self.sint(-6, 6), self.sint(-6, 6)], "strict"
        if c in ("MSET", "MSETNX"):
            cmd = [c]
            for _ in range(r.randint(1, 3)):
                cmd += [self.key(), self.val()]
            return cmd, "strict"
        if c == "MGET":
            return ["MGET"] + self.keys(1, 4), "strict"
        if c == "SETNX":
            return [c, k, self.val()], "strict"
        if c == "SETEX":
            return [c, k, self.ch(["100000", "0", "-1", "x"]), self.val()], "strict"
        if c == "PSETEX":
            return [c, k, self.ch(["100000000", "0", "-1"]), self.val()], "strict"
        if c == "GETSET":
            return [c, k, self.val()], "strict"
        if c == "SETBIT":
            return [c, k, self.ch(["0", "1", "2", "7", "8", "15", "33", "-1", "x", "4294967296"]),
                    self.ch(["0", "1", "1", "2", "x"])], "strict"
        if c == "GETBIT":
            return [c, k, self.ch(["0", "1", "2", "7", "8", "15", "100", "-1"])], "strict"
        if c == "BITCOUNT":
            cmd = [c, k]
            if self.p(0.7):
                cmd += [self.sint(-5, 5), self.sint(-5, 20)]
                if self.p(0.4):
                    cmd.append(self.ch(["BYTE", "BIT", "bit", "WORD"]))
            elif self.p(0.1):
                cmd.append("1")
            return cmd, "strict"
        if c == "BITPOS":
            cmd = [c, k, self.ch(["0", "1", "1", "2"])]
            if self.p(0.7):
                cmd.append(self.sint(-5, 5))
                if self.p(0.6):
                    cmd.append(self.sint(-5, 20))
                    if self.p(0.4):
                        cmd.append(self.ch(["BYTE", "BIT", "BIT", "x"]))
            return cmd, "strict"
        if c == "BITOP":
            op = self.ch(["AND", "OR", "XOR", "NOT", "and", "NAND"])
            if op == "NOT" and self.p(0.8):
                return ["BITOP", op, self.key(), self.key()], "strict"
            return ["BITOP", op, self.key()] + self.keys(1, 3), "strict"
        if c in ("BITFIELD", "BITFIELD_RO"):
            return self.bitfield(c, k), "strict"
        if c == "LCS":
            cmd = ["LCS", self.key(), self.key()]
            o = self.ch(["", "LEN", "IDX", "IDXM"])
            if o == "LEN":
                cmd.append("LEN")
            elif o == "IDX":
                cmd.append("IDX")
                if self.p(0.5):
                    cmd += ["MINMATCHLEN", self.ch(["0", "1", "2"])]
                if self.p(0.5):
                    cmd.append("WITHMATCHLEN")
            return cmd, "strict"
        raise Exception(c)

    def bitfield(self, c, k):
        """BITFIELD's operations in any order: types signed and unsigned of
        every width (and invalid ones), offsets plain and `#`-scaled, the
        three overflow policies."""
        cmd = [c, k]
        for _ in range(self.r.randint(0, 4)):
            op = self.ch(["GET", "GET", "SET", "INCRBY", "OVERFLOW"]) if c == "BITFIELD" else "GET"
            if op == "OVERFLOW":
                cmd += [op, self.ch(["WRAP", "SAT", "FAIL", "fail", "x"])]
                continue
            width = self.ch(["1", "3", "4", "8", "8", "16", "31", "32", "63", "64", "0", "65"])
            kind = self.ch(["u", "i", "i", "U", "x"]) if self.p(0.1) else self.ch(["u", "i"])
            offset = self.ch(["0", "1", "3", "7", "8", "13", "100", "#0", "#1", "#3", "-1", "x"])
            cmd += [op, kind + width, offset]
            if op == "SET":
                cmd.append(self.sint(-300, 300))
            elif op == "INCRBY":
                cmd.append(self.ch(["1", "-1", "100", "-100", "127", "-128", "300", "x"]))
        if self.p(0.05):
            cmd.append(self.ch(["GET", "SET", "u8", "OVERFLOW"]))
        return cmd

    # ---------- HyperLogLog ----------
    def g_hll(self):
        """PFADD, PFCOUNT and PFMERGE over few and many elements: the sparse
        and dense encodings and the conversion between them, whose bytes
        GET compares at the end of a round."""
        c = self.ch(["PFADD", "PFADD", "PFADD", "PFCOUNT", "PFCOUNT", "PFMERGE"])
        k = self.key()
        if c == "PFADD":
            if self.p(0.15):
                # Enough distinct elements to pass hll-sparse-max-bytes.
                base = self.r.randint(0, 10 ** 6)
                n = self.r.randint(200, 3000)
                return ["PFADD", k] + ["e%d" % (base + i) for i in range(n)], "strict"
            return ["PFADD", k] + [self.member() for _ in range(self.r.randint(0, 4))], "strict"
        if c == "PFCOUNT":
            return ["PFCOUNT"] + self.keys(1, 3), "strict"
        return ["PFMERGE", self.key()] + self.keys(0, 3), "strict"

    # ---------- geo ----------
    def lonlat(self):
        if self.p(0.05):
            return [self.ch(["181", "-180.1", "x", "0"]), self.ch(["86", "-85.06", "0", "y"])]
        return [self.ch(["13.361389", "13.361389", "15.087269", "-122.4194", "0", "179.9", "-179.9",
                         "2.3522", "13.5"]),
                self.ch(["38.115556", "37.502669", "37.7749", "0", "85.05", "-85.05", "48.8566",
                         "38.0"])]

    def member_lonlat(self, m):
        """Where a member lies: a place of its own, the same each time, so
        that no two members share one. Redis orders members at equal
        distances (a COUNT below the number found sorts only part of
        them) in a way that depends on its sort's internals."""
        h = zlib.crc32(m.encode())
        return ["%.6f" % (-179 + (h % 358000) / 1000.0),
                "%.6f" % (-84 + ((h >> 8) % 168000) / 1000.0)]

    def geo_shape(self):
        if self.p(0.5):
            out = ["BYRADIUS", self.ch(["0", "1", "100", "200", "500", "20000", "-1", "x"])]
        else:
            out = ["BYBOX", self.ch(["100", "400", "1000", "0"]), self.ch(["100", "400", "5000", "-1"])]
        return out + [self.ch(["m", "km", "km", "mi", "ft", "KM", "parsec"])]

    def geo_options(self, store=False):
        """Shared by GEOSEARCH, GEOSEARCHSTORE and GEORADIUS: an order, a
        count (ANY or not) and, unless storing, what to return with each
        member. Without an order or a count, Redis lists what it found in
        the order it walked the geohash boxes: compared as a set."""
        opts, norm = [], "sortlist"
        if self.p(0.6):
            opts.append(self.ch(["ASC", "DESC", "asc"]))
            norm = "strict"
        if self.p(0.4):
            opts += ["COUNT", self.ch(["1", "2", "3", "0", "-1"])]
            norm = "strict"
            if not store and self.p(0.2):
                # ANY stops at the first members found, which depend on
                # the order the boxes are walked in: only how many.
                opts.append("ANY")
                norm = "arraylen"
        if store:
            norm = "strict"
        else:
            for w in ("WITHCOORD", "WITHDIST", "WITHHASH"):
                if self.p(0.35):
                    opts.append(w)
        self.r.shuffle(opts) if self.p(0.2) else None
        return opts, norm

    def g_geo(self):
        c = self.ch(["GEOADD", "GEOADD", "GEOADD", "GEODIST", "GEOPOS", "GEOHASH", "GEOSEARCH",
                     "GEOSEARCH", "GEOSEARCHSTORE", "GEORADIUS", "GEORADIUSBYMEMBER"])
        k = self.key()
        if c == "GEOADD":
            # Members' scores are their places': lex ranges over them are
            # Redis-undefined from here on.
            self.lex = False
            cmd = ["GEOADD", k]
            if self.p(0.2):
                cmd.append(self.ch(["NX", "XX"]))
            if self.p(0.2):
                cmd.append("CH")
            for _ in range(self.r.randint(1, 3)):
                m = self.member()
                where = self.lonlat() if self.p(0.03) else self.member_lonlat(m)
                cmd += where + [m]
            return cmd, "strict"
        if c == "GEODIST":
            cmd = ["GEODIST", k, self.member(), self.member()]
            if self.p(0.6):
                cmd.append(self.ch(["m", "km", "mi", "ft", "x"]))
            return cmd, "strict"
        if c in ("GEOPOS", "GEOHASH"):
            return [c, k] + [self.member() for _ in range(self.r.randint(0, 3))], "strict"
        if c in ("GEOSEARCH", "GEOSEARCHSTORE"):
            cmd = [c, self.key(), k] if c == "GEOSEARCHSTORE" else [c, k]
            center = ["FROMMEMBER", self.member()] if self.p(0.5) else ["FROMLONLAT"] + self.lonlat()
            opts, norm = self.geo_options(store=c == "GEOSEARCHSTORE")
            cmd += center + self.geo_shape() + opts
            if c == "GEOSEARCHSTORE" and self.p(0.4):
                # Distances as scores read back as places that coincide:
                # kept apart from the keys the searches read.
                cmd[1] = "k5"
                cmd.append("STOREDIST")
            return cmd, norm
        store = self.p(0.3)
        opts, norm = self.geo_options(store=store)
        radius = [self.ch(["1", "100", "500", "20000", "-1"]), self.ch(["m", "km", "mi", "ft"])]
        if c == "GEORADIUS":
            cmd = [c, k] + self.lonlat() + radius + opts
        else:
            cmd = [c, k, self.member()] + radius + opts
        if store:
            how = self.ch(["STORE", "STOREDIST"])
            cmd += [how, self.key() if how == "STORE" else "k5"]
        return cmd, norm

    # ---------- Lua libraries ----------
    def lua_value(self, depth=0):
        """A Lua expression of a random value: numbers of every kind
        cjson and cmsgpack format differently, strings with escapes and
        high bytes, booleans, cjson.null, and (not too deep) arrays, maps,
        mixed and empty tables."""
        kinds = ["int", "num", "str", "bool", "null"] + (["arr", "map", "mixed"] if depth < 3 else [])
        k = self.ch(kinds)
        if k == "int":
            return self.ch(["0", "1", "-1", "42", "127", "128", "255", "256", "-32", "-33", "-128",
                            "-129", "65535", "65536", "-32768", "-32769", "4294967295", "4294967296",
                            "-2147483648", "-2147483649", "9007199254740993", "2^53", "2^63", "-2^63",
                            "1e15", "123456789012345"])
        if k == "num":
            return self.ch(["0.5", "-0.5", "3.14159", "1/3", "1e300", "-1e-300", "1e-7", "0.1",
                            "100.25", "-0.0", "1/0", "-1/0", "0/0", "2.5e10", "123456.789e3",
                            "1e21", "1e14", "1e16"])
        if k == "str":
            return self.ch([r'""', r'"a"', r'"hello world"', r'"\\"', r'"\""', r'"/"', r'"\n\t\r"',
                            r'"\0x"', r'"\255\254"', r'"\1\31\127"', r'"caf\195\169"', r'"1"',
                            r'"-1.5"', "string.rep('x', 40)", "string.rep('ab', 20)"])
        if k == "bool":
            return self.ch(["true", "false"])
        if k == "null":
            return self.ch(["cjson.null", "nil"])
        n = self.r.randint(0, 4)
        if k == "arr":
            return "{" + ", ".join(self.lua_value(depth + 1) for _ in range(n)) + "}"
        if k == "map":
            keys = self.r.sample(["a", "b", "key", "x y", "1", "k2", ""], min(n, 7))
            return "{" + ", ".join("[%s] = %s" % (self.lua_str(key), self.lua_value(depth + 1)) for key in keys) + "}"
        parts = [self.lua_value(depth + 1) for _ in range(n)]
        parts.append("[%s] = %s" % (self.ch(['"z"', "10", "-1", "1.5", "0"]), self.lua_value(depth + 1)))
        return "{" + ", ".join(parts) + "}"

    @staticmethod
    def lua_str(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def json_text(self):
        return self.ch([
            '{"a":1,"b":[1,2,3],"c":{"d":null}}', '[1,2.5,-3e2,"x",true,false,null]', '"str"',
            # Not 1e400: Redis's cjson leaves strtod's ERANGE in errno, and
            # a later SORT of numbers then fails on it.
            '123', '-0', '[]', '{}', '[[[[1]]]]', '{"a":', '[1,]', '{"a" 1}', 'nul',
            '"\\u00e9\\u20ac"', '"\\ud83d\\ude00"', '"bad \\x escape"', '  [ 1 , 2 ]  ', '',
            '[1] x', '0x10', '01', '1.', '.5', '"\\/"', '{"1":1,"2":2}', '[1e-7, 100000000000000]',
            '"' + 'a' * 5 + '"', '{"a":{"b":{"c":{"d":{"e":[]}}}}}', 'true', '{"":0}',
        ])

    def g_lua(self):
        """EVAL of one expression over Redis's Lua libraries (cjson,
        cmsgpack, struct, bit) and of the conversions of a script's result
        to a reply: compared byte for byte, errors included."""
        c = self.ch(["cjson.encode", "cjson.encode", "cjson.decode", "cjson.roundtrip", "cmsgpack",
                     "cmsgpack.unpack", "bit", "struct", "result", "result", "redis"])
        if c == "cjson.encode":
            body = "return cjson.encode(%s)" % self.lua_value()
        elif c == "cjson.decode":
            return ["EVAL", "local v = cjson.decode(ARGV[1]) if type(v) == 'table' then "
                    "return cjson.encode(v) end return {type(v), tostring(v)}", "0", self.json_text()], "strict"
        elif c == "cjson.roundtrip":
            body = "return cjson.encode(cjson.decode(cjson.encode(%s)))" % self.lua_value()
        elif c == "cmsgpack":
            vals = ", ".join(self.lua_value() for _ in range(self.r.randint(1, 2)))
            body = "return cmsgpack.pack(%s)" % vals
        elif c == "cmsgpack.unpack":
            body = "return cjson.encode({cmsgpack.unpack(cmsgpack.pack(%s))})" % self.lua_value()
        elif c == "bit":
            f = self.ch(["band", "bor", "bxor", "lshift", "rshift", "arshift", "rol", "ror", "tohex",
                         "tobit", "bnot", "bswap"])
            nums = [self.ch(["0", "1", "-1", "7", "31", "32", "33", "0xff", "0x7fffffff", "0x80000000",
                             "0xffffffff", "2^32", "2^40+5", "-2^31", "1.5", "-1.5", "2^52", "3", "-8"])
                    for _ in range(self.r.randint(1, 3))]
            body = "return tostring(bit.%s(%s))" % (f, ", ".join(nums))
        elif c == "struct":
            fmt = self.ch(["<i4", ">I2", "b", "B", "h", "H", "l", "L", "i8", "d", "f", "s", "c3", "c0",
                           "i3", "<i2>i2", "!4i2i4", "x", "i", "bbb", "I16", "i17", "c"])
            args = ", ".join(self.ch(["1", "-1", "255", "65535", "1.5", "'abc'", "2^31", "-2^31", "0"])
                             for _ in range(self.r.randint(0, 3)))
            body = ("local ok, p = pcall(struct.pack, %s%s) if not ok then return {err = p} end "
                    "return {p, struct.size and pcall(struct.size, %s) and struct.size(%s) or -1,"
                    " cjson.encode({pcall(struct.unpack, %s, p)})}"
                    % (self.lua_str(fmt), ", " + args if args else "", self.lua_str(fmt),
                       self.lua_str(fmt), self.lua_str(fmt)))
        elif c == "result":
            body = "return %s" % self.lua_value()
        else:
            body = self.ch([
                "return redis.status_reply(%s)" % self.ch(['"OK"', '"x y"', '""', "1"]),
                "return redis.error_reply(%s)" % self.ch(['"ERR x"', '"My error"', '""', '"-ERR z"']),
                "return {err = %s}" % self.ch(['"boom"', '"ERR boom"', "1", "{}"]),
                "return {ok = %s}" % self.ch(['"fine"', '""', "1"]),
                "return redis.sha1hex(%s)" % self.ch(['""', '"abc"', "1", "string.rep('a', 100)"]),
                "return type(redis.REDIS_VERSION_NUM)",
                "return {1, 2, nil, 4}",
                "return {1, {2, {3, {4}}}, 'x', false, true}",
                # Not error({}): Redis 7.0.15 crashes on it (SIGSEGV).
                "error(%s)" % self.ch(['"raw"', "{err = 'tbl'}", "1", "nil"]),
                "return redis.pcall('%s')" % self.ch(["GET", "NOSUCH", "SET"]),
                "return redis.call('%s')" % self.ch(["GET", "NOSUCH", "PING"]),
                # Not of a table: that prints its address.
                "return tostring(%s)" % self.lua_value(depth=3),
                "return math.huge",
                "return -0.0",
                "return 3.99",
                "return -3.99",
                "return loadstring('return 1')()",
                "return x_undefined_global",
                "x_new_global = 1",
                "return string.format('%%d %%5.2f %%s %%q', 3, 2.5, 'a', 'b\n')",
                "return table.concat({1, 2, 'x'}, ',')",
                "return #KEYS + #ARGV",
            ])
        return ["EVAL", body, "0"], "strict"

    # ---------- functions ----------
    # Libraries a round loads and replaces: functions that read, write,
    # fail, or return what they were given; some with flags and a
    # description, two sharing a name across libraries, one library whose
    # code does not load.
    LIBRARIES = [
        "#!lua name=lib1\n"
        "redis.register_function('fa', function(k, a) return redis.call('GET', k[1]) end)\n"
        "redis.register_function{function_name='fb', callback=function(k, a) "
        "return redis.call('SET', k[1], a[1] or 'v') end, description='writes'}",
        "#!lua name=lib2\n"
        "redis.register_function{function_name='fc', callback=function(k, a) return {#k, #a, a[1]} end, "
        "flags={'no-writes'}}\n"
        "redis.register_function{function_name='FD', callback=function(k, a) "
        "return redis.call('INCR', k[1]) end, flags={'allow-oom'}}",
        "#!lua name=lib3\n"
        "redis.register_function('fe', function(k, a) return redis.pcall('LPUSH', k[1], 'x') end)\n"
        "redis.register_function{function_name='ff', callback=function() error('boom') end, "
        "flags={'no-writes', 'allow-stale'}}",
        "#!lua name=lib4\nredis.register_function('fa', function() return 1 end)",
        "#!lua name=lib5\nredis.call('SET', 'x', 1)",
        "#!lua name=lib6\nredis.register_function('fg', function() return redis.setresp(3) end)\n"
        # A hash's fields sorted: cairn does not keep a small hash's
        # insertion order (DESIGN-NOTES).
        "redis.register_function{function_name='fh', callback=function(k) "
        "local f = redis.call('HKEYS', k[1]) table.sort(f) return f end, flags={'no-writes'}}",
    ]
    FUNCTIONS = ["fa", "fb", "fc", "FD", "fd", "fe", "ff", "fg", "fh", "Fa", "nosuch"]

    def g_functions(self):
        """FUNCTION LOAD, DELETE, LIST, STATS, FLUSH and FCALL / FCALL_RO of
        a few libraries, over keys the other families fill."""
        c = self.ch(["load", "load", "fcall", "fcall", "fcall", "fcall_ro", "delete", "list",
                     "stats", "flush"])
        if c == "load":
            lib = self.ch(self.LIBRARIES)
            return ["FUNCTION", "LOAD"] + (["REPLACE"] if self.p(0.4) else []) + [lib], "strict"
        if c in ("fcall", "fcall_ro"):
            n = self.ch(["0", "1", "1", "2", "-1", "3", "x"])
            keys = [self.key() for _ in range(2)]
            args = [self.val() for _ in range(self.r.randint(0, 2))]
            return [c.upper(), self.ch(self.FUNCTIONS), n] + keys + args, "strict"
        if c == "delete":
            return ["FUNCTION", "DELETE", self.ch(["lib1", "lib2", "lib3", "LIB1", "nolib"])], "strict"
        if c == "list":
            # One library, or none: the libraries' order is Redis's hash
            # table's (so is their functions', which the runner sorts).
            cmd = ["FUNCTION", "LIST", "LIBRARYNAME", self.ch(["lib1", "lib2", "lib3", "nolib", "LIB2"])]
            if self.p(0.5):
                cmd.append("WITHCODE")
            return cmd, "function_list"
        if c == "stats":
            return ["FUNCTION", "STATS"], "strict"
        return ["FUNCTION", "FLUSH"] + ([self.ch(["SYNC", "ASYNC", "x"])] if self.p(0.3) else []), "strict"

    # ---------- SORT ----------
    def g_sort(self):
        """SORT and SORT_RO of lists, sets and sorted sets, by the elements
        themselves or through patterns that read other keys (the elements
        1-4 name k1-k4) and hash fields, with GET, LIMIT and STORE."""
        c = self.ch(["SORT", "SORT", "SORT", "SORT_RO"])
        cmd = [c, self.key()]
        self.sorted = True
        by = None
        if self.p(0.4):
            by = self.ch(["k*", "k*->f1", "k*->a", "nosort", "x*", "k*->"])
            cmd += ["BY", by]
        limit = self.p(0.3) and by != "nosort"
        if limit:
            cmd += ["LIMIT", self.sint(-1, 3), self.sint(-1, 5)]
        for _ in range(self.r.randint(0, 2) if self.p(0.4) else 0):
            cmd += ["GET", self.ch(["#", "k*", "k*->f1", "k*->b", "x*"])]
        if self.p(0.3):
            cmd.append(self.ch(["ASC", "DESC"]))
        alpha = self.p(0.4)
        if alpha:
            cmd.append("ALPHA")
        # Where Redis leaves an order to its hash tables, only the members
        # are compared: a set's BY nosort (Redis fixes an intset's order
        # only: set_order.txt pins that), and ALPHA BY a pattern, which
        # Redis does not break ties of (equal or missing weights keep the
        # order elements were loaded in, a set's or sorted set's from its
        # hash table; with LIMIT, its partial sort picks which of them).
        unordered = by == "nosort" or (alpha and by is not None)
        if c == "SORT" and not unordered and self.p(0.2):
            cmd += ["STORE", self.key()]
        if not unordered:
            return cmd, "strict"
        return cmd, "arraylen" if limit else "sortlist"

    # ---------- keyspace ----------
    def g_keyspace(self):
        c = self.ch(["DEL", "UNLINK", "EXISTS", "TYPE", "RENAME", "RENAMENX", "COPY", "EXPIRE", "PEXPIRE",
                     "EXPIREAT", "PEXPIREAT", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PERSIST", "DBSIZE",
                     "KEYS", "TOUCH", "EXPIRE", "TTL", "TYPE", "EXISTS", "OBJECT"])
        k = self.key()
        if c == "OBJECT":
            # The encoding cairn works out must follow Redis's conversions
            # through any history of writes.
            if self.sorted:
                return ["TYPE", k], "strict"
            return ["OBJECT", "ENCODING", k], "strict"
        if c in ("DEL", "UNLINK", "EXISTS", "TOUCH"):
            return [c] + self.keys(1, 3), "strict"
        if c in ("TYPE", "PERSIST"):
            return [c, k], "strict"
        if c in ("TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"):
            return [c, k], "ttl"
        if c in ("RENAME", "RENAMENX"):
            return [c, k, self.key()], "strict"
        if c == "COPY":
            cmd = ["COPY", k, self.key()]
            if self.p(0.4):
                cmd.append("REPLACE")
            if self.p(0.1):
                cmd += ["DB", self.ch(["0", "1", "x"])]
            return cmd, "strict"
        if c in ("EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"):
            if c == "EXPIRE":
                v = self.ch(["1000", "2000", "5000", "100000", "-1", "0", "x", "9223372036854775807"])
            elif c == "PEXPIRE":
                v = self.ch(["1500000", "2500000", "7500000", "50000000", "-5", "9223372036854775807"])
            elif c == "EXPIREAT":
                v = self.ch(["4000000000", "4100000000", "1", "0"])
            else:
                v = self.ch(["4050000000000", "4150000000000", "1"])
            cmd = [c, k, v]
            if self.p(0.6):
                cmd.append(self.ch(["NX", "XX", "GT", "LT", "nx", "gt"]))
                if self.p(0.15):
                    cmd.append(self.ch(["NX", "XX", "GT", "LT"]))
            return cmd, "strict"
        if c == "DBSIZE":
            return ["DBSIZE"], "strict"
        if c == "KEYS":
            return ["KEYS", self.ch(["*", "k*", "k[12]", "?1", "k\\1", "x*"])], "sortlist"
        raise Exception(c)

    def g_ttl(self):
        k = self.key()
        c = self.ch(["EXPIRE", "EXPIRE", "PEXPIRE", "TTL", "TTL", "PERSIST", "EXPIREAT"])
        if c == "EXPIRE":
            return [c, k, self.ch(["1000", "2000", "5000"])] + ([self.ch(["NX", "XX", "GT", "LT"])] if self.p(0.3) else []), "strict"
        if c == "PEXPIRE":
            return [c, k, self.ch(["1500000", "2500000"])], "strict"
        if c == "EXPIREAT":
            return [c, k, "4000000000"], "strict"
        if c == "TTL":
            return [c, k], "ttl"
        return [c, k], "strict"

    # ---------- hashes ----------
    def g_hash(self):
        c = self.ch(["HSET", "HSET", "HSET", "HSETNX", "HGET", "HMGET", "HMSET", "HDEL", "HLEN", "HSTRLEN",
                     "HEXISTS", "HINCRBY", "HINCRBYFLOAT", "HKEYS", "HVALS", "HGETALL", "HSCAN", "HGET"])
        k = self.key()
        if c in ("HSET", "HMSET"):
            cmd = [c, k]
            for _ in range(self.r.randint(1, 3)):
                cmd += [self.field(), self.val()]
            return cmd, "strict"
        if c == "HSETNX":
            return [c, k, self.field(), self.val()], "strict"
        if c in ("HGET", "HSTRLEN", "HEXISTS"):
            return [c, k, self.field()], "strict"
        if c in ("HMGET", "HDEL"):
            return [c, k] + [self.field() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "HLEN":
            return [c, k], "strict"
        if c == "HINCRBY":
            return [c, k, self.field(), self.sint(-10, 10)], "strict"
        if c == "HINCRBYFLOAT":
            return [c, k, self.field(), self.flt()], "strict"
        if c in ("HKEYS", "HVALS"):
            return [c, k], "sortlist"
        if c == "HGETALL":
            return [c, k], "sortpairs"
        if c == "HSCAN":
            cmd = [c, k, self.ch(["0", "0", "0", "x"])]
            if self.p(0.3):
                cmd += ["MATCH", self.ch(["*", "f*", "a", "[ab]"])]
            if self.p(0.05):
                cmd += ["COUNT", self.ch(["0", "-1"])]
            else:
                cmd += ["COUNT", "1000"]
            return cmd, "scanpairs"
        raise Exception(c)

    # ---------- lists ----------
    def lidx(self):
        return self.sint(-6, 6)

    def g_list(self):
        c = self.ch(["LPUSH", "RPUSH", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LLEN", "LRANGE",
                     "LRANGE", "LINDEX", "LSET", "LINSERT", "LREM", "LTRIM", "LPOS", "LPOS", "LMOVE",
                     "RPOPLPUSH", "LMPOP", "BLPOP", "BRPOP", "BLMOVE", "BLMPOP", "BRPOPLPUSH"])
        k = self.key()
        if c in ("LPUSH", "RPUSH", "LPUSHX", "RPUSHX"):
            return [c, k] + [self.member() for _ in range(self.r.randint(1, self.maxvar))], "strict"
        if c in ("LPOP", "RPOP"):
            cmd = [c, k]
            if self.p(0.5):
                cmd.append(self.ch(["0", "1", "2", "5", "-1", "x"]))
            return cmd, "strict"
        if c == "LLEN":
            return [c, k], "strict"
        if c == "LRANGE":
            return [c, k, self.lidx(), self.lidx()], "strict"
        if c == "LINDEX":
            return [c, k, self.lidx()], "strict"
        if c == "LSET":
            return [c, k, self.lidx(), self.member()], "strict"
        if c == "LINSERT":
            return [c, k, self.ch(["BEFORE", "AFTER", "before", "MIDDLE"]), self.member(), self.member()], "strict"
        if c == "LREM":
            return [c, k, self.sint(-3, 3), self.member()], "strict"
        if c == "LTRIM":
            return [c, k, self.lidx(), self.lidx()], "strict"
        if c == "LPOS":
            cmd = [c, k, self.member()]
            opts = []
            if self.p(0.5):
                opts += ["RANK", self.ch(["1", "2", "-1", "-2", "0", "3", "x"])]
            if self.p(0.5):
                opts += ["COUNT", self.ch(["0", "1", "2", "-1", "5"])]
            if self.p(0.4):
                opts += ["MAXLEN", self.ch(["0", "1", "2", "3", "-1"])]
            if self.p(0.05):
                opts += [self.ch(["RANK", "COUNT", "FOO"])]
            return cmd + opts, "strict"
        if c in ("LMOVE", "BLMOVE"):
            cmd = [c, k, self.key(), self.ch(["LEFT", "RIGHT"]), self.ch(["LEFT", "RIGHT", "left", "UP"])]
            if c == "BLMOVE":
                cmd.append(self.ch(["0.01", "0.01", "-1", "x"]))
            return cmd, "strict"
        if c == "RPOPLPUSH":
            return [c, k, self.key()], "strict"
        if c == "BRPOPLPUSH":
            return [c, k, self.key(), "0.01"], "strict"
        if c in ("LMPOP", "BLMPOP"):
            ks = self.keys(1, 3)
            cmd = [c]
            if c == "BLMPOP":
                cmd.append(self.ch(["0.01", "0.01", "-1"]))
            n = str(len(ks)) if self.p(0.9) else self.ch(["0", "5", "x", "-1"])
            cmd += [n] + ks + [self.ch(["LEFT", "RIGHT", "left", "MIDDLE"])]
            if self.p(0.5):
                cmd += ["COUNT", self.ch(["1", "2", "5", "0", "-1"])]
            return cmd, "strict"
        if c in ("BLPOP", "BRPOP"):
            return [c] + self.keys(1, 3) + [self.ch(["0.01", "0.01", "-1", "x"])], "strict"
        raise Exception(c)

    # ---------- sets ----------
    def g_set(self):
        c = self.ch(["SADD", "SADD", "SADD", "SREM", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SMOVE",
                     "SINTER", "SINTERCARD", "SINTERSTORE", "SUNION", "SUNIONSTORE", "SDIFF", "SDIFFSTORE",
                     "SSCAN", "SPOP", "SRANDMEMBER"])
        k = self.key()
        if c in ("SADD", "SREM"):
            return [c, k] + [self.member() for _ in range(self.r.randint(1, self.maxvar))], "strict"
        if c == "SMEMBERS":
            return [c, k], "sortlist"
        if c == "SISMEMBER":
            return [c, k, self.member()], "strict"
        if c == "SMISMEMBER":
            return [c, k] + [self.member() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "SCARD":
            return [c, k], "strict"
        if c == "SMOVE":
            return [c, k, self.key(), self.member()], "strict"
        if c in ("SINTER", "SUNION", "SDIFF"):
            return [c] + self.keys(1, 3), "sortlist"
        if c in ("SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"):
            return [c, self.key()] + self.keys(1, 3), "strict"
        if c == "SINTERCARD":
            ks = self.keys(1, 3)
            n = str(len(ks)) if self.p(0.9) else self.ch(["0", "5", "x"])
            cmd = [c, n] + ks
            if self.p(0.4):
                cmd += ["LIMIT", self.ch(["0", "1", "2", "-1"])]
            return cmd, "strict"
        if c == "SSCAN":
            cmd = [c, k, "0"]
            if self.p(0.3):
                cmd += ["MATCH", self.ch(["*", "a*", "[ab]", "m?"])]
            cmd += ["COUNT", "1000"]
            return cmd, "scanset"
        if c == "SPOP":
            return [c, k, self.ch(["100", "100", "0", "-1"])], "sortlist"
        if c == "SRANDMEMBER":
            return [c, k, self.ch(["100", "0"])], "sortlist"
        raise Exception(c)

    # ---------- sorted sets ----------
    def zbound_score(self):
        s = self.ch(["0", "1", "2", "3", "-1", "1.5", "inf", "-inf", "+inf", "2.5", "10"])
        if self.p(0.3):
            s = "(" + s
        if self.p(0.03):
            s = self.ch(["x", "((1", "(", "nan", "[1"])
        return s

    def zbound_lex(self):
        if self.p(0.2):
            return self.ch(["-", "+"])
        if self.p(0.03):
            return self.ch(["a", "", "x"])
        return self.ch(["[", "("]) + self.ch(MEMBERS)

    def zrange_span(self):
        """ZRANGE's (and ZRANGESTORE's) bounds: by rank, score or lex, with
        the BYSCORE/BYLEX word the kind needs."""
        mode = self.ch(["rank", "score", "lex"] if self.lex else ["rank", "score"])
        if mode == "rank":
            return [self.sint(-5, 5), self.sint(-5, 5)]
        if mode == "score":
            return [self.zbound_score(), self.zbound_score(), "BYSCORE"]
        return [self.zbound_lex(), self.zbound_lex(), "BYLEX"]

    def g_zset(self):
        c = self.ch(["ZADD", "ZADD", "ZADD", "ZADD", "ZINCRBY", "ZCARD", "ZSCORE", "ZMSCORE", "ZRANGE", "ZRANGE",
                     "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZREVRANGE",
                     "ZRANK", "ZREVRANK", "ZREM", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX",
                     "ZPOPMIN", "ZPOPMAX", "ZUNIONSTORE", "ZINTERSTORE", "ZUNION", "ZINTER", "ZDIFF",
                     "ZDIFFSTORE", "ZINTERCARD", "ZCOUNT", "ZLEXCOUNT", "ZMPOP", "ZRANGESTORE", "ZSCAN",
                     "BZPOPMIN", "BZMPOP", "ZRANDMEMBER"])
        k = self.key()
        if c == "ZRANDMEMBER":
            # Only counts that take the whole set: its order is Redis's.
            cmd = ["ZRANDMEMBER", k, self.ch(["100", "1000"])]
            if self.p(0.5):
                cmd.append("WITHSCORES")
            return cmd, "strict"
        if not self.lex:
            while c in ("ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZREMRANGEBYLEX", "ZLEXCOUNT"):
                c = self.ch(["ZRANGE", "ZRANGEBYSCORE", "ZCOUNT", "ZADD", "ZRANGESTORE"])
        if c == "ZADD":
            cmd = ["ZADD", k]
            flags = []
            for f in ["NX", "XX", "GT", "LT", "CH", "INCR"]:
                if self.p(0.15):
                    flags.append(f)
            self.r.shuffle(flags)
            cmd += flags
            n = 1 if "INCR" in flags and self.p(0.8) else self.r.randint(1, self.maxvar)
            for _ in range(n):
                cmd += [self.score(), self.member()]
            if self.p(0.02):
                cmd.append(self.member())
            return cmd, "strict"
        if c == "ZINCRBY":
            return [c, k, self.score(), self.member()], "strict"
        if c == "ZCARD":
            return [c, k], "strict"
        if c == "ZSCORE":
            return [c, k, self.member()], "strict"
        if c == "ZMSCORE":
            return [c, k] + [self.member() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "ZRANGE":
            cmd = ["ZRANGE", k] + self.zrange_span()
            if self.p(0.4):
                cmd.append("REV")
            if self.p(0.35):
                cmd += ["LIMIT", self.sint(-1, 3), self.ch(["1", "2", "-1", "0", "5"])]
            if self.p(0.4):
                cmd.append("WITHSCORES")
            return cmd, "strict"
        if c in ("ZRANGEBYSCORE", "ZREVRANGEBYSCORE"):
            cmd = [c, k, self.zbound_score(), self.zbound_score()]
            if self.p(0.4):
                cmd.append("WITHSCORES")
            if self.p(0.3):
                cmd += ["LIMIT", self.sint(-1, 3), self.ch(["1", "2", "-1", "0"])]
            return cmd, "strict"
        if c in ("ZRANGEBYLEX", "ZREVRANGEBYLEX"):
            cmd = [c, k, self.zbound_lex(), self.zbound_lex()]
            if self.p(0.3):
                cmd += ["LIMIT", self.sint(-1, 3), self.ch(["1", "2", "-1", "0"])]
            return cmd, "strict"
        if c == "ZREVRANGE":
            cmd = [c, k, self.sint(-5, 5), self.sint(-5, 5)]
            if self.p(0.4):
                cmd.append("WITHSCORES")
            return cmd, "strict"
        if c in ("ZRANK", "ZREVRANK"):
            return [c, k, self.member()], "strict"
        if c == "ZREM":
            return [c, k] + [self.member() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "ZREMRANGEBYRANK":
            return [c, k, self.sint(-5, 5), self.sint(-5, 5)], "strict"
        if c == "ZREMRANGEBYSCORE":
            return [c, k, self.zbound_score(), self.zbound_score()], "strict"
        if c == "ZREMRANGEBYLEX":
            return [c, k, self.zbound_lex(), self.zbound_lex()], "strict"
        if c in ("ZPOPMIN", "ZPOPMAX"):
            cmd = [c, k]
            if self.p(0.6):
                cmd.append(self.ch(["0", "1", "2", "10", "-1", "x"]))
            return cmd, "strict"
        if c in ("ZUNIONSTORE", "ZINTERSTORE", "ZUNION", "ZINTER", "ZDIFF", "ZDIFFSTORE"):
            ks = self.keys(1, 3)
            cmd = [c]
            if c.endswith("STORE"):
                cmd.append(self.key())
                # A set's members score 1, and weights scale scores: lex
                # ranges over what it stores are Redis-undefined from here.
                self.lex = False
            n = str(len(ks)) if self.p(0.92) else self.ch(["0", "5", "x", "-1"])
            cmd += [n] + ks
            if c != "ZDIFF" and c != "ZDIFFSTORE":
                if self.p(0.4):
                    cmd.append("WEIGHTS")
                    cnt = len(ks) if self.p(0.9) else len(ks) + 1
                    ws = ["1", "2", "0.5", "3"] if self.safe_weights else ["1", "2", "0", "-1", "0.5", "inf", "-inf", "x"]
                    cmd += [self.ch(ws) for _ in range(cnt)]
                if self.p(0.4):
                    cmd += ["AGGREGATE", self.ch(["SUM", "MIN", "MAX", "sum", "AVG"])]
            if not c.endswith("STORE") and self.p(0.5):
                cmd.append("WITHSCORES")
            return cmd, "strict"
        if c == "ZINTERCARD":
            ks = self.keys(1, 3)
            cmd = [c, str(len(ks)) if self.p(0.92) else "0"] + ks
            if self.p(0.4):
                cmd += ["LIMIT", self.ch(["0", "1", "2", "-1"])]
            return cmd, "strict"
        if c == "ZCOUNT":
            return [c, k, self.zbound_score(), self.zbound_score()], "strict"
        if c == "ZLEXCOUNT":
            return [c, k, self.zbound_lex(), self.zbound_lex()], "strict"
        if c in ("ZMPOP", "BZMPOP"):
            ks = self.keys(1, 3)
            cmd = [c]
            if c == "BZMPOP":
                cmd.append("0.01")
            cmd += [str(len(ks)) if self.p(0.92) else self.ch(["0", "9"])] + ks
            cmd.append(self.ch(["MIN", "MAX", "min", "MID"]))
            if self.p(0.5):
                cmd += ["COUNT", self.ch(["1", "2", "10", "0", "-1"])]
            return cmd, "strict"
        if c == "BZPOPMIN":
            return [self.ch(["BZPOPMIN", "BZPOPMAX"])] + self.keys(1, 2) + ["0.01"], "strict"
        if c == "ZRANGESTORE":
            cmd = [c, self.key(), k] + self.zrange_span()
            if self.p(0.4):
                cmd.append("REV")
            if self.p(0.3):
                cmd += ["LIMIT", self.sint(-1, 3), self.ch(["1", "2", "-1"])]
            return cmd, "strict"
        if c == "ZSCAN":
            cmd = [c, k, "0"]
            if self.p(0.3):
                cmd += ["MATCH", self.ch(["*", "a*", "[ab]"])]
            cmd += ["COUNT", "1000"]
            return cmd, "scanpairs"
        raise Exception(c)

    # ---------- streams ----------
    def new_id(self):
        if self.p(0.08):
            # possibly non-increasing / odd
            return self.ch(["0-0", "0-1", "1-0", "1", "%d-0" % max(self.ms - 1, 0), "abc", "1-x",
                            "%d-*" % self.ms, "-1"] + (["18446744073709551615-18446744073709551615"] if self.p(0.1) else []))
        self.ms += self.r.randint(0, 2)
        seq = self.r.randint(0, 3) if self.p(0.5) else 0
        i = "%d-%d" % (self.ms, seq)
        if self.p(0.1):
            i = "%d" % self.ms
        self.ids.append(i)
        return i

    def old_id(self):
        if not self.ids or self.p(0.15):
            return self.ch(["0-0", "0", "1-0", "1", "2-1", "3", "99999", "0-1", "x"])
        return self.ch(self.ids)

    def range_id(self, lo=True):
        if self.p(0.25):
            return "-" if lo else "+"
        if self.p(0.05):
            return "+" if lo else "-"
        i = self.old_id()
        if self.p(0.25):
            i = "(" + i
        return i

    def g_stream(self):
        c = self.ch(["XADD", "XADD", "XADD", "XADD", "XRANGE", "XREVRANGE", "XDEL", "XTRIM", "XLEN", "XSETID",
                     "XGROUP", "XGROUP", "XGROUP", "XGROUP", "XREADGROUP", "XREADGROUP", "XREADGROUP", "XACK", "XPENDING", "XPENDING", "XCLAIM",
                     "XAUTOCLAIM", "XINFO", "XREAD"])
        k = self.key()
        if c == "XADD":
            cmd = ["XADD", k]
            if self.p(0.1):
                cmd.append("NOMKSTREAM")
            if self.p(0.25):
                t = self.ch(["MAXLEN", "MINID"])
                cmd.append(t)
                if self.p(0.5):
                    cmd.append("=")
                if t == "MAXLEN":
                    cmd.append(self.ch(["0", "1", "2", "3", "5", "-1"]))
                else:
                    cmd.append(self.old_id())
            cmd.append(self.new_id())
            for _ in range(self.r.randint(1, 2)):
                cmd += [self.field(), self.val()]
            return cmd, "strict"
        if c in ("XRANGE", "XREVRANGE"):
            a, b = self.range_id(True), self.range_id(False)
            if c == "XREVRANGE":
                a, b = b, a
            cmd = [c, k, a, b]
            if self.p(0.4):
                cmd += ["COUNT", self.ch(["0", "1", "2", "-1", "3"])]
            return cmd, "strict"
        if c == "XDEL":
            return [c, k] + [self.old_id() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "XTRIM":
            t = self.ch(["MAXLEN", "MINID", "FOO"])
            cmd = [c, k, t]
            if self.p(0.4):
                cmd.append("=")
            cmd.append(self.ch(["0", "1", "2", "3", "-1"]) if t != "MINID" else self.old_id())
            return cmd, "strict"
        if c == "XLEN":
            return [c, k], "strict"
        if c == "XSETID":
            i = self.old_id() if self.p(0.5) else "%d-%d" % (self.ms + self.r.randint(0, 3), self.r.randint(0, 3))
            cmd = [c, k, i]
            if self.p(0.3):
                cmd += ["ENTRIESADDED", self.ch(["0", "1", "5", "100", "-1"])]
            if self.p(0.3):
                cmd += ["MAXDELETEDID", self.old_id()]
            return cmd, "strict"
        if c == "XGROUP":
            sub = self.ch(["CREATE", "CREATE", "CREATE", "SETID", "DESTROY", "CREATECONSUMER", "DELCONSUMER"])
            g = self.ch(self.groups)
            if sub in ("CREATE", "SETID"):
                cmd = ["XGROUP", sub, k, g, self.ch(["$", "0", "0-0", "$"]) if self.p(0.6) else self.old_id()]
                if sub == "CREATE" and self.p(0.3):
                    cmd.append("MKSTREAM")
                if self.p(0.2):
                    cmd += ["ENTRIESREAD", self.ch(["0", "1", "2", "5", "-1", "-2"])]
                return cmd, "strict"
            if sub == "DESTROY":
                return ["XGROUP", sub, k, g], "strict"
            return ["XGROUP", sub, k, g, self.ch(self.consumers)], "strict"
        if c == "XREADGROUP":
            cmd = ["XREADGROUP", "GROUP", self.ch(self.groups), self.ch(self.consumers)]
            if self.p(0.5):
                cmd += ["COUNT", self.ch(["1", "2", "0", "5"])]
            if self.p(0.15):
                cmd.append("NOACK")
            ks = [k] if self.p(0.8) else [k, self.key()]
            cmd += ["STREAMS"] + ks + [self.ch([">", ">", ">", "0", "0-0", self.old_id()]) for _ in ks]
            return cmd, "strict"
        if c == "XREAD":
            cmd = ["XREAD"]
            if self.p(0.5):
                cmd += ["COUNT", self.ch(["1", "2", "0"])]
            ks = [k] if self.p(0.8) else [k, self.key()]
            cmd += ["STREAMS"] + ks + [self.ch(["0", "0-0", self.old_id()]) for _ in ks]
            return cmd, "strict"
        if c == "XACK":
            return [c, k, self.ch(self.groups)] + [self.old_id() for _ in range(self.r.randint(1, 3))], "strict"
        if c == "XPENDING":
            cmd = [c, k, self.ch(self.groups)]
            if self.p(0.4):
                cmd += [self.range_id(True), self.range_id(False), self.ch(["1", "2", "10", "0", "-1"])]
                if self.p(0.3):
                    cmd.append(self.ch(self.consumers))
                return cmd, "xpending_ext"
            return cmd, "strict"
        if c == "XCLAIM":
            cmd = [c, k, self.ch(self.groups), self.ch(self.consumers), "0"] + \
                [self.old_id() for _ in range(self.r.randint(1, 3))]
            if self.p(0.8):
                cmd.append("JUSTID")
            if self.p(0.2):
                cmd.append("FORCE")
            if self.p(0.2):
                cmd += ["RETRYCOUNT", self.ch(["0", "3"])]
            return cmd, "strict"
        if c == "XAUTOCLAIM":
            cmd = [c, k, self.ch(self.groups), self.ch(self.consumers), "0", self.ch(["0", "0-0", "-"]) if self.p(0.5) else self.old_id()]
            if self.p(0.5):
                cmd += ["COUNT", self.ch(["1", "2", "100", "0"])]
            if self.p(0.85):
                cmd.append("JUSTID")
            return cmd, "strict"
        if c == "XINFO":
            if self.p(0.2):
                return ["XINFO", "STREAM", k], "xinfo_stream"
            if self.p(0.85):
                return ["XINFO", "GROUPS", k], "strict"
            return ["XINFO", "CONSUMERS", k, self.ch(self.groups)], "xinfo_consumers"
        raise Exception(c)


FAMILIES = ["string", "keyspace", "hash", "list", "set", "zset", "stream", "hll", "geo", "sort", "lua",
            "functions"]
