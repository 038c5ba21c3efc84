//! Argument access with Redis's error texts, so each command states what it
//! expects and the wording of a bad-argument reply lives in one place.

use bytes::Bytes;

use crate::protocol::Reply;
use crate::util::num;

/// Redis's reply for a non-integer or out-of-range integer argument.
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Redis's reply for a non-float argument.
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
/// Redis's generic syntax error.
pub const SYNTAX: &str = "ERR syntax error";
/// Operation against a key of another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// An error reply from a static text (which includes its code).
pub fn error(text: &str) -> Reply {
    Reply::Error(text.to_string())
}

/// Parses an integer argument.
pub fn int(arg: &[u8]) -> Result<i64, Reply> {
    num::parse_i64(arg).ok_or_else(|| error(NOT_INTEGER))
}

/// Parses a float argument.
pub fn float(arg: &[u8]) -> Result<f64, Reply> {
    num::parse_f64(arg).ok_or_else(|| error(NOT_FLOAT))
}

/// Case-insensitive comparison of an argument with an ASCII keyword.
pub fn is(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// The arguments of one command, argv[0] being its name.
#[derive(Debug, Clone)]
pub struct Args {
    argv: Vec<Bytes>,
    /// The request frame the arguments are slices of, when they came off
    /// a connection as one (see [`Args::frame`]).
    frame: Option<Bytes>,
}

impl Args {
    /// Wraps an argument vector (non-empty).
    pub fn new(argv: Vec<Bytes>) -> Args {
        Args { argv, frame: None }
    }

    /// Arguments a client sent, cut from the request `frame`
    /// (`protocol::request::split_frame` cuts them again).
    pub fn framed(argv: Vec<Bytes>, frame: Option<Bytes>) -> Args {
        Args { argv, frame }
    }

    /// The whole request the arguments were cut from, if they came as
    /// one: keeping it is one reference count, not one per argument.
    pub fn frame(&self) -> Option<&Bytes> {
        self.frame.as_ref()
    }

    /// Number of arguments including the name.
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// True for an empty request (never dispatched).
    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    /// Argument `i` (0 = the command name).
    pub fn get(&self, i: usize) -> &Bytes {
        &self.argv[i]
    }

    /// Moves argument `i` out, leaving an empty one. A command that keeps
    /// an argument (a key, a value) for its write takes it rather than
    /// cloning it: each clone and drop of a slice of the read buffer is an
    /// atomic operation on a count the whole buffer shares.
    pub fn take(&mut self, i: usize) -> Bytes {
        std::mem::take(&mut self.argv[i])
    }

    /// Moves the arguments from `i` on out (see [`Args::take`]), leaving
    /// the first `i`.
    pub fn split_off(&mut self, i: usize) -> Vec<Bytes> {
        self.argv.split_off(i.min(self.argv.len()))
    }

    /// Arguments from `i` on.
    pub fn from(&self, i: usize) -> &[Bytes] {
        &self.argv[i.min(self.argv.len())..]
    }

    /// All arguments.
    pub fn all(&self) -> &[Bytes] {
        &self.argv
    }

    /// Consumes into the argument vector.
    pub fn into_vec(self) -> Vec<Bytes> {
        self.argv
    }

    /// Integer argument `i`.
    pub fn int(&self, i: usize) -> Result<i64, Reply> {
        int(&self.argv[i])
    }

    /// The command name, lowercased (for error texts).
    pub fn name_lower(&self) -> String {
        String::from_utf8_lossy(&self.argv[0]).to_lowercase()
    }
}
