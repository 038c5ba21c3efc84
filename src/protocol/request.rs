//! Request decoding.
//!
//! [`RequestParser`] checks a frame's completeness with a resumable scan of
//! the `*N` / `$len` headers, remembering where it stopped: a 10 MB MSET
//! arriving in 64 KiB pieces is scanned once, not re-parsed ~160 times. The
//! same scan enforces Redis's protocol limits with its exact error texts.
//! The scan notes where each argument lies, and a whole frame is then cut
//! into zero-copy slices of the connection's buffer. (It used to be handed
//! to redis-protocol's decoder, which re-read every header the scan had
//! just read and built a frame tree to be taken apart again: ~6% of a
//! GET's CPU. That decoder now checks this one in the tests.)

use bytes::{Bytes, BytesMut};

/// Longest inline request, and longest `*`/`$` header line, Redis accepts
/// before it gives up (PROTO_INLINE_MAX_SIZE).
pub const INLINE_MAX: usize = 64 * 1024;

/// A request that breaks the protocol. The connection replies with the
/// message (already carrying Redis's `Protocol error:` wording) and closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

/// Where the completeness scan of the current multibulk frame stopped.
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    /// Bytes of the frame known to be complete so far.
    pos: usize,
    /// Bulk strings still to scan; `None` until the `*N` line has been read.
    remaining: Option<u64>,
}

/// Splits a connection's byte stream into commands (argument vectors).
#[derive(Debug)]
pub struct RequestParser {
    max_bulk_len: u64,
    scan: Scan,
    /// Where each argument the scan has passed lies in the frame (start,
    /// length), so a whole frame is cut without reading its headers again.
    spans: Vec<(usize, usize)>,
}

impl RequestParser {
    /// A parser enforcing `proto-max-bulk-len`.
    pub fn new(max_bulk_len: u64) -> Self {
        RequestParser {
            max_bulk_len,
            scan: Scan::default(),
            spans: Vec::new(),
        }
    }

    /// Takes the next whole command off the front of `buf`. `Ok(None)` means
    /// more bytes are needed. An empty argument vector is a request Redis
    /// ignores (an empty inline line, `*0`, `*-1`): the caller skips it.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        Ok(self.next_framed(buf)?.map(|(argv, _)| argv))
    }

    /// [`RequestParser::next`], with the whole frame the arguments were cut
    /// from (`None` for an inline request): whoever may need the arguments
    /// again later (the slow log) keeps the frame, one reference, rather
    /// than each argument.
    #[allow(clippy::type_complexity)]
    pub fn next_framed(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Option<(Vec<Bytes>, Option<Bytes>)>, ProtocolError> {
        if buf.is_empty() {
            return Ok(None);
        }
        if buf[0] != b'*' {
            return Ok(parse_inline(buf)?.map(|argv| (argv, None)));
        }
        let Some(len) = self.scan_multibulk(buf)? else {
            return Ok(None);
        };
        self.scan = Scan::default();
        let frame = buf.split_to(len).freeze();
        // `*0` and negative counts are requests Redis silently skips.
        if frame.starts_with(b"*-") || frame.starts_with(b"*0\r") {
            return Ok(Some((Vec::new(), None)));
        }
        let argv = self
            .spans
            .drain(..)
            .map(|(start, len)| frame.slice(start..start + len))
            .collect();
        Ok(Some((argv, Some(frame))))
    }

    /// Resumable completeness check: returns the frame length once the whole
    /// frame is in `buf`.
    fn scan_multibulk(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let remaining = match self.scan.remaining {
            Some(r) => r,
            None => {
                let Some(line_end) = find_crlf(buf, 1) else {
                    if buf.len() > INLINE_MAX {
                        return Err(perr("too big mbulk count string"));
                    }
                    return Ok(None);
                };
                let count = parse_len(&buf[1..line_end]);
                let count = match count {
                    Some(c) if c <= i32::MAX as i64 => c,
                    _ => return Err(perr("invalid multibulk length")),
                };
                self.scan.pos = line_end + 2;
                self.spans.clear();
                let count = count.max(0) as u64;
                self.scan.remaining = Some(count);
                count
            }
        };
        let mut remaining = remaining;
        let mut pos = self.scan.pos;
        while remaining > 0 {
            if pos >= buf.len() {
                break;
            }
            if buf[pos] != b'$' {
                return Err(perr(&format!("expected '$', got '{}'", buf[pos] as char)));
            }
            let Some(line_end) = find_crlf(buf, pos + 1) else {
                if buf.len() - pos > INLINE_MAX {
                    return Err(perr("too big bulk count string"));
                }
                break;
            };
            let len = match parse_len(&buf[pos + 1..line_end]) {
                Some(l) if l >= 0 && l as u64 <= self.max_bulk_len => l as usize,
                _ => return Err(perr("invalid bulk length")),
            };
            let end = line_end + 2 + len + 2;
            if end > buf.len() {
                break;
            }
            self.spans.push((line_end + 2, len));
            pos = end;
            remaining -= 1;
        }
        self.scan.pos = pos;
        self.scan.remaining = Some(remaining);
        Ok((remaining == 0).then_some(pos))
    }
}

fn perr(what: &str) -> ProtocolError {
    ProtocolError(format!("Protocol error: {what}"))
}

/// Cuts a frame the scan has proven whole (one [`RequestParser::next_framed`]
/// returned, kept by the slow log) into its arguments again: slices of
/// `frame`, no copies. The scan has validated every header, so this walk
/// only reads the lengths. Like Redis, it does not look at the two bytes
/// that end each bulk string.
pub fn split_frame(frame: &Bytes) -> Vec<Bytes> {
    let header_end = find_crlf(frame, 1).expect("scanned header");
    let count = parse_len(&frame[1..header_end]).unwrap_or(0).max(0) as usize;
    // The count is the client's word: the vector grows past a bound only
    // as arguments really arrive.
    let mut args = Vec::with_capacity(count.min(1024));
    let mut pos = header_end + 2;
    for _ in 0..count {
        let line_end = find_crlf(frame, pos + 1).expect("scanned bulk header");
        let len = parse_len(&frame[pos + 1..line_end]).unwrap_or(0) as usize;
        let start = line_end + 2;
        args.push(frame.slice(start..start + len));
        pos = start + len + 2;
    }
    args
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        let off = buf[i..].iter().position(|&b| b == b'\r')?;
        i += off;
        if i + 1 < buf.len() {
            if buf[i + 1] == b'\n' {
                return Some(i);
            }
        } else {
            return None;
        }
        i += 1;
    }
    None
}

/// Parses a header length the way Redis's string2ll does (optional '-',
/// digits, no '+', no spaces).
fn parse_len(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// An inline command: one line, split like redis-cli/telnet input.
fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > INLINE_MAX {
            return Err(perr("too big inline request"));
        }
        return Ok(None);
    };
    let line = buf.split_to(nl + 1);
    let mut line = &line[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    split_args(line)
        .map(|args| Some(args.into_iter().map(Bytes::from).collect()))
        .ok_or_else(|| perr("unbalanced quotes in request"))
}

/// Splits a line into arguments with Redis's inline rules: whitespace
/// separates; "double quotes" take \n \r \t \b \a \\ \" and \xHH escapes;
/// 'single quotes' take only \'; a closing quote must end the argument.
/// `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                let c = *line.get(i)?;
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        cur.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a space or the end.
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
                i += 1;
            } else if in_sq {
                let c = *line.get(i)?;
                if c == b'\\' && i + 1 < line.len() && line[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                } else if c == b'\'' {
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                match line.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_dq = true,
                    Some(b'\'') => in_sq = true,
                    Some(&c) => cur.push(c),
                }
                i += 1;
            }
        }
        args.push(cur);
    }
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Appends one command as a client sends it (an array of bulk strings):
/// what cairn sends other servers (MIGRATE, MEET, the cluster bus).
pub fn encode_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut p = RequestParser::new(512 * 1024 * 1024);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(cmd) = p.next(&mut buf)? {
            out.push(cmd);
        }
        Ok(out)
    }

    /// Splitting agrees with redis-protocol's decoder on every frame of a
    /// pseudo-random mix of argument counts and lengths (empty, binary,
    /// CRLF inside), fed whole and one byte at a time.
    #[test]
    fn split_matches_reference_decoder() {
        use redis_protocol::resp2::types::BytesFrame;
        let mut next = crate::util::test_rng(0x2545_f491_4f6c_dd1du64);
        for _ in 0..300 {
            let argc = 1 + next(6) as usize;
            let mut wire = format!("*{argc}\r\n").into_bytes();
            for _ in 0..argc {
                let len = [0, 1, 2, 17, 300][next(5) as usize];
                let arg: Vec<u8> = (0..len)
                    .map(|_| [b'a', b'\r', b'\n', 0, 255][next(5) as usize])
                    .collect();
                wire.extend_from_slice(format!("${len}\r\n").as_bytes());
                wire.extend_from_slice(&arg);
                wire.extend_from_slice(b"\r\n");
            }
            let frame = Bytes::from(wire.clone());
            let reference = match redis_protocol::resp2::decode::decode_bytes(&frame) {
                Ok(Some((BytesFrame::Array(items), used))) => {
                    assert_eq!(used, wire.len());
                    items
                        .into_iter()
                        .map(|i| match i {
                            BytesFrame::BulkString(b) => b,
                            other => panic!("unexpected {other:?}"),
                        })
                        .collect::<Vec<_>>()
                }
                other => panic!("reference decoder: {other:?}"),
            };
            assert_eq!(parse_all(&wire).unwrap(), vec![reference.clone()]);
            assert_eq!(split_frame(&frame), reference);
            let mut p = RequestParser::new(512 * 1024 * 1024);
            let mut buf = BytesMut::new();
            let mut got = None;
            for b in &wire {
                assert!(got.is_none(), "a frame came out before its last byte");
                buf.extend_from_slice(&[*b]);
                got = p.next(&mut buf).unwrap();
            }
            assert_eq!(got, Some(reference));
        }
    }

    #[test]
    fn multibulk_and_inline() {
        let cmds = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\r\nSET \"a b\" 'c'\r\n").unwrap();
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0], vec![Bytes::from("GET"), Bytes::from("a")]);
        assert_eq!(cmds[1], vec![Bytes::from("PING")]);
        assert_eq!(
            cmds[2],
            vec![Bytes::from("SET"), Bytes::from("a b"), Bytes::from("c")]
        );
    }

    #[test]
    fn errors_use_redis_text() {
        let e = |b: &[u8]| parse_all(b).unwrap_err().0;
        assert_eq!(e(b"*abc\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(
            e(b"*3000000000\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(e(b"*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            e(b"*1\r\n$600000000\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(e(b"*1\r\n:1\r\n"), "Protocol error: expected '$', got ':'");
        assert_eq!(
            e(b"SET \"a\r\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(e(&[b'x'; 70000]), "Protocol error: too big inline request");
    }

    #[test]
    fn empty_requests_are_skipped() {
        let cmds = parse_all(b"*0\r\n*-1\r\n\r\n").unwrap();
        assert!(cmds.iter().all(|c| c.is_empty()));
    }

    #[test]
    fn large_request_in_pieces_resumes_scan() {
        let mut req = format!("*{}\r\n", 2 + 2 * 1000).into_bytes();
        {
            let a = "MSET";
            req.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
        }
        req.extend_from_slice(b"$1\r\nk\r\n");
        for i in 0..1000 {
            let k = format!("key{i}");
            req.extend_from_slice(format!("${}\r\n{}\r\n$1\r\nv\r\n", k.len(), k).as_bytes());
        }
        let mut p = RequestParser::new(1 << 29);
        let mut buf = BytesMut::new();
        let mut got = None;
        for chunk in req.chunks(7) {
            buf.extend_from_slice(chunk);
            if let Some(cmd) = p.next(&mut buf).unwrap() {
                got = Some(cmd);
            }
        }
        assert_eq!(got.unwrap().len(), 2002);
        assert!(buf.is_empty());
    }
}
