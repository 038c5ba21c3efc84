//! Replies and their encoding in RESP2 or RESP3.
//!
//! Commands build a [`Reply`] tree; the connection encodes it for the
//! protocol version the client chose with HELLO. RESP3-only shapes (maps,
//! sets, doubles, booleans, verbatim strings) degrade to their RESP2 forms as
//! Redis does.

use bytes::{BufMut, Bytes, BytesMut};

/// A reply to one command.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple (status) string, e.g. `+PONG`.
    Simple(&'static str),
    /// A simple string built at run time.
    Status(String),
    /// An error; the text includes its code (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// The null bulk string (RESP2 `$-1`, RESP3 `_`).
    Nil,
    /// The null array (RESP2 `*-1`, RESP3 `_`).
    NilArray,
    /// An array.
    Array(Vec<Reply>),
    /// A map (RESP2: flat array of key, value, key, value...).
    Map(Vec<(Reply, Reply)>),
    /// A set (RESP2: array).
    Set(Vec<Reply>),
    /// A double (RESP2: bulk string in Redis's `%.17g` form).
    Double(f64),
    /// A boolean (RESP2: integer 1/0).
    Bool(bool),
    /// A verbatim text string such as INFO's (RESP2: bulk string).
    Verbatim(String),
    /// A big number, as its decimal digits (RESP2: bulk string); only
    /// scripts make them.
    BigNumber(String),
    /// Out-of-band data such as a Pub/Sub confirmation (RESP3 `>`, RESP2
    /// an array).
    Push(Vec<Reply>),
    /// Several replies sent back to back for one command (SUBSCRIBE a b
    /// confirms each channel in its own frame).
    Frames(Vec<Reply>),
    /// Attributes annotating the reply that follows it in the same
    /// `Frames` (RESP3 `|`); RESP2 has none, so nothing is sent there.
    Attribute(Vec<(Reply, Reply)>),
    /// Nested arrays of bulk strings (and doubles, written for the
    /// client's protocol) already encoded, built by [`Encoder`] straight
    /// from stored rows so a long range costs one buffer, not allocations
    /// per element.
    Encoded(Bytes),
}

/// Writes nested arrays of bulk strings straight into bytes (the same in
/// RESP2 and RESP3; doubles are written for one of them), for replies
/// built from many stored rows.
#[derive(Default)]
pub struct Encoder {
    buf: BytesMut,
    /// Bytes kept free at the front for the header `into_array` writes.
    room: usize,
}

/// The longest array header: `*`, 20 digits, CRLF.
const HEADER_ROOM: usize = 23;

impl Encoder {
    /// An encoder whose buffer starts with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Encoder {
        Encoder {
            buf: BytesMut::with_capacity(n),
            room: 0,
        }
    }

    /// An encoder for the elements of one array whose length is known only
    /// at the end: the header's room is kept in front, so
    /// [`Encoder::into_array`] does not copy the elements (a reply can be
    /// as large as the count a client asks for).
    pub fn array_body() -> Encoder {
        Encoder::array_body_with(4096)
    }

    /// [`Encoder::array_body`] with room for `bytes` of elements, for a
    /// caller that knows about how large they are: a pop's one member in
    /// a 4 KiB buffer held those 4 KiB until the reply went out, in every
    /// reply of a pipeline, and allocating them was 1.9% of the server's
    /// samples under ZPOPMIN at pipeline 16.
    pub fn array_body_with(bytes: usize) -> Encoder {
        let mut buf = BytesMut::with_capacity(HEADER_ROOM + bytes);
        buf.put_bytes(0, HEADER_ROOM);
        Encoder {
            buf,
            room: HEADER_ROOM,
        }
    }

    /// The bytes written so far.
    pub fn finish(mut self) -> Bytes {
        bytes::Buf::advance(&mut self.buf, self.room);
        self.buf.freeze()
    }

    /// A double: RESP3's `,` line, or RESP2's bulk string.
    pub fn double(&mut self, d: f64, resp3: bool) {
        double(&mut self.buf, d, resp3);
    }

    /// An array header of `len` elements.
    pub fn array(&mut self, len: usize) {
        header(&mut self.buf, b'*', len);
    }

    /// A bulk string.
    pub fn bulk(&mut self, b: &[u8]) {
        bulk(&mut self.buf, b);
    }

    /// The bytes written so far as one array of `len` elements.
    pub fn into_array(mut self, len: usize) -> Reply {
        if self.room > 0 {
            let (head, n) = header_bytes(b'*', len);
            let start = self.room - n;
            self.buf[start..self.room].copy_from_slice(&head[..n]);
            bytes::Buf::advance(&mut self.buf, start);
            return Reply::Encoded(self.buf.freeze());
        }
        let mut out = BytesMut::with_capacity(self.buf.len() + 16);
        header(&mut out, b'*', len);
        out.put_slice(&self.buf);
        Reply::Encoded(out.freeze())
    }
}

impl Reply {
    /// An error reply with Redis's generic `ERR` code.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// A bulk string from a copied slice.
    pub fn bulk_copy(b: &[u8]) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(b))
    }

    /// Bulk string or nil.
    pub fn opt_bulk(b: Option<Vec<u8>>) -> Reply {
        b.map_or(Reply::Nil, |v| Reply::Bulk(v.into()))
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends only the pushes of this reply (itself, or those among its
    /// frames): what a client with replies switched off still receives.
    pub fn encode_pushes(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            Reply::Push(_) => self.encode(out, resp3),
            Reply::Frames(frames) => {
                for f in frames {
                    f.encode_pushes(out, resp3);
                }
            }
            _ => {}
        }
    }

    /// Appends the encoding of this reply to `out`.
    pub fn encode(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            Reply::Ok => out.put_slice(b"+OK\r\n"),
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Status(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // An error line may not contain newlines: Redis replaces them.
                let clean: Vec<u8> = e
                    .bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                    .collect();
                line(out, b'-', &clean)
            }
            Reply::Int(i) => {
                out.put_u8(b':');
                put_int(out, *i);
                out.put_slice(b"\r\n");
            }
            Reply::Bulk(b) => bulk(out, b),
            Reply::Nil if resp3 => out.put_slice(b"_\r\n"),
            Reply::Nil => out.put_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NilArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len());
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Push(items) => {
                header(out, if resp3 { b'>' } else { b'*' }, items.len());
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Frames(frames) => {
                for f in frames {
                    f.encode(out, resp3);
                }
            }
            Reply::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, items.len());
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Attribute(_) if !resp3 => {}
            Reply::Attribute(pairs) => {
                header(out, b'|', pairs.len());
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len());
                } else {
                    header(out, b'*', pairs.len() * 2);
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
            Reply::Double(d) => double(out, *d, resp3),
            Reply::Encoded(bytes) => out.put_slice(bytes),
            Reply::Bool(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Bool(b) => out.put_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            Reply::Verbatim(text) if resp3 => {
                header(out, b'=', text.len() + 4);
                out.put_slice(b"txt:");
                out.put_slice(text.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(text) => bulk(out, text.as_bytes()),
            Reply::BigNumber(n) if resp3 => line(out, b'(', n.as_bytes()),
            Reply::BigNumber(n) => bulk(out, n.as_bytes()),
        }
    }
}

/// How Redis 7.0 prints a double in a reply: `%.17g`, with `inf`/`-inf`.
pub fn format_double(d: f64) -> String {
    crate::util::num::format_double(d)
}

/// A double as Redis writes it: RESP3's `,` line, or RESP2's bulk string
/// of its `%.17g` text.
fn double(out: &mut BytesMut, d: f64, resp3: bool) {
    let text = format_double(d);
    if resp3 {
        line(out, b',', text.as_bytes());
    } else {
        bulk(out, text.as_bytes());
    }
}

fn line(out: &mut BytesMut, tag: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(tag);
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, tag: u8, len: usize) {
    let (h, n) = header_bytes(tag, len);
    out.extend_from_slice(&h[..n]);
}

/// `<tag><len>\r\n`, put together on the stack: one copy into the reply
/// instead of one per piece (each with its own capacity check), which
/// counts where an array reply is built from a hundred rows.
fn header_bytes(tag: u8, len: usize) -> ([u8; 24], usize) {
    let mut h = [0u8; 24];
    h[0] = tag;
    // Most lengths have one or two digits: no division loop for those.
    if len < 10 {
        h[1..4].copy_from_slice(&[b'0' + len as u8, b'\r', b'\n']);
        return (h, 4);
    }
    if len < 100 {
        h[1..5].copy_from_slice(&[
            b'0' + (len / 10) as u8,
            b'0' + (len % 10) as u8,
            b'\r',
            b'\n',
        ]);
        return (h, 5);
    }
    let digits = itoa_buf(len as i64);
    let d = &digits.bytes[digits.start..];
    h[1..1 + d.len()].copy_from_slice(d);
    h[1 + d.len()..3 + d.len()].copy_from_slice(b"\r\n");
    (h, 3 + d.len())
}

/// An array (`tag` `*`, or `>` for a RESP3 push) of the bulk strings
/// `parts`, appended to `out`.
pub fn bulk_array(out: &mut BytesMut, tag: u8, parts: &[&[u8]]) {
    header(out, tag, parts.len());
    for p in parts {
        bulk(out, p);
    }
}

fn bulk(out: &mut BytesMut, b: &[u8]) {
    let (h, n) = header_bytes(b'$', b.len());
    out.reserve(h.len() + b.len() + 2);
    // The header goes in as its whole array, a copy of a fixed size the
    // compiler makes inline, and is cut to its length: a copy of `n`
    // bytes was a `memmove` call per element, as the value's still is.
    let at = out.len();
    out.extend_from_slice(&h);
    out.truncate(at + n);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn put_int(out: &mut BytesMut, i: i64) {
    // Lengths and counts are mostly one or two digits.
    if (0..10).contains(&i) {
        out.put_u8(b'0' + i as u8);
        return;
    }
    if (10..100).contains(&i) {
        out.put_slice(&[b'0' + (i / 10) as u8, b'0' + (i % 10) as u8]);
        return;
    }
    let mut buf = itoa_buf(i);
    out.put_slice(buf.as_bytes_mut());
}

/// Formats an integer without allocating.
struct IntBuf {
    bytes: [u8; 20],
    start: usize,
}

impl IntBuf {
    fn as_bytes_mut(&mut self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

fn itoa_buf(i: i64) -> IntBuf {
    let mut bytes = [0u8; 20];
    let mut pos = 20;
    let neg = i < 0;
    let mut n = i.unsigned_abs();
    loop {
        pos -= 1;
        bytes[pos] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if neg {
        pos -= 1;
        bytes[pos] = b'-';
    }
    IntBuf { bytes, start: pos }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: Reply, resp3: bool) -> String {
        let mut out = BytesMut::new();
        r.encode(&mut out, resp3);
        String::from_utf8(out.to_vec()).unwrap()
    }

    /// Bulk headers carry every length in decimal, from the stack buffer.
    #[test]
    fn bulk_headers_of_every_width() {
        for len in [0usize, 9, 10, 99, 100, 12_345, 1 << 20] {
            let body = vec![b'x'; len];
            let mut e = Encoder::default();
            e.bulk(&body);
            let got = e.finish();
            let mut want = format!("${len}\r\n").into_bytes();
            want.extend_from_slice(&body);
            want.extend_from_slice(b"\r\n");
            assert_eq!(got.as_ref(), want.as_slice(), "length {len}");
        }
        let mut e = Encoder::with_capacity(4);
        e.array(123);
        assert_eq!(e.finish().as_ref(), b"*123\r\n");
    }

    #[test]
    fn resp2_and_resp3_forms() {
        assert_eq!(
            enc(Reply::Int(i64::MIN), false),
            ":-9223372036854775808\r\n"
        );
        assert_eq!(enc(Reply::Nil, false), "$-1\r\n");
        assert_eq!(enc(Reply::Nil, true), "_\r\n");
        assert_eq!(enc(Reply::NilArray, false), "*-1\r\n");
        let m = Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]);
        assert_eq!(enc(m.clone(), false), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(m, true), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(Reply::Bool(true), false), ":1\r\n");
        assert_eq!(enc(Reply::err("x\r\ny"), false), "-ERR x  y\r\n");
        let a = Reply::Frames(vec![
            Reply::Attribute(vec![(Reply::bulk("k"), Reply::Int(1))]),
            Reply::Ok,
        ]);
        assert_eq!(enc(a.clone(), false), "+OK\r\n");
        assert_eq!(enc(a, true), "|1\r\n$1\r\nk\r\n:1\r\n+OK\r\n");
    }
}
