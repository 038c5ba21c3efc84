//! The wire: RESP2/RESP3 request decoding (multibulk via redis-protocol, plus
//! inline commands) and reply encoding. Knows nothing about commands.

pub mod reply;
pub mod request;

pub use reply::Reply;
pub use request::{encode_command, ProtocolError, RequestParser};
