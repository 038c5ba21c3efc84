//! Compatibility transcripts.
//!
//! Replays every `tests/compat/cases/<name>.txt` against cairn and compares each
//! reply, byte for byte, with `tests/compat/expected/<name>.txt`, which
//! `tests/compat/record.py` recorded from a real Redis 7.0.x.  The file format is
//! described in `tests/compat/README.md`.
//!
//! Environment:
//! * `CAIRN_COMPAT_ADDR=127.0.0.1:PORT` runs the cases against an already-running
//!   server (used to check the harness against real Redis) instead of starting
//!   cairn.  Only loopback addresses are accepted.
//! * `CAIRN_COMPAT_CLUSTER_ADDR=127.0.0.1:PORT` runs the cluster cases (first
//!   line `!cluster`) against an already-running cluster node instead of a
//!   fresh cairn in cluster mode per case.  With `CAIRN_COMPAT_ADDR` set and
//!   this not, cluster cases are skipped.
//! * `CAIRN_COMPAT_ONLY=name[,name...]` runs only these case files.
//!
//! Every difference in every file is collected; the test fails once at the end
//! with the full list (file, line, command, expected, got).

mod common;

use cairn::shard::disk_reads::Pin;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Upper bound for any single reply.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// After a `!raw` reply that the server keeps the connection open for: how long
/// to watch for unexpected extra bytes or a close.
const RAW_GRACE: Duration = Duration::from_millis(100);
/// After a `!raw` that expects no reply at all: how long to watch for one.
const RAW_NO_REPLY_GRACE: Duration = Duration::from_millis(300);
/// After a reply that Redis followed by closing the connection: how long to
/// wait for the close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Longest reply text shown in the report.
const SHOW_MAX: usize = 600;

// ---------------------------------------------------------------------------
// Case files
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Cmd(Vec<Vec<u8>>),
    Raw(Vec<u8>),
    Sleep(u64),
    Reconnect,
    Unordered,
    Ignore,
    Shape,
    /// `!topology`: the next reply is compared after `topology_normalize`.
    Topology,
    /// `!cluster` (first line only): the file runs on a fresh cluster node.
    Cluster,
    /// `!debug` (first line only): the file runs on a fresh server that
    /// allows the protected commands from local clients
    /// (`enable-debug-command local`, `enable-module-command local`).
    Debug,
    /// `!conn <name>`: later entries use the connection `<name>`, opened on
    /// first use.
    Conn(Vec<u8>),
    /// `!drain`: every frame the server pushes on the current connection.
    Drain,
    /// `!frames N`: the next command's reply is N frames (`Entry::frames`).
    Frames,
}

#[derive(Debug, Clone)]
struct Entry {
    lineno: usize,
    /// The line as written, trailing whitespace removed.
    text: Vec<u8>,
    kind: Kind,
    /// For `Cmd`: the reply is compared as a multiset (`!unordered`).
    unordered: bool,
    /// For `Cmd`: only the reply's type byte is compared (`!ignore`).
    ignore: bool,
    /// For `Cmd`: the reply is compared by shape (`!shape`): stream ids and
    /// integers may differ.
    shape: bool,
    /// For `Cmd`: the reply is compared with node ids, the server's port and
    /// bus port and ping/pong times normalized (`!topology`).
    topology: bool,
    /// For `Cmd`: how many complete frames its reply is (`!frames N`; 1
    /// otherwise), compared concatenated.
    frames: usize,
}

/// The connection a case starts on; `!conn main` switches back to it.
const MAIN_CONN: &[u8] = b"main";

/// `!conn` names: non-empty, ASCII letters, digits, `_` and `-`.
fn valid_conn_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Split a line the way redis-cli does (sdssplitargs).
fn split_args(line: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut args = Vec::new();
    let n = line.len();
    let mut p = 0;
    loop {
        while p < n && is_space(line[p]) {
            p += 1;
        }
        if p >= n {
            return Ok(args);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = line.get(p).copied();
            if inq {
                let Some(c) = c else {
                    return Err("unterminated double quote".into());
                };
                if c == b'\\'
                    && p + 3 < n
                    && line[p + 1] == b'x'
                    && hex_val(line[p + 2]).is_some()
                    && hex_val(line[p + 3]).is_some()
                {
                    cur.push(hex_val(line[p + 2]).unwrap() * 16 + hex_val(line[p + 3]).unwrap());
                    p += 3;
                } else if c == b'\\' && p + 1 < n {
                    p += 1;
                    cur.push(match line[p] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    if p + 1 < n && !is_space(line[p + 1]) {
                        return Err("closing quote must be followed by a space".into());
                    }
                    p += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if insq {
                let Some(c) = c else {
                    return Err("unterminated single quote".into());
                };
                if c == b'\\' && p + 1 < n && line[p + 1] == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if p + 1 < n && !is_space(line[p + 1]) {
                        return Err("closing quote must be followed by a space".into());
                    }
                    p += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t' | 0) => {
                        p += 1;
                        break;
                    }
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(c) => cur.push(c),
                }
            }
            p += 1;
        }
        args.push(cur);
    }
}

fn trim_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b' ' | b'\t' | b'\r'] = s {
        s = rest;
    }
    s
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

fn parse_case_file(name: &str, data: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let (mut pending_unordered, mut pending_ignore, mut pending_shape) = (false, false, false);
    let mut pending_topology = false;
    // `!frames N` seen and N not yet given to a command (0: none pending).
    let mut pending_frames = 0;
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        let lineno = i + 1;
        let text = trim_end(line);
        let stripped = trim_start(text);
        if stripped.is_empty() || stripped[0] == b'#' {
            continue;
        }
        let at = |msg: &str| format!("{name}.txt:{lineno}: {msg}");
        let mut entry = Entry {
            lineno,
            text: text.to_vec(),
            kind: Kind::Reconnect,
            unordered: false,
            ignore: false,
            shape: false,
            topology: false,
            frames: 1,
        };
        if stripped[0] == b'!' {
            let toks = split_args(&stripped[1..]).map_err(|e| at(&e))?;
            let prefix_pending = pending_unordered
                || pending_ignore
                || pending_shape
                || pending_topology
                || pending_frames > 0;
            entry.kind = match (toks.first().map(|t| t.as_slice()), toks.len()) {
                (Some(b"unordered" | b"ignore" | b"shape" | b"topology"), 1) => {
                    if prefix_pending {
                        return Err(at("two prefix directives in a row"));
                    }
                    match toks[0].as_slice() {
                        b"unordered" => {
                            pending_unordered = true;
                            Kind::Unordered
                        }
                        b"ignore" => {
                            pending_ignore = true;
                            Kind::Ignore
                        }
                        b"topology" => {
                            pending_topology = true;
                            Kind::Topology
                        }
                        _ => {
                            pending_shape = true;
                            Kind::Shape
                        }
                    }
                }
                (Some(b"frames"), 2) => {
                    if prefix_pending {
                        return Err(at("two prefix directives in a row"));
                    }
                    pending_frames = std::str::from_utf8(&toks[1])
                        .ok()
                        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|s| s.parse::<usize>().ok())
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| at("bad !frames (N >= 1)"))?;
                    Kind::Frames
                }
                (Some(b"sleep"), 2) => {
                    let ms = std::str::from_utf8(&toks[1])
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| at("bad !sleep"))?;
                    Kind::Sleep(ms)
                }
                (Some(b"raw"), 2) if !prefix_pending => Kind::Raw(toks[1].clone()),
                (Some(b"reconnect"), 1) if !prefix_pending => Kind::Reconnect,
                (Some(b"drain"), 1) if !prefix_pending => Kind::Drain,
                (Some(b"conn"), 2) if !prefix_pending => {
                    if !valid_conn_name(&toks[1]) {
                        return Err(at("a connection name is letters, digits, '_' and '-'"));
                    }
                    Kind::Conn(toks[1].clone())
                }
                (Some(b"cluster"), 1) if entries.is_empty() => Kind::Cluster,
                (Some(b"debug"), 1) if entries.is_empty() => Kind::Debug,
                _ => return Err(at("unknown or misplaced directive")),
            };
        } else {
            let args = split_args(stripped).map_err(|e| at(&e))?;
            if args.is_empty() {
                return Err(at("no command"));
            }
            entry.kind = Kind::Cmd(args);
            entry.unordered = pending_unordered;
            entry.ignore = pending_ignore;
            entry.shape = pending_shape;
            entry.topology = pending_topology;
            entry.frames = pending_frames.max(1);
            pending_frames = 0;
            pending_unordered = false;
            pending_ignore = false;
            pending_shape = false;
            pending_topology = false;
        }
        entries.push(entry);
    }
    if pending_unordered
        || pending_ignore
        || pending_shape
        || pending_topology
        || pending_frames > 0
    {
        return Err(format!("{name}.txt: prefix directive at end of file"));
    }
    Ok(entries)
}

// ---------------------------------------------------------------------------
// Expected files
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Exact bytes, connection still open.
    Bytes(Vec<u8>),
    /// An array compared as a multiset of its elements.
    Unordered(Vec<u8>),
    /// These bytes, then the connection closed.
    Closed(Vec<u8>),
    /// Only the first byte (the reply type) is compared.
    Ignored(Vec<u8>),
    /// Compared by shape: stream ids and integers may differ (`same_shape`).
    Shape(Vec<u8>),
    /// Compared after `topology_normalize` on both sides.
    Topology(Vec<u8>),
}

/// One `> ` line of an expected file and the reply line after it, if any.
struct Recorded {
    text: Vec<u8>,
    expect: Option<Expect>,
}

fn unescape(s: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        match s.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b'r') => out.push(b'\r'),
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(b'x') => {
                let h = s.get(i + 2).copied().and_then(hex_val);
                let l = s.get(i + 3).copied().and_then(hex_val);
                match (h, l) {
                    (Some(h), Some(l)) => out.push(h * 16 + l),
                    _ => return Err("bad \\x escape".into()),
                }
                i += 2;
            }
            _ => return Err("bad escape".into()),
        }
        i += 2;
    }
    Ok(out)
}

fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// Header line of an expected file naming the port of the server recorded
/// (written by record.py for cluster and `!topology` cases).
const PORT_HEADER: &[u8] = b"# recorded on port: ";

/// An expected file: its entries, and the port the recorded server had.
struct ExpectedFile {
    recorded: Vec<Recorded>,
    port: Option<u16>,
}

fn parse_expected_file(name: &str, data: &[u8]) -> Result<ExpectedFile, String> {
    let mut out: Vec<Recorded> = Vec::new();
    let mut port = None;
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        let at = |msg: &str| format!("expected/{name}.txt:{}: {msg}", i + 1);
        if let Some(p) = line.strip_prefix(PORT_HEADER) {
            let p = std::str::from_utf8(p).ok().and_then(|p| p.parse().ok());
            port = Some(p.ok_or_else(|| at("bad port header"))?);
            continue;
        }
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        if let Some(text) = line.strip_prefix(b"> ") {
            out.push(Recorded {
                text: text.to_vec(),
                expect: None,
            });
            continue;
        }
        if line[0] != b'<' {
            return Err(at("line is neither '> ' nor '<'"));
        }
        let (tag, rest) = match line.iter().position(|&b| b == b' ') {
            Some(sp) => (&line[..sp], &line[sp + 1..]),
            None => (line, &b""[..]),
        };
        let bytes = unescape(rest).map_err(|e| at(&e))?;
        let expect = match tag {
            b"<" => Expect::Bytes(bytes),
            b"<unordered" => Expect::Unordered(bytes),
            b"<closed" => Expect::Closed(bytes),
            b"<ignored" => Expect::Ignored(bytes),
            b"<shape" => Expect::Shape(bytes),
            b"<topology" => {
                if port.is_none() {
                    return Err(at("<topology before the '# recorded on port:' header"));
                }
                Expect::Topology(bytes)
            }
            _ => return Err(at("unknown reply tag")),
        };
        match out.last_mut() {
            Some(r) if r.expect.is_none() => r.expect = Some(expect),
            _ => return Err(at("reply line without a command line before it")),
        }
    }
    Ok(ExpectedFile {
        recorded: out,
        port,
    })
}

// ---------------------------------------------------------------------------
// RESP2 / RESP3 framing
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum Frame {
    Incomplete,
    Bad,
}

fn frame_line(buf: &[u8], pos: usize) -> Result<(&[u8], usize), Frame> {
    let rest = buf.get(pos..).ok_or(Frame::Incomplete)?;
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok((&rest[..i], pos + i + 2)),
        None => Err(Frame::Incomplete),
    }
}

fn frame_int(b: &[u8]) -> Result<i64, Frame> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(Frame::Bad)
}

/// Offset just past one complete reply starting at `pos`.  An attribute (`|`)
/// is framed together with the reply it annotates.
fn reply_end(buf: &[u8], pos: usize) -> Result<usize, Frame> {
    let t = *buf.get(pos).ok_or(Frame::Incomplete)?;
    let (body, next) = frame_line(buf, pos + 1)?;
    match t {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(next),
        b'$' | b'!' | b'=' => {
            let n = frame_int(body)?;
            if n < 0 {
                return Ok(next);
            }
            let end = next + n as usize;
            if buf.len() < end + 2 {
                return Err(Frame::Incomplete);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(Frame::Bad);
            }
            Ok(end + 2)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = frame_int(body)?;
            if n < 0 {
                return Ok(next);
            }
            let n = if matches!(t, b'%' | b'|') { n * 2 } else { n };
            let mut p = next;
            for _ in 0..n {
                p = reply_end(buf, p)?;
            }
            if t == b'|' {
                return reply_end(buf, p);
            }
            Ok(p)
        }
        _ => Err(Frame::Bad),
    }
}

/// How many complete replies `buf` starts with.
fn count_replies(buf: &[u8]) -> usize {
    let (mut n, mut p) = (0, 0);
    while let Ok(e) = reply_end(buf, p) {
        n += 1;
        p = e;
    }
    n
}

/// Split an array/set reply into its header line and its elements' bytes.
fn split_aggregate(reply: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    if !matches!(reply.first(), Some(b'*' | b'~')) {
        return None;
    }
    let (body, mut p) = frame_line(reply, 1).ok()?;
    let n: i64 = std::str::from_utf8(body).ok()?.parse().ok()?;
    let mut elems = Vec::new();
    for _ in 0..n.max(0) {
        let e = reply_end(reply, p).ok()?;
        elems.push(&reply[p..e]);
        p = e;
    }
    if p != reply.len() {
        return None;
    }
    Some((&reply[..frame_line(reply, 1).ok()?.1], elems))
}

fn same_multiset(expected: &[u8], got: &[u8]) -> bool {
    let (Some((eh, ee)), Some((gh, ge))) = (split_aggregate(expected), split_aggregate(got)) else {
        return expected == got;
    };
    if eh != gh {
        return false;
    }
    let mut counts: HashMap<&[u8], i64> = HashMap::new();
    for e in ee {
        *counts.entry(e).or_default() += 1;
    }
    for g in ge {
        *counts.entry(g).or_default() -= 1;
    }
    counts.values().all(|&c| c == 0)
}

/// `<digits>-<digits>`: what a stream id looks like in a reply.
fn is_stream_id(s: &[u8]) -> bool {
    let Some(dash) = s.iter().position(|&b| b == b'-') else {
        return false;
    };
    let (ms, seq) = (&s[..dash], &s[dash + 1..]);
    !ms.is_empty()
        && !seq.is_empty()
        && ms.iter().all(u8::is_ascii_digit)
        && seq.iter().all(u8::is_ascii_digit)
}

/// A status line with what DEBUG OBJECT prints that no two servers share
/// (`at:0x<address>`, `lru:<clock>`, `lru_seconds_idle:<seconds>`) made
/// `#`, so such lines compare by the rest.
fn mask_volatile(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let (prefix, digit): (&[u8], fn(&u8) -> bool) = if rest.starts_with(b"0x") {
            (b"0x", u8::is_ascii_hexdigit)
        } else if rest.starts_with(b"lru:") {
            (b"lru:", u8::is_ascii_digit)
        } else if rest.starts_with(b"lru_seconds_idle:") {
            (b"lru_seconds_idle:", u8::is_ascii_digit)
        } else {
            out.push(s[i]);
            i += 1;
            continue;
        };
        out.extend_from_slice(prefix);
        i += prefix.len();
        let n = s[i..].iter().take_while(|b| digit(b)).count();
        if n > 0 {
            out.push(b'#');
        }
        i += n;
    }
    out
}

/// Walk one reply in `e` at `ep` and one in `g` at `gp` side by side; return
/// the offsets just past both if they have the same shape (see `same_shape`).
fn shape_walk(e: &[u8], ep: usize, g: &[u8], gp: usize) -> Option<(usize, usize)> {
    let t = *e.get(ep)?;
    if g.get(gp) != Some(&t) {
        return None;
    }
    let (eb, en) = frame_line(e, ep + 1).ok()?;
    let (gb, gn) = frame_line(g, gp + 1).ok()?;
    match t {
        b':' => {
            frame_int(eb).ok()?;
            frame_int(gb).ok()?;
            Some((en, gn))
        }
        b'+' => (eb == gb
            || (is_stream_id(eb) && is_stream_id(gb))
            || mask_volatile(eb) == mask_volatile(gb))
        .then_some((en, gn)),
        b'-' | b'_' | b',' | b'#' | b'(' => (eb == gb).then_some((en, gn)),
        b'$' | b'!' | b'=' => {
            let ee = reply_end(e, ep).ok()?;
            let ge = reply_end(g, gp).ok()?;
            if frame_int(eb).ok()? < 0 || frame_int(gb).ok()? < 0 {
                return (eb == gb).then_some((ee, ge));
            }
            let (ev, gv) = (&e[en..ee - 2], &g[gn..ge - 2]);
            let ids = t == b'$' && is_stream_id(ev) && is_stream_id(gv);
            (ev == gv || ids).then_some((ee, ge))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = frame_int(eb).ok()?;
            if n != frame_int(gb).ok()? {
                return None;
            }
            let n = if matches!(t, b'%' | b'|') { n * 2 } else { n };
            let (mut ep, mut gp) = (en, gn);
            for _ in 0..n.max(0) {
                (ep, gp) = shape_walk(e, ep, g, gp)?;
            }
            if t == b'|' {
                return shape_walk(e, ep, g, gp);
            }
            Some((ep, gp))
        }
        _ => None,
    }
}

/// `!shape`: one complete reply each, the same RESP structure (types, lengths
/// of aggregates, every string byte for byte), except that a simple or bulk
/// string of the form `<digits>-<digits>` (a stream id) matches any other such
/// string of the same type, any integer reply matches any integer, and a
/// simple string matches one that differs only in DEBUG OBJECT's address and
/// LRU clock (see `mask_volatile`).
fn same_shape(expected: &[u8], got: &[u8]) -> bool {
    shape_walk(expected, 0, got, 0) == Some((expected.len(), got.len()))
}

/// The run-specific values of a cluster node: its port (the bus port is
/// assumed to be port + 10000, as both Redis and cairn default to).
#[derive(Clone, Copy)]
struct NodeValues {
    port: u16,
}

impl NodeValues {
    fn bus(self) -> u32 {
        u32::from(self.port) + 10000
    }
}

/// `!topology` text rule: every maximal run of ASCII letters and digits that
/// is 40 lowercase hex digits (a node id) becomes `<id>`; every maximal run of
/// digits equal to the port or the bus port becomes `<port>` / `<bus>`; and in
/// a CLUSTER NODES line (first field an id, at least 8 fields) the ping-sent
/// and pong-received times become `<t>`.
fn topology_text(text: &[u8], node: NodeValues) -> Vec<u8> {
    let (port, bus) = (node.port.to_string(), node.bus().to_string());
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if !text[i].is_ascii_alphanumeric() {
            out.push(text[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_alphanumeric() {
            i += 1;
        }
        let word = &text[start..i];
        let is_id = word.len() == 40 && word.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        if is_id {
            out.extend_from_slice(b"<id>");
            continue;
        }
        // Digit runs inside the word (e.g. none in "myself", "127" in an ip).
        let mut j = 0;
        while j < word.len() {
            if !word[j].is_ascii_digit() {
                out.push(word[j]);
                j += 1;
                continue;
            }
            let d = j;
            while j < word.len() && word[j].is_ascii_digit() {
                j += 1;
            }
            let digits = &word[d..j];
            if digits == port.as_bytes() {
                out.extend_from_slice(b"<port>");
            } else if digits == bus.as_bytes() {
                out.extend_from_slice(b"<bus>");
            } else {
                out.extend_from_slice(digits);
            }
        }
    }
    // CLUSTER NODES lines: fields 5 and 6 are ping-sent and pong-received
    // times (ms), which only a run's timing decides.
    let lines: Vec<Vec<u8>> = out
        .split(|&b| b == b'\n')
        .map(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if fields.len() < 8 || fields[0] != b"<id>" {
                return line.to_vec();
            }
            let mut f: Vec<&[u8]> = fields.clone();
            f[4] = b"<t>";
            f[5] = b"<t>";
            f.join(&b' ')
        })
        .collect();
    lines.join(&b'\n')
}

/// `!topology`: one reply rewritten with `topology_text` applied to every
/// simple string, error, bulk and verbatim string (bulk lengths recomputed),
/// and integers equal to the port or bus port replaced by `<port>` / `<bus>`.
/// `None` if `reply` is not exactly one complete reply.
fn topology_normalize(reply: &[u8], node: NodeValues) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(reply.len());
    let end = topology_walk(reply, 0, node, &mut out)?;
    (end == reply.len()).then_some(out)
}

fn topology_walk(r: &[u8], pos: usize, node: NodeValues, out: &mut Vec<u8>) -> Option<usize> {
    let t = *r.get(pos)?;
    let (body, next) = frame_line(r, pos + 1).ok()?;
    match t {
        b':' => {
            out.push(b':');
            let n = frame_int(body).ok()?;
            if n == i64::from(node.port) {
                out.extend_from_slice(b"<port>");
            } else if n == i64::from(node.bus()) {
                out.extend_from_slice(b"<bus>");
            } else {
                out.extend_from_slice(body);
            }
            out.extend_from_slice(b"\r\n");
            Some(next)
        }
        b'+' | b'-' => {
            out.push(t);
            out.extend_from_slice(&topology_text(body, node));
            out.extend_from_slice(b"\r\n");
            Some(next)
        }
        b'$' | b'=' if frame_int(body).ok()? >= 0 => {
            let end = reply_end(r, pos).ok()?;
            let text = topology_text(&r[next..end - 2], node);
            out.push(t);
            out.extend_from_slice(text.len().to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&text);
            out.extend_from_slice(b"\r\n");
            Some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            out.extend_from_slice(&r[pos..next]);
            let n = frame_int(body).ok()?;
            let n = if matches!(t, b'%' | b'|') { n * 2 } else { n };
            let mut p = next;
            for _ in 0..n.max(0) {
                p = topology_walk(r, p, node, out)?;
            }
            if t == b'|' {
                return topology_walk(r, p, node, out);
            }
            Some(p)
        }
        _ => {
            let end = reply_end(r, pos).ok()?;
            out.extend_from_slice(&r[pos..end]);
            Some(end)
        }
    }
}

/// `!topology` comparison: both replies normalized with their own server's
/// values, then compared byte for byte.
fn same_topology(expected: &[u8], exp_node: NodeValues, got: &[u8], got_node: NodeValues) -> bool {
    match (
        topology_normalize(expected, exp_node),
        topology_normalize(got, got_node),
    ) {
        (Some(e), Some(g)) => e == g,
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------

fn encode_command(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

enum Recv {
    Data,
    Eof,
    Timeout,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

/// What the server sent for one entry.
struct Got {
    bytes: Vec<u8>,
    closed: bool,
    timed_out: bool,
}

impl Conn {
    fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect_timeout(&addr, READ_TIMEOUT)
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(READ_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            closed: false,
        })
    }

    fn send(&mut self, data: &[u8]) {
        if !self.closed && self.stream.write_all(data).is_err() {
            self.closed = true;
        }
    }

    /// One read, waiting at most `wait`.
    fn recv(&mut self, wait: Duration) -> Recv {
        if self.closed {
            return Recv::Eof;
        }
        let wait = wait.max(Duration::from_millis(1));
        if self.stream.set_read_timeout(Some(wait)).is_err() {
            self.closed = true;
            return Recv::Eof;
        }
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) => {
                self.closed = true;
                Recv::Eof
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Recv::Data
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Recv::Timeout
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Recv::Data,
            Err(_) => {
                self.closed = true;
                Recv::Eof
            }
        }
    }

    /// One complete reply, or what arrived before the close or the timeout.
    fn read_reply(&mut self) -> Got {
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            match reply_end(&self.buf, 0) {
                Ok(end) => {
                    let bytes = self.buf.drain(..end).collect();
                    return Got {
                        bytes,
                        closed: false,
                        timed_out: false,
                    };
                }
                Err(Frame::Bad) => {
                    // Not RESP: hand over everything so the report shows it.
                    let bytes = std::mem::take(&mut self.buf);
                    return Got {
                        bytes,
                        closed: self.closed,
                        timed_out: false,
                    };
                }
                Err(Frame::Incomplete) => {}
            }
            if self.closed {
                return Got {
                    bytes: std::mem::take(&mut self.buf),
                    closed: true,
                    timed_out: false,
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Got {
                    bytes: std::mem::take(&mut self.buf),
                    closed: false,
                    timed_out: true,
                };
            }
            let _ = self.recv(deadline - now);
        }
    }

    /// `n` complete replies concatenated (`!frames N`; 1 for a plain command),
    /// or what arrived before the close or the timeout.
    fn read_frames(&mut self, n: usize) -> Got {
        let mut got = self.read_reply();
        for _ in 1..n {
            if got.closed || got.timed_out {
                break;
            }
            let more = self.read_reply();
            got.bytes.extend_from_slice(&more.bytes);
            got.closed = more.closed;
            got.timed_out = more.timed_out;
        }
        got
    }

    /// Everything the server sends after a `!raw` write, or by itself for
    /// `!drain`, steered by what Redis sent: wait until as many complete
    /// replies (or at least as many bytes) have arrived; then, if Redis closed
    /// the connection, wait for the close, else watch briefly (longer when
    /// Redis sent nothing) for extra bytes or a close.
    fn read_raw(&mut self, expected: &[u8], want_closed: bool) -> Got {
        let want = expected.len();
        let want_replies = count_replies(expected);
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut timed_out = false;
        while self.buf.len() < want
            && !(want_replies > 0 && count_replies(&self.buf) >= want_replies)
            && !self.closed
        {
            let now = Instant::now();
            if now >= deadline {
                timed_out = true;
                break;
            }
            let _ = self.recv(deadline - now);
        }
        if !timed_out && !self.closed {
            if want_closed {
                let until = Instant::now() + CLOSE_WAIT;
                while !self.closed {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    let _ = self.recv(until - now);
                }
            } else {
                let grace = if want == 0 {
                    RAW_NO_REPLY_GRACE
                } else {
                    RAW_GRACE
                };
                let until = Instant::now() + grace;
                while !self.closed {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    if let Recv::Timeout = self.recv(until - now) {
                        break;
                    }
                }
            }
        }
        Got {
            bytes: std::mem::take(&mut self.buf),
            closed: self.closed,
            timed_out,
        }
    }
}

// ---------------------------------------------------------------------------
// Running one file
// ---------------------------------------------------------------------------

/// A case argument that stands for the node's own id (CLUSTER SETSLOT n NODE
/// $MYID and the like): node ids differ between runs.
const MYID: &[u8] = b"$MYID";

/// `args` with every `$MYID` replaced by the server's node id, asked afresh
/// (CLUSTER RESET HARD renews it) on a connection of its own, so the case's
/// connection, perhaps inside MULTI, sees nothing of it.
fn substitute_myid(args: &[Vec<u8>], addr: SocketAddr) -> Result<Vec<Vec<u8>>, String> {
    if !args.iter().any(|a| a == MYID) {
        return Ok(args.to_vec());
    }
    let mut side = Conn::open(addr)?;
    side.send(&encode_command(&[b"CLUSTER".to_vec(), b"MYID".to_vec()]));
    let got = side.read_reply();
    let id = match got.bytes.strip_prefix(b"$40\r\n") {
        Some(rest) if rest.len() == 42 => rest[..40].to_vec(),
        _ => {
            return Err(format!(
                "CLUSTER MYID answered {}",
                show(&got.bytes, got.closed)
            ))
        }
    };
    Ok(args
        .iter()
        .map(|a| if a == MYID { id.clone() } else { a.clone() })
        .collect())
}

/// One of a case's connections (`!conn`).  After a timeout or an unexpected
/// close its stream is out of step: `skipping` counts the entries on it
/// skipped until its next `!reconnect`.
struct Slot {
    conn: Conn,
    skipping: Option<usize>,
}

struct Failure {
    file: String,
    line: usize,
    command: String,
    expected: String,
    got: String,
}

fn show(bytes: &[u8], closed: bool) -> String {
    let mut s = escape(bytes);
    if s.len() > SHOW_MAX {
        let mut cut = SHOW_MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = s.len();
        s.truncate(cut);
        let _ = write!(s, "... ({total} chars)");
    }
    if closed {
        s.push_str(" <closed>");
    }
    if s.is_empty() {
        s.push_str("(nothing)");
    }
    s
}

fn show_expect(e: &Expect) -> String {
    match e {
        Expect::Bytes(b) => show(b, false),
        Expect::Unordered(b) => format!("{} (any order)", show(b, false)),
        Expect::Closed(b) => show(b, true),
        Expect::Ignored(b) => format!("a reply of type {}", show(b, false)),
        Expect::Shape(b) => format!(
            "{} (same shape: stream ids and integers may differ)",
            show(b, false)
        ),
        Expect::Topology(b) => format!(
            "{} (node ids, port, bus port, ping/pong times may differ)",
            show(b, false)
        ),
    }
}

/// Whether `got` is what `expect` asks for; `nodes` are the recorded server's
/// and this server's values for `!topology`.
fn matches(expect: &Expect, got: &Got, nodes: (NodeValues, NodeValues)) -> bool {
    if got.timed_out {
        return false;
    }
    match expect {
        Expect::Bytes(b) => !got.closed && got.bytes == *b,
        Expect::Closed(b) => got.closed && got.bytes == *b,
        Expect::Unordered(b) => !got.closed && same_multiset(b, &got.bytes),
        Expect::Ignored(b) => {
            !got.closed && got.bytes.first() == b.first() && reply_end(&got.bytes, 0).is_ok()
        }
        Expect::Shape(b) => !got.closed && same_shape(b, &got.bytes),
        Expect::Topology(b) => !got.closed && same_topology(b, nodes.0, &got.bytes, nodes.1),
    }
}

fn run_file(name: &str, dir: &Path, addr: SocketAddr, failures: &mut Vec<Failure>) -> usize {
    let fail =
        |failures: &mut Vec<Failure>, line: usize, command: &str, expected: &str, got: &str| {
            failures.push(Failure {
                file: format!("{name}.txt"),
                line,
                command: command.to_string(),
                expected: expected.to_string(),
                got: got.to_string(),
            })
        };
    let case_path = dir.join("cases").join(format!("{name}.txt"));
    let exp_path = dir.join("expected").join(format!("{name}.txt"));
    let case_data = match std::fs::read(&case_path) {
        Ok(d) => d,
        Err(e) => {
            fail(
                failures,
                0,
                "",
                "a readable case file",
                &format!("{}: {e}", case_path.display()),
            );
            return 0;
        }
    };
    let entries = match parse_case_file(name, &case_data) {
        Ok(e) => e,
        Err(e) => {
            fail(failures, 0, "", "a valid case file", &e);
            return 0;
        }
    };
    let (recorded, recorded_port) = match std::fs::read(&exp_path)
        .map_err(|e| format!("{}: {e} (run tests/compat/record.py)", exp_path.display()))
        .and_then(|d| parse_expected_file(name, &d))
    {
        Ok(r) => (r.recorded, r.port),
        Err(e) => {
            fail(failures, 0, "", "a valid expected file", &e);
            return 0;
        }
    };
    // The expected file must be a recording of exactly this case file.
    let stale = recorded.len() != entries.len()
        || entries.iter().zip(&recorded).any(|(e, r)| {
            let needs_reply = matches!(e.kind, Kind::Cmd(_) | Kind::Raw(_) | Kind::Drain);
            e.text != r.text || needs_reply != r.expect.is_some()
        });
    if stale {
        fail(
            failures,
            0,
            "",
            "expected/ in step with cases/",
            "expected file is stale: re-run tests/compat/record.py",
        );
        return 0;
    }

    let mut checked = 0;
    let main = match Conn::open(addr) {
        Ok(c) => c,
        Err(e) => {
            fail(failures, 0, "", "a connection", &e);
            return 0;
        }
    };
    let mut conns: HashMap<Vec<u8>, Slot> = HashMap::new();
    conns.insert(
        MAIN_CONN.to_vec(),
        Slot {
            conn: main,
            skipping: None,
        },
    );
    let mut cur = MAIN_CONN.to_vec();
    let flush = {
        let conn = &mut conns.get_mut(MAIN_CONN).expect("just inserted").conn;
        conn.send(&encode_command(&[b"FLUSHALL".to_vec()]));
        conn.read_reply()
    };
    if flush.timed_out || flush.closed {
        fail(
            failures,
            0,
            "FLUSHALL",
            "a reply",
            &show(&flush.bytes, flush.closed),
        );
        return 0;
    }

    for (entry, rec) in entries.iter().zip(&recorded) {
        let command = String::from_utf8_lossy(&entry.text).into_owned();
        match &entry.kind {
            Kind::Unordered
            | Kind::Ignore
            | Kind::Shape
            | Kind::Topology
            | Kind::Cluster
            | Kind::Debug
            | Kind::Frames => continue,
            Kind::Conn(name) => {
                if !conns.contains_key(name) {
                    match Conn::open(addr) {
                        Ok(conn) => {
                            conns.insert(
                                name.clone(),
                                Slot {
                                    conn,
                                    skipping: None,
                                },
                            );
                        }
                        Err(e) => {
                            fail(failures, entry.lineno, &command, "a connection", &e);
                            return checked;
                        }
                    }
                }
                cur = name.clone();
                continue;
            }
            Kind::Sleep(ms) => {
                if conns[&cur].skipping.is_none() {
                    std::thread::sleep(Duration::from_millis(*ms));
                }
                continue;
            }
            Kind::Reconnect => {
                let slot = conns.get_mut(&cur).expect("the current connection exists");
                if let Some(n) = slot.skipping.take() {
                    if n > 0 {
                        fail(
                            failures,
                            entry.lineno,
                            &command,
                            "(resynchronising)",
                            &format!(
                                "{n} earlier command(s) on connection {} skipped after the \
                                 stream broke",
                                String::from_utf8_lossy(&cur)
                            ),
                        );
                    }
                }
                slot.conn = match Conn::open(addr) {
                    Ok(c) => c,
                    Err(e) => {
                        fail(failures, entry.lineno, &command, "a connection", &e);
                        return checked;
                    }
                };
                continue;
            }
            Kind::Cmd(_) | Kind::Raw(_) | Kind::Drain => {}
        }
        let slot = conns.get_mut(&cur).expect("the current connection exists");
        if let Some(n) = slot.skipping.as_mut() {
            *n += 1;
            continue;
        }
        let conn = &mut slot.conn;
        let expect = rec.expect.as_ref().expect("checked above");
        let (expect_bytes, want_closed) = match expect {
            Expect::Bytes(b)
            | Expect::Unordered(b)
            | Expect::Ignored(b)
            | Expect::Shape(b)
            | Expect::Topology(b) => (b, false),
            Expect::Closed(b) => (b, true),
        };
        let got = match &entry.kind {
            Kind::Raw(bytes) => {
                conn.send(bytes);
                conn.read_raw(expect_bytes, want_closed)
            }
            // Nothing sent: read what the server pushes by itself, steered by
            // what Redis pushed, exactly as after a !raw write.
            Kind::Drain => conn.read_raw(expect_bytes, want_closed),
            Kind::Cmd(args) => {
                let args = match substitute_myid(args, addr) {
                    Ok(a) => a,
                    Err(e) => {
                        fail(
                            failures,
                            entry.lineno,
                            &command,
                            "the node id for $MYID",
                            &e,
                        );
                        continue;
                    }
                };
                conn.send(&encode_command(&args));
                conn.read_frames(entry.frames)
            }
            _ => unreachable!(),
        };
        checked += 1;
        let nodes = (
            NodeValues {
                port: recorded_port.unwrap_or(0),
            },
            NodeValues { port: addr.port() },
        );
        if !matches(expect, &got, nodes) {
            let mut got_text = show(&got.bytes, got.closed);
            if got.timed_out {
                got_text = format!("timeout after {:?}; received {got_text}", READ_TIMEOUT);
            }
            fail(
                failures,
                entry.lineno,
                &command,
                &show_expect(expect),
                &got_text,
            );
            let expected_close = matches!(expect, Expect::Closed(_));
            if got.timed_out || (got.closed && !expected_close) {
                slot.skipping = Some(0);
            }
        }
    }
    let mut names: Vec<&Vec<u8>> = conns.keys().collect();
    names.sort();
    for name in names {
        if let Some(n) = conns[name].skipping.filter(|&n| n > 0) {
            fail(
                failures,
                0,
                "",
                "(end of file)",
                &format!(
                    "{n} command(s) at the end on connection {} skipped after the stream broke",
                    String::from_utf8_lossy(name)
                ),
            );
        }
    }
    checked
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("compat")
}

fn case_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("cases"))
        .expect("tests/compat/cases exists")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "txt").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    names
}

fn loopback_addr(var: &str, s: &str) -> SocketAddr {
    let addr = s
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("{var}={s}: {e}"))
        .next()
        .unwrap_or_else(|| panic!("{var}={s}: no address"));
    assert!(
        addr.ip().is_loopback(),
        "{var} must be a loopback address, got {addr}"
    );
    addr
}

/// The file-level directive a case file starts with (`!cluster`,
/// `!debug`), if any (an unreadable or invalid file has none: `run_file`
/// reports it).
fn file_kind(dir: &Path, name: &str) -> Option<Kind> {
    std::fs::read(dir.join("cases").join(format!("{name}.txt")))
        .ok()
        .and_then(|d| parse_case_file(name, &d).ok())
        .and_then(|e| e.into_iter().next())
        .map(|e| e.kind)
        .filter(|k| matches!(k, Kind::Cluster | Kind::Debug))
}

/// A fresh plain server that allows the protected commands (DEBUG; MODULE
/// LOAD, LOADEX, UNLOAD) from local clients, as record.py starts Redis for
/// a `!debug` case.
fn start_debug_server() -> common::TestServer {
    common::TestServer::start_with(|cfg| {
        for switch in ["enable-debug-command", "enable-module-command"] {
            cfg.redis.insert(switch.into(), "local".into());
        }
    })
}

/// A fresh cairn cluster node of its own topology (no etcd), owning no slot,
/// announcing 127.0.0.1 as record.py makes Redis do.  Its port is at most
/// 55535, as Redis requires of a cluster node (its bus port is port + 10000,
/// which `!topology` relies on): a node the system gave a higher port is
/// stopped and started again.
fn start_cluster_node() -> common::TestServer {
    for _ in 0..50 {
        let node = common::TestServer::start_with(|cfg| {
            cfg.cluster.enabled = true;
            cfg.cluster.etcd_endpoints = vec![];
            cfg.cluster.announce_ip = "127.0.0.1".into();
        });
        if node.port <= 55535 {
            return node;
        }
    }
    panic!("no cluster node got a port <= 55535 in 50 starts");
}

#[test]
fn compat_transcripts() {
    replay_transcripts(Pin::Auto);
}

/// The same transcripts with every read of a snapshot run on a blocking
/// thread, as reads run while they wait for the disk
/// (`shard::disk_reads`): replies, their order and lazy expiry must not
/// change.
#[test]
fn compat_transcripts_with_reads_moved() {
    replay_transcripts(Pin::Moved);
}

/// Replays the case files (those `CAIRN_COMPAT_ONLY` names, or all) on
/// servers started here, or on those the environment names, with reads
/// pinned to `reads` on the servers started here.
fn replay_transcripts(reads: Pin) {
    let pinned = |s: common::TestServer| {
        s.server().disk_reads.pin(reads);
        s
    };
    let dir = compat_dir();
    let mut names = case_names(&dir);
    if let Ok(only) = std::env::var("CAIRN_COMPAT_ONLY") {
        let wanted: Vec<String> = only
            .split(',')
            .map(|s| s.trim().trim_end_matches(".txt").to_string())
            .filter(|s| !s.is_empty())
            .collect();
        for w in &wanted {
            assert!(names.contains(w), "CAIRN_COMPAT_ONLY: no case file {w}.txt");
        }
        names.retain(|n| wanted.contains(n));
    }
    assert!(!names.is_empty(), "no case files in {}", dir.display());

    let plain_addr = std::env::var("CAIRN_COMPAT_ADDR")
        .ok()
        .map(|a| loopback_addr("CAIRN_COMPAT_ADDR", &a));
    let cluster_addr = std::env::var("CAIRN_COMPAT_CLUSTER_ADDR")
        .ok()
        .map(|a| loopback_addr("CAIRN_COMPAT_CLUSTER_ADDR", &a));
    // The plain cases share one server, started on first use and kept alive
    // for the whole run (it stops on drop); each cluster case gets a fresh
    // cluster node, as a recording does.
    let mut plain: Option<common::TestServer> = None;

    let mut failures = Vec::new();
    let mut summary = String::new();
    let (mut total, mut files) = (0, 0);
    for name in &names {
        let before = failures.len();
        let mut node = None;
        let kind = file_kind(&dir, name);
        let addr = if kind == Some(Kind::Cluster) {
            match (cluster_addr, plain_addr) {
                (Some(a), _) => a,
                (None, Some(_)) => {
                    let _ = writeln!(
                        summary,
                        "  {name}: skipped (a cluster case: set CAIRN_COMPAT_CLUSTER_ADDR)"
                    );
                    continue;
                }
                (None, None) => {
                    let n = pinned(start_cluster_node());
                    let a = SocketAddr::from(([127, 0, 0, 1], n.port));
                    node = Some(n);
                    a
                }
            }
        } else if let Some(a) = plain_addr {
            a
        } else if kind == Some(Kind::Debug) {
            let n = pinned(start_debug_server());
            let a = SocketAddr::from(([127, 0, 0, 1], n.port));
            node = Some(n);
            a
        } else {
            let port = plain
                .get_or_insert_with(|| pinned(common::TestServer::start()))
                .port;
            SocketAddr::from(([127, 0, 0, 1], port))
        };
        let checked = run_file(name, &dir, addr, &mut failures);
        drop(node);
        total += checked;
        files += 1;
        let _ = writeln!(
            summary,
            "  {name}: {checked} replies checked against {addr}, {} difference(s)",
            failures.len() - before
        );
    }
    eprintln!("compat: {files} file(s), {total} replies checked\n{summary}");

    if !failures.is_empty() {
        let mut report = format!(
            "{} compatibility difference(s) from Redis 7.0:\n{summary}\n",
            failures.len()
        );
        for f in &failures {
            let _ = writeln!(report, "{}:{}: {}", f.file, f.line, f.command);
            let _ = writeln!(report, "    expected: {}", f.expected);
            let _ = writeln!(report, "    got:      {}", f.got);
        }
        panic!("{report}");
    }
}

// ---------------------------------------------------------------------------
// Self-checks of the harness pieces (no server needed)
// ---------------------------------------------------------------------------

#[test]
fn compat_harness_split_args() {
    let s = |l: &str| split_args(l.as_bytes()).unwrap();
    assert_eq!(
        s("SET a b"),
        vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()]
    );
    assert_eq!(
        s(r#"SET "a b" 'c d'"#)[1..],
        [b"a b".to_vec(), b"c d".to_vec()]
    );
    assert_eq!(s(r#"X "\x00\n\"q\\""#)[1], b"\x00\n\"q\\".to_vec());
    assert_eq!(s(r"X 'it\'s'")[1], b"it's".to_vec());
    assert_eq!(s(r#"X """#)[1], b"".to_vec());
    assert!(split_args(br#"X "a"b"#).is_err());
    assert!(split_args(br#"X "a"#).is_err());
}

#[test]
fn compat_harness_framing() {
    assert_eq!(reply_end(b"+OK\r\n", 0).unwrap(), 5);
    assert_eq!(reply_end(b"$3\r\nbar\r\n+", 0).unwrap(), 9);
    assert!(matches!(reply_end(b"$3\r\nba", 0), Err(Frame::Incomplete)));
    assert_eq!(reply_end(b"*2\r\n$-1\r\n_\r\n", 0).unwrap(), 12);
    assert_eq!(reply_end(b"%1\r\n+a\r\n:1\r\n", 0).unwrap(), 12);
    assert_eq!(reply_end(b"|1\r\n+a\r\n+b\r\n:1\r\n", 0).unwrap(), 16);
    assert!(same_multiset(b"*2\r\n+a\r\n+b\r\n", b"*2\r\n+b\r\n+a\r\n"));
    assert!(!same_multiset(b"*2\r\n+a\r\n+a\r\n", b"*2\r\n+a\r\n+b\r\n"));
    let raw = b"a\\b\r\n\x00\xff\"";
    assert_eq!(unescape(escape(raw).as_bytes()).unwrap(), raw.to_vec());
}

#[test]
fn compat_harness_same_shape() {
    // Stream ids (bulk or simple) match any other stream id of the same type.
    assert!(same_shape(b"$3\r\n1-0\r\n", b"$15\r\n1700000000000-7\r\n"));
    assert!(same_shape(b"+5-5\r\n", b"+123456-0\r\n"));
    // DEBUG OBJECT's address and LRU clock may differ, nothing else.
    let obj = |at: &str, lru: &str, idle: &str, enc: &str| {
        format!("+Value at:0x{at} refcount:1 encoding:{enc} serializedlength:4 lru:{lru} lru_seconds_idle:{idle}\r\n")
    };
    assert!(same_shape(
        obj("7f5edb5aa660", "535043", "0", "embstr").as_bytes(),
        obj("1", "12", "7", "embstr").as_bytes()
    ));
    assert!(!same_shape(
        obj("7f5edb5aa660", "535043", "0", "embstr").as_bytes(),
        obj("7f5edb5aa660", "535043", "0", "raw").as_bytes()
    ));
    assert!(!same_shape(b"+5-5\r\n", b"$3\r\n5-5\r\n"));
    // Integers match any integer; nothing else does.
    assert!(same_shape(b":0\r\n", b":-123\r\n"));
    assert!(!same_shape(b":0\r\n", b"$1\r\n0\r\n"));
    assert!(!same_shape(b":0\r\n", b":x\r\n"));
    // Other strings, errors and nulls are compared byte for byte.
    assert!(same_shape(b"$4\r\nname\r\n", b"$4\r\nname\r\n"));
    assert!(!same_shape(b"$4\r\nname\r\n", b"$4\r\nnamf\r\n"));
    assert!(!same_shape(b"$3\r\n1-0\r\n", b"$3\r\n1-x\r\n"));
    assert!(!same_shape(b"$3\r\n1-0\r\n", b"$2\r\n1-\r\n"));
    assert!(!same_shape(b"$2\r\n-1\r\n", b"$2\r\n-2\r\n"));
    assert!(!same_shape(b"-ERR a\r\n", b"-ERR b\r\n"));
    assert!(!same_shape(b"$-1\r\n", b"*-1\r\n"));
    assert!(same_shape(b"*-1\r\n", b"*-1\r\n"));
    assert!(!same_shape(b"$-1\r\n", b"$0\r\n\r\n"));
    // Aggregates: same type and length, elements compared in order.
    let e = b"*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:5\r\n";
    let g = b"*2\r\n*2\r\n$6\r\n9999-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:77\r\n";
    assert!(same_shape(e, g));
    assert!(!same_shape(e, b"*1\r\n:5\r\n"));
    assert!(!same_shape(b"*2\r\n:1\r\n+a\r\n", b"*2\r\n+a\r\n:1\r\n"));
    assert!(same_shape(
        b"%1\r\n+idle\r\n:10\r\n",
        b"%1\r\n+idle\r\n:3\r\n"
    ));
    assert!(!same_shape(
        b"%1\r\n+idle\r\n:10\r\n",
        b"*2\r\n+idle\r\n:3\r\n"
    ));
    // Exactly one complete reply on each side.
    assert!(!same_shape(b":1\r\n", b":1\r\n:2\r\n"));
    assert!(!same_shape(b"*2\r\n:1\r\n:2\r\n", b"*2\r\n:1\r\n"));
}

#[test]
fn compat_harness_topology() {
    let (r, c) = (NodeValues { port: 40677 }, NodeValues { port: 7000 });
    let id_r = "e094c2fdae755e8ace86ac5f6cb2e67953aa0793";
    let id_c = "0123456789abcdef0123456789abcdef01234567";
    // CLUSTER NODES: id, address, ping/pong times differ; bulk lengths too.
    let nodes = |id: &str, port: u32, times: &str, slots: &str| {
        let text = format!(
            "{id} 127.0.0.1:{port}@{} myself,master - {times} 1 connected {slots}\n",
            port + 10000
        );
        format!("${}\r\n{text}\r\n", text.len()).into_bytes()
    };
    let e = nodes(id_r, 40677, "0 0", "0-16383");
    assert!(same_topology(
        &e,
        r,
        &nodes(id_c, 7000, "0 1700000000000", "0-16383"),
        c
    ));
    assert!(!same_topology(
        &e,
        r,
        &nodes(id_c, 7000, "0 0", "0-16382"),
        c
    ));
    // The epoch and everything else stay exact.
    let other_epoch = nodes(id_c, 7000, "0 0", "0-16383");
    let other_epoch = String::from_utf8(other_epoch)
        .unwrap()
        .replace(" 1 connected", " 2 connected");
    assert!(!same_topology(&e, r, other_epoch.as_bytes(), c));
    // A migrating slot names an id inside brackets.
    let m = |id: &str| format!("+[5->-{id}]\r\n").into_bytes();
    assert!(same_topology(&m(id_r), r, &m(id_c), c));
    // CLUSTER SLOTS: the port integer; slot integers stay exact.
    let slots = |id: &str, port: u16, end: u16| {
        format!(
            "*1\r\n*3\r\n:0\r\n:{end}\r\n*4\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{id}\r\n*0\r\n"
        )
        .into_bytes()
    };
    assert!(same_topology(
        &slots(id_r, 40677, 16383),
        r,
        &slots(id_c, 7000, 16383),
        c
    ));
    assert!(!same_topology(
        &slots(id_r, 40677, 16383),
        r,
        &slots(id_c, 7000, 16382),
        c
    ));
    assert!(!same_topology(
        &slots(id_r, 40677, 16383),
        r,
        &slots(id_c, 7001, 16383),
        c
    ));
    // RESP3 verbatim strings and maps.
    let v = |id: &str| format!("=44\r\ntxt:{id}\r\n").into_bytes();
    assert!(same_topology(&v(id_r), r, &v(id_c), c));
    // Not an id: 39 or 41 hex digits, upper case.
    assert!(!same_topology(
        b"+0123456789abcdef0123456789abcdef0123456\r\n",
        r,
        b"+0123456789abcdef0123456789abcdef0123457\r\n",
        c
    ));
    assert!(!same_topology(
        format!("+{}\r\n", id_r.to_uppercase()).as_bytes(),
        r,
        format!("+{}\r\n", id_c.to_uppercase()).as_bytes(),
        c
    ));
    // Exactly one complete reply on each side.
    assert!(!same_topology(b":1\r\n", r, b":1\r\n:1\r\n", c));
}

#[test]
fn compat_harness_cluster_directive() {
    let e = parse_case_file("t", b"!cluster\n# c\n!topology\nCLUSTER NODES\n").unwrap();
    assert_eq!(e[0].kind, Kind::Cluster);
    assert!(e[2].topology);
    assert!(parse_case_file("t", b"PING\n!cluster\n").is_err());
    assert!(parse_case_file("t", b"!topology\n").is_err());
    assert!(parse_case_file("t", b"!topology\n!shape\nPING\n").is_err());
    let x = parse_expected_file(
        "t",
        b"# recorded on port: 123\n> !topology\n> PING\n<topology +PONG\\r\\n\n",
    )
    .unwrap();
    assert_eq!(x.port, Some(123));
    assert!(parse_expected_file("t", b"> PING\n<topology +PONG\\r\\n\n").is_err());
}

#[test]
fn compat_harness_conn_drain_frames_directives() {
    let e = parse_case_file(
        "t",
        b"!conn sub\nSUBSCRIBE a\n!drain\n!frames 3\nSUBSCRIBE a b c\n!conn main\n!reconnect\nPING\n",
    )
    .unwrap();
    assert_eq!(e[0].kind, Kind::Conn(b"sub".to_vec()));
    assert_eq!(e[1].frames, 1);
    assert_eq!(e[2].kind, Kind::Drain);
    assert_eq!(e[3].kind, Kind::Frames);
    assert_eq!(e[4].frames, 3);
    assert_eq!(e[5].kind, Kind::Conn(MAIN_CONN.to_vec()));
    assert_eq!(e[7].frames, 1);
    for bad in [
        &b"!frames 0\nPING\n"[..],
        b"!frames x\nPING\n",
        b"!frames\nPING\n",
        b"!frames 2\n",
        b"!frames 2\n!unordered\nPING\n",
        b"!unordered\n!frames 2\nPING\n",
        b"!frames 2\n!drain\n",
        b"!frames 2\n!conn x\nPING\n",
        b"!ignore\n!conn x\nPING\n",
        b"!conn\n",
        b"!conn a b\n",
        b"!conn a.b\n",
        b"!drain x\n",
    ] {
        assert!(
            parse_case_file("t", bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A drain that got nothing is a bare `<`; a drain needs a reply line.
    let x = parse_expected_file(
        "t",
        b"> !drain\n<\n> !conn b\n> !drain\n< >1\\r\\n:1\\r\\n\n",
    )
    .unwrap();
    assert_eq!(x.recorded[0].expect, Some(Expect::Bytes(vec![])));
    assert_eq!(x.recorded[1].expect, None);
    assert_eq!(
        x.recorded[2].expect,
        Some(Expect::Bytes(b">1\r\n:1\r\n".to_vec()))
    );
}

#[test]
fn compat_harness_push_framing() {
    // RESP2 pub/sub frames are arrays, RESP3 ones pushes; each is one frame.
    let msg = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$0\r\n\r\n";
    assert_eq!(reply_end(msg, 0).unwrap(), msg.len());
    assert!(matches!(
        reply_end(&msg[..msg.len() - 1], 0),
        Err(Frame::Incomplete)
    ));
    let pmsg = b">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$1\r\nx\r\n";
    assert_eq!(reply_end(pmsg, 0).unwrap(), pmsg.len());
    // SUBSCRIBE a b c: three confirmations back to back.
    let subs = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                 *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
                 *3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:3\r\n";
    assert_eq!(count_replies(subs), 3);
    // A push then the command's own reply (PUBLISH to oneself in RESP3).
    let mut both = msg.to_vec();
    both.extend_from_slice(b":1\r\n");
    assert_eq!(count_replies(&both), 2);
    assert_eq!(reply_end(&both, 0).unwrap(), msg.len());
    // Null array in a push position and a nested push.
    assert_eq!(reply_end(b">2\r\n*-1\r\n>0\r\n", 0).unwrap(), 13);
}

/// A loopback server that accepts one connection and writes each chunk after
/// its delay (ms), then keeps the connection open for `hold` ms.
fn scripted_server(chunks: Vec<(u64, Vec<u8>)>, hold: u64) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        for (delay, bytes) in chunks {
            std::thread::sleep(Duration::from_millis(delay));
            s.write_all(&bytes).unwrap();
        }
        std::thread::sleep(Duration::from_millis(hold));
    });
    addr
}

#[test]
fn compat_harness_drain_and_frames_reads() {
    let a = b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\n1\r\n".to_vec();
    let b = b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$1\r\n2\r\n".to_vec();
    let mut ab = a.clone();
    ab.extend_from_slice(&b);

    // !drain waits (past a gap, across a split frame) for as many frames as
    // Redis sent.
    let split = b.len() / 2;
    let addr = scripted_server(
        vec![
            (0, a.clone()),
            (150, b[..split].to_vec()),
            (50, b[split..].to_vec()),
        ],
        500,
    );
    let mut c = Conn::open(addr).unwrap();
    let got = c.read_raw(&ab, false);
    assert!(!got.timed_out && !got.closed);
    assert_eq!(got.bytes, ab);

    // An extra frame inside the watch window is caught.
    let addr = scripted_server(vec![(0, a.clone()), (30, b.clone())], 500);
    let mut c = Conn::open(addr).unwrap();
    let got = c.read_raw(&a, false);
    assert_eq!(got.bytes, ab);

    // Nothing expected: anything within the longer watch is caught, and
    // silence gives nothing.
    let addr = scripted_server(vec![(150, a.clone())], 500);
    let mut c = Conn::open(addr).unwrap();
    assert_eq!(c.read_raw(b"", false).bytes, a);
    let addr = scripted_server(vec![], 500);
    let mut c = Conn::open(addr).unwrap();
    assert!(c.read_raw(b"", false).bytes.is_empty());

    // !frames 2 reads exactly two frames and leaves the third.
    let addr = scripted_server(
        vec![
            (0, a.clone()),
            (50, b[..5].to_vec()),
            (50, b[5..].to_vec()),
            (0, b":7\r\n".to_vec()),
        ],
        500,
    );
    let mut c = Conn::open(addr).unwrap();
    let got = c.read_frames(2);
    assert_eq!(got.bytes, ab);
    assert_eq!(c.read_frames(1).bytes, b":7\r\n");

    // A close part-way through !frames stops the read.
    let addr = scripted_server(vec![(0, a.clone())], 0);
    let mut c = Conn::open(addr).unwrap();
    let got = c.read_frames(3);
    assert!(got.closed && !got.timed_out);
    assert_eq!(got.bytes, a);
}
