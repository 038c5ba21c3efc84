//! A minimal etcd v3 client. The cluster topology is one JSON document under
//! one etcd key: nodes read it with [`Etcd::get`], change it with a
//! compare-and-swap on its mod_revision ([`Etcd::put_if`]) and follow it with
//! [`Etcd::watch`].
//!
//! It speaks etcd's gRPC-gateway JSON API (etcd 3.4+) over a small hand-written
//! HTTP/1.1 client rather than gRPC: the gRPC client crates run `protoc` at
//! build time, and cairn must build on a fresh machine. In that API keys and
//! values are base64, int64 fields are JSON strings, fields holding their zero
//! value are left out, and a watch is one long chunked response carrying
//! `{"result": ...}` objects one after another.
//!
//! Every get/put opens its own connection (`Connection: close`), so a
//! restarted or replaced etcd member needs nothing from the caller but a retry.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// Bounds on what a peer may make us buffer: a topology document is
/// kilobytes, so anything near these is a confused peer, not etcd.
const MAX_HEAD: u64 = 64 << 10;
const MAX_BODY: usize = 64 << 20;

/// A client for one etcd cluster. Clones share the endpoint list.
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoints: Arc<[String]>,
    timeout: Duration,
}

/// A value and the store revision that last modified it.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    /// The stored bytes.
    pub value: Vec<u8>,
    /// The revision of the put that wrote them.
    pub mod_revision: i64,
}

/// One change to a watched key.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// The key was written.
    Put(Versioned),
    /// The key was deleted at this revision.
    Delete {
        /// The revision of the delete.
        revision: i64,
    },
}

/// Why a request failed. Either way the caller may retry; `Unavailable` is
/// the expected one (no endpoint answered in time, or a stream broke).
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint answered, in time or at all, or a connection broke.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// An endpoint answered something this client cannot use.
    #[error("etcd protocol error: {0}")]
    Protocol(String),
}

use EtcdError::{Protocol, Unavailable};

impl Etcd {
    /// A client for `endpoints` ("host:port"); each request tries them in
    /// order until one answers, and every request (a watch only until it is
    /// established) is bounded by `timeout` in all.
    pub fn new(endpoints: Vec<String>, timeout: Duration) -> Etcd {
        Etcd {
            endpoints: endpoints.into(),
            timeout,
        }
    }

    /// The key's value and mod_revision (None if absent), plus the store's
    /// current revision.
    pub async fn get(&self, key: &[u8]) -> Result<(Option<Versioned>, i64), EtcdError> {
        let reply = self
            .call("/v3/kv/range", json!({ "key": encode(key) }))
            .await?;
        let kv = reply
            .get("kvs")
            .and_then(Value::as_array)
            .and_then(|kvs| kvs.first());
        Ok((kv.map(versioned).transpose()?, header_revision(&reply)?))
    }

    /// Writes `value` only if the key's mod_revision is `expected` (0: the key
    /// must not exist), in one txn. Ok(Some(new revision)) when written,
    /// Ok(None) when the compare failed. Should an endpoint take the write and
    /// then drop the connection, the retry on the next endpoint sees the
    /// compare fail: on None the caller re-reads anyway and finds its value.
    pub async fn put_if(
        &self,
        key: &[u8],
        value: &[u8],
        expected: i64,
    ) -> Result<Option<i64>, EtcdError> {
        let key = encode(key);
        let txn = json!({
            "compare": [{ "key": key, "target": "MOD", "result": "EQUAL",
                          "mod_revision": expected.to_string() }],
            "success": [{ "request_put": { "key": key, "value": encode(value) } }],
        });
        let reply = self.call("/v3/kv/txn", txn).await?;
        match reply.get("succeeded") {
            Some(Value::Bool(true)) => Ok(Some(header_revision(&reply)?)),
            _ => Ok(None),
        }
    }

    /// Deletes a key (tests and cleanup); deleting an absent key is fine.
    pub async fn delete(&self, key: &[u8]) -> Result<(), EtcdError> {
        self.call("/v3/kv/deleterange", json!({ "key": encode(key) }))
            .await
            .map(drop)
    }

    /// Watches one key from `start_revision` (inclusive; 0: from now). Returns
    /// once etcd has confirmed the watch, so no later change is missed; that
    /// much is bounded by the timeout, the stream itself is not.
    pub async fn watch(&self, key: &[u8], start_revision: i64) -> Result<Watch, EtcdError> {
        let mut create = json!({ "key": encode(key) });
        if start_revision > 0 {
            create["start_revision"] = json!(start_revision.to_string());
        }
        let body = json!({ "create_request": create }).to_string();
        let body = &body;
        self.each_endpoint(|endpoint| async move {
            let response = Response::post(endpoint, "/v3/watch", body).await?;
            if response.status != 200 {
                return Err(response.error().await);
            }
            let mut watch = Watch {
                response,
                unparsed: Vec::new(),
                pending: VecDeque::new(),
            };
            while !watch.absorb_message().await? {}
            Ok(watch)
        })
        .await
    }

    /// One unary gateway call: POST `body` to `path`, the reply's JSON.
    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let body = body.to_string();
        let body = &body;
        self.each_endpoint(|endpoint| async move {
            let response = Response::post(endpoint, path, body).await?;
            if response.status != 200 {
                return Err(response.error().await);
            }
            parse(&response.into_body().await?)
        })
        .await
    }

    /// Runs `attempt` on each endpoint in order until one succeeds or fails
    /// with something other than `Unavailable`, all within the timeout. Each
    /// attempt may use its share of the time left (the last one all of it),
    /// so a hung first endpoint still leaves time for the others.
    async fn each_endpoint<'a, T, F, Fut>(&'a self, mut attempt: F) -> Result<T, EtcdError>
    where
        F: FnMut(&'a str) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut failures = Vec::new();
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            let left = (self.endpoints.len() - i) as u32;
            let share = deadline.saturating_duration_since(Instant::now()) / left;
            match timeout(share, attempt(endpoint)).await {
                Ok(Err(Unavailable(why))) => failures.push(format!("{endpoint}: {why}")),
                Ok(done) => return done,
                Err(_) => failures.push(format!("{endpoint}: no answer within {share:?}")),
            }
        }
        if failures.is_empty() {
            failures.push("no endpoints configured".into());
        }
        Err(Unavailable(failures.join("; ")))
    }
}

/// An open watch on one key. Dropping it closes the stream, which cancels the
/// watch in etcd.
#[derive(Debug)]
pub struct Watch {
    response: Response,
    /// Stream bytes received but not yet parsed (a message may span chunks).
    unparsed: Vec<u8>,
    /// Events received but not yet returned (one message may carry several).
    pending: VecDeque<WatchEvent>,
}

impl Watch {
    /// The next change, in revision order. Err when the stream broke or etcd
    /// cancelled the watch (e.g. its start revision was compacted): the
    /// caller re-gets the key and watches again from the revision after.
    /// Created and progress messages are consumed here.
    pub async fn next(&mut self) -> Result<WatchEvent, EtcdError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            self.absorb_message().await?;
        }
    }

    /// Reads one message and queues its events; true if it was the
    /// confirmation that the watch was created.
    async fn absorb_message(&mut self) -> Result<bool, EtcdError> {
        let message = self.read_message().await?;
        if let Some(error) = message.get("error") {
            return Err(Unavailable(format!("watch stream failed: {error}")));
        }
        let result = message
            .get("result")
            .ok_or_else(|| Protocol(format!("watch message without a result: {message}")))?;
        if result.get("canceled") == Some(&Value::Bool(true)) {
            let compacted = int(result.get("compact_revision"))?;
            let reason = result.get("cancel_reason").and_then(Value::as_str);
            return Err(Protocol(format!(
                "watch canceled (compact revision {compacted}, reason {reason:?})"
            )));
        }
        let events = result.get("events").and_then(Value::as_array);
        for event in events.into_iter().flatten() {
            let kv = event
                .get("kv")
                .ok_or_else(|| Protocol(format!("watch event without a kv: {event}")))?;
            self.pending
                .push_back(match event.get("type").and_then(Value::as_str) {
                    Some("DELETE") => WatchEvent::Delete {
                        revision: int(kv.get("mod_revision"))?,
                    },
                    // PUT is the zero value, so the gateway leaves the type out.
                    _ => WatchEvent::Put(versioned(kv)?),
                });
        }
        Ok(result.get("created") == Some(&Value::Bool(true)))
    }

    /// The next whole JSON object of the stream, however the chunks split it.
    async fn read_message(&mut self) -> Result<Value, EtcdError> {
        loop {
            let mut stream = serde_json::Deserializer::from_slice(&self.unparsed).into_iter();
            match stream.next() {
                Some(Ok(message)) => {
                    let used = stream.byte_offset();
                    self.unparsed.drain(..used);
                    return Ok(message);
                }
                Some(Err(e)) if !e.is_eof() => {
                    return Err(Protocol(format!("bad watch message: {e}")))
                }
                Some(Err(_)) => {}             // incomplete: read on
                None => self.unparsed.clear(), // only whitespace so far
            }
            match self.response.read_chunk().await? {
                Some(chunk) if self.unparsed.len() + chunk.len() <= MAX_BODY => {
                    self.unparsed.extend_from_slice(&chunk)
                }
                Some(_) => return Err(Protocol("watch message too large".into())),
                None => return Err(Unavailable("watch stream ended".into())),
            }
        }
    }
}

/// An HTTP/1.1 response whose head has been read; the body is read on demand.
#[derive(Debug)]
struct Response {
    status: u16,
    reader: BufReader<TcpStream>,
    framing: Framing,
}

/// How the rest of the body is delimited.
#[derive(Debug)]
enum Framing {
    /// This many bytes remain.
    Length(usize),
    /// Chunked transfer coding; `Done` after the last chunk.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
    /// Nothing more to read.
    Done,
}

impl Response {
    /// Connects to `endpoint`, POSTs the JSON `body` to `path` and reads the
    /// response head.
    async fn post(endpoint: &str, path: &str, body: &str) -> Result<Response, EtcdError> {
        let stream = TcpStream::connect(endpoint)
            .await
            .map_err(|e| Unavailable(format!("connect: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut reader = BufReader::new(stream);
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .map_err(broken)?;

        let status_line = read_line(&mut reader).await?;
        let status = status_line
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| Protocol(format!("bad status line {status_line:?}")))?;
        let mut framing = Framing::UntilClose;
        loop {
            let line = read_line(&mut reader).await?;
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(Protocol(format!("bad header {line:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
                framing = Framing::Chunked;
            } else if name.eq_ignore_ascii_case("content-length")
                && !matches!(framing, Framing::Chunked)
            {
                let length = value.parse().ok().filter(|&n| n <= MAX_BODY);
                framing = Framing::Length(
                    length.ok_or_else(|| Protocol(format!("bad content-length {value:?}")))?,
                );
            }
        }
        Ok(Response {
            status,
            reader,
            framing,
        })
    }

    /// The next piece of the body, None at its end.
    async fn read_chunk(&mut self) -> Result<Option<Vec<u8>>, EtcdError> {
        let size = match self.framing {
            Framing::Done | Framing::Length(0) => return Ok(None),
            Framing::Length(n) => {
                self.framing = Framing::Done;
                n
            }
            Framing::Chunked => {
                let line = read_line(&mut self.reader).await?;
                let hex = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(hex, 16)
                    .ok()
                    .filter(|&n| n <= MAX_BODY)
                    .ok_or_else(|| Protocol(format!("bad chunk size {line:?}")))?;
                if size == 0 {
                    // The last chunk: skip any trailers up to the blank line.
                    while !read_line(&mut self.reader).await?.is_empty() {}
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                size
            }
            Framing::UntilClose => {
                let mut buf = vec![0; 16 << 10];
                let n = self.reader.read(&mut buf).await.map_err(broken)?;
                buf.truncate(n);
                return Ok((n > 0).then_some(buf));
            }
        };
        let mut chunk = vec![0; size];
        self.reader.read_exact(&mut chunk).await.map_err(broken)?;
        if matches!(self.framing, Framing::Chunked)
            && !read_line(&mut self.reader).await?.is_empty()
        {
            return Err(Protocol("chunk not followed by CRLF".into()));
        }
        Ok(Some(chunk))
    }

    /// The whole body.
    async fn into_body(mut self) -> Result<Vec<u8>, EtcdError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.read_chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(Protocol("response too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The error a non-200 response stands for. gRPC's Unavailable (14) and
    /// DeadlineExceeded (4), e.g. a member without a leader, are worth trying
    /// the next endpoint for; anything else is this client's mistake.
    async fn error(self) -> EtcdError {
        let status = self.status;
        let body = match self.into_body().await {
            Ok(body) => body,
            Err(e) => return e,
        };
        let reply: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let code = reply.get("code").and_then(Value::as_i64);
        let message = reply.get("message").and_then(Value::as_str).map_or_else(
            || String::from_utf8_lossy(&body).into_owned(),
            str::to_owned,
        );
        let why = format!("HTTP {status}: {message}");
        if matches!(code, Some(4 | 14)) || (code.is_none() && status >= 500) {
            Unavailable(why)
        } else {
            Protocol(why)
        }
    }
}

/// One CRLF-terminated line without its terminator.
async fn read_line(reader: &mut BufReader<TcpStream>) -> Result<String, EtcdError> {
    let mut line = Vec::new();
    let mut limited = (&mut *reader).take(MAX_HEAD);
    limited.read_until(b'\n', &mut line).await.map_err(broken)?;
    if line.pop() != Some(b'\n') {
        return Err(Unavailable("connection closed mid-response".into()));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| Protocol("non-UTF-8 line in HTTP framing".into()))
}

/// A broken connection: another endpoint or a retry may do better.
fn broken(e: std::io::Error) -> EtcdError {
    Unavailable(e.to_string())
}

fn parse(body: &[u8]) -> Result<Value, EtcdError> {
    serde_json::from_slice(body).map_err(|e| Protocol(format!("bad JSON reply: {e}")))
}

/// The store revision in a reply's header.
fn header_revision(reply: &Value) -> Result<i64, EtcdError> {
    int(reply.get("header").and_then(|h| h.get("revision")))
}

/// A gateway key-value object as a [`Versioned`]; an empty value is left out
/// of the JSON.
fn versioned(kv: &Value) -> Result<Versioned, EtcdError> {
    let value = match kv.get("value") {
        None => Vec::new(),
        Some(Value::String(text)) => {
            decode(text).ok_or_else(|| Protocol(format!("bad base64 value {text:?}")))?
        }
        Some(other) => return Err(Protocol(format!("bad value {other}"))),
    };
    Ok(Versioned {
        value,
        mod_revision: int(kv.get("mod_revision"))?,
    })
}

/// An int64 field: a JSON string in the gateway's encoding, absent when 0.
fn int(field: Option<&Value>) -> Result<i64, EtcdError> {
    match field {
        None | Some(Value::Null) => Some(0),
        Some(Value::String(text)) => text.parse().ok(),
        Some(Value::Number(n)) => n.as_i64(),
        Some(_) => None,
    }
    .ok_or_else(|| Protocol(format!("bad integer field {field:?}")))
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as the gateway encodes bytes fields.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let bits = (group.iter())
            .enumerate()
            .fold(0u32, |bits, (i, &b)| bits | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            let sextet = (bits >> (18 - 6 * i)) as usize & 63;
            out.push(if i <= group.len() {
                BASE64[sextet] as char
            } else {
                '='
            });
        }
    }
    out
}

/// The inverse of [`encode`]; None on a character outside the alphabet.
fn decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut held) = (0u32, 0);
    for c in text.trim_end_matches('=').bytes() {
        bits = (bits << 6 | BASE64.iter().position(|&a| a == c)? as u32) & 0xFFFF;
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        let cases: [(&[u8], &str); 6] = [
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (&[0xff, 0xfe, 0x00, 0x3e, 0x3f], "//4APj8="),
        ];
        for (raw, text) in cases {
            assert_eq!(encode(raw), text);
            assert_eq!(decode(text).as_deref(), Some(raw));
        }
        assert_eq!(decode("Zm9v!"), None);
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)), Some(all));
    }

    /// The server spawns these on tokio's multi-threaded runtime.
    #[test]
    fn client_and_futures_are_send() {
        fn send<T: Send + Sync>(_: &T) {}
        fn send_future<T: Send>(_: T) {}
        let etcd = Etcd::new(vec![], Duration::from_secs(1));
        send(&etcd);
        send_future(etcd.get(b"k"));
        send_future(etcd.put_if(b"k", b"v", 0));
        send_future(etcd.delete(b"k"));
        send_future(etcd.watch(b"k", 0));
        send_future(async move { etcd.watch(b"k", 0).await?.next().await });
    }

    #[test]
    fn int64_fields_are_strings_or_absent() {
        assert_eq!(int(None).unwrap(), 0);
        assert_eq!(int(Some(&json!("42"))).unwrap(), 42);
        assert_eq!(int(Some(&json!(7))).unwrap(), 7);
        assert!(int(Some(&json!("x"))).is_err());
    }
}
