//! The coordination log: what makes a multi-shard commit all-or-nothing
//! across a crash.
//!
//! Each shard file commits on its own, so a crash between two
//! participants' commits would leave half of an MSET or an EXEC on disk.
//! Before any participant commits, the coordinator's round appends one
//! record to `<dir>/coord.log` holding every participant's changes (the
//! [`RowOp`]s its transaction captured) under a round id, `txid`; each
//! participant's transaction also writes `coord_txid = txid` and the
//! participants (`coord_with`) to its `sys` table, so its shard log's
//! record shows it is a part of the round. Opening the shards reads every
//! shard log and this log before replaying anything, and plans
//! ([`plan_recovery`]): a round a shard lost is redone there from its
//! record, a shard that has it is left alone, and a round that cannot be
//! redone where it was lost (its record lost too, after a power loss) is
//! dropped where it survived, with what followed it there.
//!
//! Redo is only right on a shard whose state is exactly what the round
//! started from, and a round can only be dropped from a shard while it is
//! still in the shard's log, not in its tables. Two rules make it so:
//! * before a shard's finished log generation is fsynced (after which the
//!   background writer may put it into the tables), every other shard's
//!   log is made durable (`set::rotation_hooks`): every round the
//!   generation holds began on each other participant from a state that
//!   is now durable, so the round can be redone there whatever a crash
//!   cuts. (A shard's own log ends where its part would begin when the
//!   part is lost, since nothing commits on a shard a round holds.) The
//!   shard need not sync when a round locks it;
//! * the log is made durable before any shard makes a round durable: under
//!   `always` every record is fsynced before the participants commit (they
//!   then commit without an fsync of their own: the record is the
//!   durability), and under `everysec` a shard's periodic sync fsyncs the
//!   log first, as does a shard whose log moves to its next generation
//!   (which fsyncs the finished one: `Store::before_rotate`).
//!
//! Records are dropped (the file is cut back to nothing) once every shard
//! has durably committed every round it took part in.
//!
//! A round of pipelines' independent writes (each a command on one
//! shard, spread over several: `coordinator::spread`) run where it was
//! gathered under `everysec` or `no` writes no record
//! (`CommitRound::record`): nothing ties its parts together across a
//! crash, any more than writes sent one at a time, so each part is an
//! ordinary commit of its shard.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::rowops::{self, Cursor};
use crate::storage::RowOp;

/// First bytes of every record.
const MAGIC: u32 = 0x636f_6f73;
/// First bytes of a record of an older build, whose parts do not say
/// where their shard's log stood (see [`Record::starts`]).
const MAGIC_V1: u32 = 0x636f_6f72;
/// A part's start when it is not known (see [`Record::starts`]).
const UNKNOWN: u64 = u64::MAX;
/// Record header: magic u32, txid u64, body length u32, body CRC-32 u32.
const HEADER: usize = 4 + 8 + 4 + 4;
/// Past this size the log is cut back as soon as every shard is durable.
const CAP: u64 = 16 << 20;

/// One round's changes: (shard, its changes in order).
pub type Parts = Vec<(usize, Vec<RowOp>)>;

/// One participant's share of a record, encoded by [`encode_part`]: each
/// participant encodes its own on its own thread, and the one that appends
/// the record only puts the shares together.
pub type EncodedPart = (usize, Vec<u8>);

/// Encodes a participant's changes as its share of a round's record;
/// `start` is the sequence number of its shard's last commit before the
/// round (`Store::last_seq`), where the round begins on that shard.
pub fn encode_part(shard: usize, start: u64, ops: &[RowOp]) -> EncodedPart {
    let mut out = (shard as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&start.to_be_bytes());
    rowops::encode(ops, &mut out);
    (shard, out)
}

/// A record read back: a round and its changes.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    /// The round id.
    pub txid: u64,
    /// Each participant's changes.
    pub parts: Parts,
    /// For each part, the sequence number of its shard's last commit
    /// before the round, if the record says (a record of an older build
    /// does not): recovery redoes the round on a shard only from there.
    pub starts: Vec<Option<u64>>,
}

/// The coordination log of one data directory.
#[derive(Debug)]
pub struct IntentLog {
    path: PathBuf,
    file: parking_lot::Mutex<LogFile>,
    next_txid: AtomicU64,
    /// Per shard: the last round it took part in...
    joined: Vec<AtomicU64>,
    /// ... and the last round it made durable.
    durable: Vec<AtomicU64>,
}

#[derive(Debug)]
struct LogFile {
    file: File,
    len: u64,
    /// Appended since the last fsync.
    dirty: bool,
}

impl IntentLog {
    /// Opens (creating) `<dir>/coord.log` for `shards` shards and returns
    /// the whole records it holds, oldest first. `last_txid` is the highest
    /// round id any shard has committed.
    pub fn open(dir: &Path, shards: usize, last_txid: u64) -> io::Result<(IntentLog, Vec<Record>)> {
        let path = dir.join("coord.log");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let records = decode_all(&bytes);
        let max = records
            .iter()
            .map(|r| r.txid)
            .max()
            .unwrap_or(0)
            .max(last_txid);
        let log = IntentLog {
            path,
            file: parking_lot::Mutex::new(LogFile {
                file,
                len: bytes.len() as u64,
                dirty: false,
            }),
            next_txid: AtomicU64::new(max + 1),
            joined: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            durable: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        };
        Ok((log, records))
    }

    /// A new round id.
    pub fn next_txid(&self) -> u64 {
        self.next_txid.fetch_add(1, Ordering::SeqCst)
    }

    /// Appends a round's record (fsynced if `sync`), after cutting the log
    /// back if it is large and every shard is durable.
    #[cfg(test)]
    pub fn append(&self, txid: u64, parts: &Parts, sync: bool) -> io::Result<()> {
        let parts: Vec<_> = parts
            .iter()
            .map(|(s, ops)| encode_part(*s, UNKNOWN, ops))
            .collect();
        self.append_encoded(txid, &parts, sync)
    }

    /// [`IntentLog::append`] of shares already encoded, in shard order.
    pub fn append_encoded(&self, txid: u64, parts: &[EncodedPart], sync: bool) -> io::Result<()> {
        let record = encode(txid, parts);
        let mut f = self.file.lock();
        if f.len > CAP && self.all_durable() {
            f.file.set_len(0)?;
            f.len = 0;
        }
        let at = f.len;
        f.file.write_all_at(&record, at)?;
        f.len += record.len() as u64;
        f.dirty = true;
        for (shard, _) in parts {
            self.joined[*shard].fetch_max(txid, Ordering::AcqRel);
        }
        if sync {
            f.file.sync_data()?;
            f.dirty = false;
        }
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&self) -> io::Result<()> {
        let mut f = self.file.lock();
        if f.dirty {
            f.file.sync_data()?;
            f.dirty = false;
        }
        Ok(())
    }

    /// Whether every appended record is durable.
    #[cfg(test)]
    pub fn synced(&self) -> bool {
        !self.file.lock().dirty
    }

    /// Shard `shard` has made every round up to `txid` durable.
    pub fn durable(&self, shard: usize, txid: u64) {
        self.durable[shard].fetch_max(txid, Ordering::AcqRel);
    }

    /// Whether the log is past its cap: shards then make their rounds
    /// durable when they next take part in one, so it can be cut back.
    pub fn over_cap(&self) -> bool {
        self.file.lock().len > CAP
    }

    fn all_durable(&self) -> bool {
        self.joined
            .iter()
            .zip(&self.durable)
            .all(|(j, d)| d.load(Ordering::Acquire) >= j.load(Ordering::Acquire))
    }

    /// Cuts the log back to nothing: every shard holds every round durably
    /// (after recovery, or at a clean shutdown).
    pub fn clear(&self) -> io::Result<()> {
        let mut f = self.file.lock();
        f.file.set_len(0)?;
        f.file.sync_data()?;
        f.len = 0;
        f.dirty = false;
        Ok(())
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The key of the `sys` row that holds a shard's last round.
pub const COORD_ROW: &[u8] = b"coord_txid";

/// The key of the `sys` row that holds the participants of a shard's last
/// round (u16 shard ids): with [`COORD_ROW`] it marks a record of the
/// shard log as its part of a round, and tells recovery which other
/// shards must have the round too.
pub const WITH_ROW: &[u8] = b"coord_with";

/// The participants' ids as [`WITH_ROW`] holds them.
pub fn encode_with(ids: &[usize]) -> Vec<u8> {
    ids.iter()
        .flat_map(|&id| (id as u16).to_be_bytes())
        .collect()
}

/// The round a shard log's record is the shard's part of, and the round's
/// participants; `None` for a commit of the shard alone.
pub fn round_of(ops: &[RowOp]) -> Option<(u64, Vec<usize>)> {
    let mut txid = None;
    let mut with = None;
    for op in ops {
        if let RowOp::Put(crate::storage::Table::Sys, key, value) = op {
            if key == COORD_ROW {
                txid = value.as_slice().try_into().ok().map(u64::from_be_bytes);
            } else if key == WITH_ROW {
                let ids = value.chunks_exact(2);
                with = Some(
                    ids.map(|c| u16::from_be_bytes([c[0], c[1]]) as usize)
                        .collect(),
                );
            }
        }
    }
    Some((txid?, with?))
}

/// What recovery finds of one shard before it replays its log.
#[derive(Debug, Default)]
pub struct ShardLog {
    /// The last round the shard's tables hold ([`COORD_ROW`]).
    pub tables_txid: u64,
    /// The sequence number of the last commit its tables hold.
    pub tables_seq: u64,
    /// The whole records of its log (the commits the tables lack).
    pub records: usize,
    /// Their sequence numbers, in order.
    pub seqs: Vec<u64>,
    /// The rounds among them: (record index, round id, participants).
    pub rounds: Vec<(usize, u64, Vec<usize>)>,
}

/// What recovery does, from [`plan_recovery`].
#[derive(Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Per shard, how many of its log's records go into its tables: a
    /// prefix, the rest is dropped.
    pub keep: Vec<usize>,
    /// The rounds of the coordination log to redo on the participants
    /// that lack them, ascending.
    pub redo: Vec<u64>,
}

/// Works out a consistent state to recover: every round on all of its
/// participants or on none, from what the shard logs and the coordination
/// log hold after a crash.
///
/// A round a participant lacks is redone there from the coordination
/// log's record, which is exact if the participant's state is the one the
/// round started from: its last commit is the one the record names as
/// the round's start there (counting the rounds redone on it before), or,
/// for a record that does not say, its log ends where the round's part
/// would begin and no earlier round of it was dropped. Otherwise (the
/// record is lost, or the participant's state ends earlier) the round is
/// dropped: each participant whose log has its part keeps only the
/// records before it, a prefix of its commits, as `everysec` allows, and
/// later rounds of those participants are judged on what remains. This
/// is what the OS's own writeback can call for after a power loss: it may
/// put a round's part in one shard's log on disk before the round's
/// record and the other parts. Rounds are judged oldest first, since a
/// shard takes part in rounds in the order of their ids, so one pass
/// settles them.
pub fn plan_recovery(logs: &[ShardLog], records: &[Record]) -> Recovery {
    use std::collections::{BTreeMap, HashMap};
    let mut keep: Vec<usize> = logs.iter().map(|l| l.records).collect();
    // Round id -> its participants, and each one's start if its record is
    // here (`None`: the record is lost).
    type Starts = Option<HashMap<usize, Option<u64>>>;
    let mut rounds: BTreeMap<u64, (Vec<usize>, Starts)> = BTreeMap::new();
    for r in records {
        let with = r.parts.iter().map(|(s, _)| *s).collect();
        let starts = r
            .parts
            .iter()
            .map(|(s, _)| *s)
            .zip(r.starts.iter().copied());
        rounds.insert(r.txid, (with, Some(starts.collect())));
    }
    let mut parts: Vec<HashMap<u64, usize>> = Vec::with_capacity(logs.len());
    for log in logs {
        let mut at = HashMap::new();
        for (i, txid, with) in &log.rounds {
            at.insert(*txid, *i);
            rounds.entry(*txid).or_insert_with(|| (with.clone(), None));
        }
        parts.push(at);
    }
    // A shard that lost a round that is not redone: no later round can
    // be redone on it.
    let mut broken = vec![false; logs.len()];
    // Each shard's last commit: its log's last, then moved on by each
    // round redone on it (its part would be the commit after its start).
    let mut end: Vec<u64> = logs
        .iter()
        .map(|l| l.seqs.last().copied().unwrap_or(l.tables_seq))
        .collect();
    let mut redo = Vec::new();
    for (txid, (with, starts)) in &rounds {
        let with: Vec<usize> = with.iter().copied().filter(|&p| p < logs.len()).collect();
        let mut lacking = Vec::new();
        let mut exact = true;
        for &p in &with {
            let at = parts[p].get(txid).copied();
            if logs[p].tables_txid >= *txid || at.is_some_and(|i| i < keep[p]) {
                continue;
            }
            let start = starts.as_ref().and_then(|s| s.get(&p).copied().flatten());
            lacking.push((p, start));
            exact &= !broken[p]
                && match start {
                    Some(start) => end[p] == start,
                    None => keep[p] == at.unwrap_or(logs[p].records),
                };
        }
        if lacking.is_empty() {
            continue;
        }
        if starts.is_some() && exact {
            for (p, start) in lacking {
                if let Some(start) = start {
                    end[p] = start + 1;
                }
            }
            redo.push(*txid);
            continue;
        }
        for &p in &with {
            if let Some(&i) = parts[p].get(txid) {
                keep[p] = keep[p].min(i);
            }
            if logs[p].tables_txid >= *txid {
                // Never the case: a log generation is fsynced (and then
                // written into the tables) only after the records of its
                // rounds, and the state they start from, are durable.
                tracing::error!(shard = p, txid, "a dropped round is in the tables");
            }
            broken[p] = true;
        }
    }
    Recovery { keep, redo }
}

fn encode(txid: u64, parts: &[EncodedPart]) -> Vec<u8> {
    let body_len = 2 + parts.iter().map(|(_, p)| p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(HEADER + body_len);
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&txid.to_be_bytes());
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]); // the CRC, once the body is in
    out.extend_from_slice(&(parts.len() as u16).to_be_bytes());
    for (_, part) in parts {
        out.extend_from_slice(part);
    }
    let crc = crc32fast::hash(&out[HEADER..]);
    out[HEADER - 4..HEADER].copy_from_slice(&crc.to_be_bytes());
    out
}

/// A record's body: its parts, and their starts where `with_starts`.
fn decode_body(body: &[u8], with_starts: bool) -> Option<(Parts, Vec<Option<u64>>)> {
    let mut c = Cursor(body);
    let n = c.u16()?;
    let mut parts = Vec::with_capacity(n as usize);
    let mut starts = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let shard = c.u16()? as usize;
        let start = if with_starts { c.u64()? } else { UNKNOWN };
        starts.push((start != UNKNOWN).then_some(start));
        parts.push((shard, c.ops()?));
    }
    c.0.is_empty().then_some((parts, starts))
}

/// The whole records at the start of `bytes`; the first torn or corrupt
/// one ends the log (it was never acknowledged).
fn decode_all(bytes: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let h = &bytes[at..at + HEADER];
        let magic = u32::from_be_bytes(h[..4].try_into().unwrap());
        if magic != MAGIC && magic != MAGIC_V1 {
            break;
        }
        let txid = u64::from_be_bytes(h[4..12].try_into().unwrap());
        let len = u32::from_be_bytes(h[12..16].try_into().unwrap()) as usize;
        let crc = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let Some(body) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Some((parts, starts)) = decode_body(body, magic == MAGIC) else {
            break;
        };
        out.push(Record {
            txid,
            parts,
            starts,
        });
        at += HEADER + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Table;

    fn parts() -> Parts {
        vec![
            (
                0,
                vec![
                    RowOp::Put(Table::Meta, b"k".to_vec(), b"v".to_vec()),
                    RowOp::Del(Table::Sub, b"s".to_vec()),
                ],
            ),
            (
                1,
                vec![
                    RowOp::Clear(Table::Ttl),
                    RowOp::DelRange(Table::Meta, b"a".to_vec(), None),
                    RowOp::DelRange(Table::Sub, b"a".to_vec(), Some(b"b".to_vec())),
                ],
            ),
        ]
    }

    /// `parts()`, encoded as the participants hand them in.
    fn shares() -> Vec<EncodedPart> {
        parts()
            .iter()
            .map(|(s, o)| encode_part(*s, 40 + *s as u64, o))
            .collect()
    }

    /// A shard's log for [`plan_recovery`]: its tables' last round, its
    /// record count and its rounds (index, id, participants).
    fn log(tables_txid: u64, records: usize, rounds: &[(usize, u64, &[usize])]) -> ShardLog {
        ShardLog {
            tables_txid,
            tables_seq: 0,
            records,
            seqs: (1..=records as u64).collect(),
            rounds: rounds
                .iter()
                .map(|(i, t, w)| (*i, *t, w.to_vec()))
                .collect(),
        }
    }

    /// A record of round `txid` over `with` (its changes do not matter to
    /// the plan), of a build that did not note where rounds start.
    fn record(txid: u64, with: &[usize]) -> Record {
        Record {
            txid,
            parts: with.iter().map(|&s| (s, Vec::new())).collect(),
            starts: vec![None; with.len()],
        }
    }

    /// A record of round `txid` that starts on each shard of `with` after
    /// the commit numbered beside it.
    fn started(txid: u64, with: &[(usize, u64)]) -> Record {
        Record {
            txid,
            parts: with.iter().map(|&(s, _)| (s, Vec::new())).collect(),
            starts: with.iter().map(|&(_, q)| Some(q)).collect(),
        }
    }

    /// With the starts in the records, a round is redone where it was
    /// lost only on a shard whose last commit is the round's start there
    /// (rounds redone before it counting): a shard that lost commits
    /// before the round (its log ends at 1, the round starts after 2)
    /// cannot take it, and the round is dropped where it survived.
    #[test]
    fn a_round_is_redone_only_from_its_start() {
        // Shard 1 lost both rounds, but kept its commits before them.
        let logs = [
            log(0, 3, &[(1, 1, &[0, 1]), (2, 2, &[0, 1])]),
            log(0, 2, &[]),
        ];
        let records = [started(1, &[(0, 1), (1, 2)]), started(2, &[(0, 2), (1, 3)])];
        let plan = plan_recovery(&logs, &records);
        assert_eq!((plan.keep, plan.redo), (vec![3, 2], vec![1, 2]));
        // Shard 1 lost its last commit before round 1 as well.
        let logs = [
            log(0, 3, &[(1, 1, &[0, 1]), (2, 2, &[0, 1])]),
            log(0, 1, &[]),
        ];
        let plan = plan_recovery(&logs, &records);
        assert_eq!((plan.keep, plan.redo), (vec![1, 1], vec![]));
    }

    #[test]
    fn a_round_every_participant_has_needs_nothing() {
        let logs = [log(1, 0, &[]), log(0, 2, &[(0, 1, &[0, 1])])];
        let plan = plan_recovery(&logs, &[]);
        assert_eq!((plan.keep, plan.redo), (vec![0, 2], vec![]));
    }

    /// Rounds a shard lost after the state they start from are redone,
    /// one after the other, from their records.
    #[test]
    fn rounds_lost_on_a_shard_are_redone_in_order() {
        let logs = [
            log(0, 3, &[(0, 1, &[0, 1]), (2, 2, &[0, 1])]),
            log(0, 0, &[]),
        ];
        let plan = plan_recovery(&logs, &[record(1, &[0, 1]), record(2, &[0, 1])]);
        assert_eq!((plan.keep, plan.redo), (vec![3, 0], vec![1, 2]));
    }

    /// A round that cannot be redone (its record is lost) is dropped where
    /// it survived, with everything after it there; a later round of that
    /// shard then cannot be redone on it, record or not, and is dropped
    /// from its other participants too.
    #[test]
    fn a_dropped_round_takes_the_later_rounds_of_its_shards() {
        let logs = [
            log(0, 3, &[(0, 1, &[0, 1]), (2, 2, &[0, 2])]),
            log(0, 0, &[]),
            log(0, 2, &[(1, 2, &[0, 2])]),
        ];
        for records in [vec![], vec![record(2, &[0, 2])]] {
            let plan = plan_recovery(&logs, &records);
            assert_eq!((plan.keep, plan.redo), (vec![0, 0, 1], vec![]));
        }
    }

    #[test]
    fn records_read_back_whole_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (log, none) = IntentLog::open(dir.path(), 2, 0).unwrap();
        assert!(none.is_empty());
        assert_eq!(log.next_txid(), 1);
        log.append(1, &parts(), true).unwrap();
        log.append(2, &parts()[..1].to_vec(), false).unwrap();
        log.sync().unwrap();
        drop(log);
        let path = dir.path().join("coord.log");
        let len = std::fs::metadata(&path).unwrap().len();
        // A third record cut short, as by a crash mid-append.
        let partial = encode(3, &shares());
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &partial[..partial.len() - 3]).unwrap();
        drop(f);
        let (log, records) = IntentLog::open(dir.path(), 2, 0).unwrap();
        assert_eq!(
            records,
            vec![
                Record {
                    txid: 1,
                    parts: parts(),
                    starts: vec![None, None],
                },
                Record {
                    txid: 2,
                    parts: parts()[..1].to_vec(),
                    starts: vec![None],
                }
            ]
        );
        assert_eq!(log.next_txid(), 3);
        assert!(std::fs::metadata(&path).unwrap().len() > len);
        log.clear().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn a_corrupt_record_ends_the_log() {
        let mut bytes = encode(1, &shares());
        let second = encode(2, &shares());
        bytes.extend_from_slice(&second);
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        let records = decode_all(&bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].txid, 1);
        assert_eq!(records[0].parts, parts());
        assert_eq!(records[0].starts, vec![Some(40), Some(41)]);
    }
}
