//! The byte form of [`RowOp`]s, shared by the shard logs (`wal`) and the
//! coordination log (`shard::intent`): every record either of them writes
//! is a list of logical row changes in this encoding.

use super::tables::{RowOp, Table};

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// Appends `ops` to `out`: a u32 count, then each op as a kind byte, its
/// table's code and its length-prefixed keys and value.
pub fn encode(ops: &[RowOp], out: &mut Vec<u8>) {
    out.extend_from_slice(&(ops.len() as u32).to_be_bytes());
    for op in ops {
        match op {
            RowOp::Put(t, k, v) => {
                out.extend_from_slice(&[0, *t as u8]);
                put_bytes(out, k);
                put_bytes(out, v);
            }
            RowOp::Del(t, k) => {
                out.extend_from_slice(&[1, *t as u8]);
                put_bytes(out, k);
            }
            RowOp::Clear(t) => out.extend_from_slice(&[2, *t as u8]),
            RowOp::DelRange(t, start, end) => {
                out.extend_from_slice(&[3, *t as u8]);
                put_bytes(out, start);
                match end {
                    Some(e) => {
                        out.push(1);
                        put_bytes(out, e);
                    }
                    None => out.push(0),
                }
            }
        }
    }
}

/// A cursor over an encoded record; every read is bounds-checked, so bytes
/// whose checksum matched but whose layout is wrong decode to `None`.
pub struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    /// A byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        self.take(n).map(<[u8]>::to_vec)
    }

    fn table(&mut self) -> Option<Table> {
        Table::from_code(self.u8()?)
    }

    /// A list of ops as [`encode`] wrote it.
    pub fn ops(&mut self) -> Option<Vec<RowOp>> {
        let count = self.u32()?;
        let mut ops = Vec::new();
        for _ in 0..count {
            let op = match self.u8()? {
                0 => RowOp::Put(self.table()?, self.bytes()?, self.bytes()?),
                1 => RowOp::Del(self.table()?, self.bytes()?),
                2 => RowOp::Clear(self.table()?),
                3 => {
                    let t = self.table()?;
                    let start = self.bytes()?;
                    let end = match self.u8()? {
                        0 => None,
                        _ => Some(self.bytes()?),
                    };
                    RowOp::DelRange(t, start, end)
                }
                _ => return None,
            };
            ops.push(op);
        }
        Some(ops)
    }
}
