//! Members of sets being popped, held by the shard so that SPOP need not
//! look for them.
//!
//! SPOP draws each member it pops (`families::collection::pick`): a key
//! drawn in the members' shape and looked up, or a walk down their trie.
//! A lookup that finds a member descends the tables once; one that finds
//! nothing is mostly the key filter's word, and as a popped set thins,
//! the misses before each hit grow as the members do sparse. Popped from
//! 600,000 members of a million possible down to 9,000, a pop took 9 us
//! of the server's CPU at first and 41 us at the end (Redis 7.0.15: 3.3
//! throughout).
//!
//! A set that is being popped and nothing else, whose members are few
//! enough to hold (up to a million, and 16 MiB of pools a shard), is read
//! into a pool here, a chunk at a time among its pops (which draw until
//! it is whole); each pop then takes members from the pool at random,
//! uniformly, as a draw would, and looks nothing up: the pool holds
//! exactly the set's members. Any other write of one of the set's rows,
//! whatever the command (SADD, SREM, SMOVE, a restore, a flush, a
//! migration), drops the pool or the build ([`Pools::touched`]), and so
//! does a transaction taken back; a pool whose count of members differs
//! from the set's size is dropped when found. A pool costs a scan of the
//! set, so one is built only for a set whose pops have come one after
//! another, nothing changing its size between them, for a sixteenth of
//! its members or more ([`Streak`]); a set changed by other writes among
//! its pops (a queue fed with SADD) keeps drawing. Popped the same way,
//! the pops past 300,000 members took 2.6-5.2 us each.
//!
//! Only the shard's writes see the pools: they live in its
//! [`ShardState`](super::ShardState), in memory, and go with it.

use rand::Rng;

use super::Table;

/// Most members a pool holds.
pub const POOL_MOST: u64 = 1 << 20;

/// Most bytes a shard's pools hold together (members and their places;
/// a pool being read may take as much again): 14-byte members
/// (`element:000042`) take 22 bytes each, so ~760,000 of them fit.
const POOL_BYTES: usize = 16 << 20;

/// Rows a pool's build reads at a time, at most one such chunk a
/// millisecond: 1-4 ms of a batch's time (~0.25 us a row, up to 1 us
/// where the set's rows lie among those of members popped since the
/// tables last took the write buffers). Read at once, 61,000 members
/// held up the shard's batch for 13 ms. At pipeline 16 a chunk goes with
/// each batch (~200 a second under SPOP), so 4,096 rows read a pool of
/// 565,000 members in under a second.
pub const BUILD_CHUNK: usize = 4096;

/// A build no pop has gone on with for this long gives way to another.
const BUILD_IDLE_MS: u64 = 1000;

/// Pops in a streak, as a share of the set's size, before a pool is built:
/// one in this many of its members.
const STREAK_SHARE: u64 = 16;

/// Bytes a member's place in a pool takes.
const SPAN: usize = std::mem::size_of::<(u32, u32)>();

/// Streaks followed at once; past it, all are forgotten.
const STREAKS_KEPT: usize = 64;

/// The pools of a shard and the pop streaks that lead to them.
#[derive(Default)]
pub struct Pools {
    pools: Vec<Pool>,
    streaks: Vec<Streak>,
    /// The pool being read, a chunk at a time.
    build: Option<Build>,
}

/// A copy is of the state without its pools: they are a cache, and the
/// copy may see writes this one does not.
impl Clone for Pools {
    fn clone(&self) -> Pools {
        Pools::default()
    }
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools")
            .field("pools", &self.pools.len())
            .field(
                "members",
                &self.pools.iter().map(|p| p.members.len()).sum::<usize>(),
            )
            .field("streaks", &self.streaks.len())
            .field("building", &self.build.as_ref().map(|b| b.members.len()))
            .finish()
    }
}

/// Every member of one set, in one buffer.
struct Pool {
    /// The prefix of the set's sub-keys (its key and version).
    prefix: Vec<u8>,
    members: PoolMembers,
}

/// A set's members, read for a pool ([`Pools::keep`]).
#[derive(Default)]
pub struct PoolMembers {
    bytes: Vec<u8>,
    /// Where each member lies in `bytes`: start and length.
    spans: Vec<(u32, u32)>,
}

impl PoolMembers {
    /// Room for `n` members.
    pub fn with_capacity(n: usize) -> PoolMembers {
        PoolMembers {
            bytes: Vec::new(),
            spans: Vec::with_capacity(n),
        }
    }

    /// Adds one member; false if a pool may not hold that many (then the
    /// set is not pooled).
    pub fn push(&mut self, member: &[u8]) -> bool {
        if self.bytes() + member.len() + SPAN > POOL_BYTES || self.spans.len() as u64 >= POOL_MOST {
            return false;
        }
        // Within POOL_BYTES, so within u32.
        let (at, len) = (self.bytes.len() as u32, member.len() as u32);
        self.bytes.extend_from_slice(member);
        self.spans.push((at, len));
        true
    }

    /// Bytes held, with their places.
    fn bytes(&self) -> usize {
        self.bytes.len() + self.spans.len() * SPAN
    }

    /// Members held.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// A pool being read ([`Pools::take_build`]).
pub struct Build {
    prefix: Vec<u8>,
    /// The members read so far, in key order.
    pub members: PoolMembers,
    /// The key of the last row read, once a chunk was.
    after: Option<Vec<u8>>,
    /// Which of the members read were popped since (by place; those past
    /// its end were not).
    gone: Vec<bool>,
    /// When the last chunk was read (the shard's clock, ms).
    read_ms: u64,
}

impl Build {
    /// Where the next chunk's scan starts: just after the last row read.
    pub fn resume(&self) -> Vec<u8> {
        match &self.after {
            Some(key) => {
                let mut from = key.clone();
                from.push(0);
                from
            }
            None => self.prefix.clone(),
        }
    }

    /// The chunk just read ended at `key`, with rows after it.
    pub fn read_to(&mut self, key: &[u8]) {
        self.after = Some(key.to_vec());
    }
}

/// Pops of one set, one after another.
struct Streak {
    prefix: Vec<u8>,
    /// The set's size the next pop finds if nothing else changed it.
    next: u64,
    /// Members popped so far.
    pops: u64,
}

impl Pools {
    /// `want` members of the set under `prefix`, which holds `size`, drawn
    /// at random from its pool and let go of; `None` if it has no pool
    /// (one whose count disagrees with `size` is dropped).
    pub fn draw(&mut self, prefix: &[u8], size: u64, want: usize) -> Option<Vec<Vec<u8>>> {
        let i = self.pools.iter().position(|p| p.prefix == prefix)?;
        let PoolMembers { bytes, spans } = &mut self.pools[i].members;
        if spans.len() as u64 != size || want > spans.len() {
            self.pools.remove(i);
            return None;
        }
        let mut rng = rand::thread_rng();
        let mut out = Vec::with_capacity(want);
        for _ in 0..want {
            // A uniform pick among those left, as successive draws without
            // repeats are; the order they come in is random too.
            let (at, len) = spans.swap_remove(rng.gen_range(0..spans.len()));
            out.push(bytes[at as usize..(at + len) as usize].to_vec());
        }
        if spans.is_empty() {
            self.pools.remove(i);
        }
        Some(out)
    }

    /// Notes a pop of `want` members from the set under `prefix`, which
    /// holds `size`, that its pool (none) could not serve; true if a pool
    /// should be built for it now (see the module doc).
    pub fn pop_drawn(&mut self, prefix: &[u8], size: u64, want: usize) -> bool {
        let i = match self.streaks.iter().position(|s| s.prefix == prefix) {
            Some(i) => i,
            None => {
                if self.streaks.len() >= STREAKS_KEPT {
                    self.streaks.clear();
                }
                self.streaks.push(Streak {
                    prefix: prefix.to_vec(),
                    next: size,
                    pops: 0,
                });
                self.streaks.len() - 1
            }
        };
        let s = &mut self.streaks[i];
        if s.next != size {
            s.pops = 0;
        }
        let build = size <= POOL_MOST && s.pops.saturating_mul(STREAK_SHARE) >= size;
        s.pops += want as u64;
        s.next = size.saturating_sub(want as u64);
        build
    }

    /// The build of the set under `prefix`'s pool, to read its next chunk
    /// (begun if none is under way, or the one under way is idle); `None`
    /// if a chunk was read this millisecond already, or another set's
    /// build is going on. Hand it back with [`Pools::put_build`] or
    /// [`Pools::finish_build`].
    pub fn take_build(&mut self, prefix: &[u8], now_ms: u64) -> Option<Build> {
        match &self.build {
            Some(b) if b.prefix == prefix => {
                if b.read_ms == now_ms {
                    return None;
                }
            }
            Some(b) if now_ms.saturating_sub(b.read_ms) < BUILD_IDLE_MS => return None,
            _ => {
                self.build = Some(Build {
                    prefix: prefix.to_vec(),
                    members: PoolMembers::default(),
                    after: None,
                    gone: Vec::new(),
                    read_ms: now_ms,
                })
            }
        }
        let mut b = self.build.take()?;
        b.read_ms = now_ms;
        Some(b)
    }

    /// A build with more chunks to read.
    pub fn put_build(&mut self, build: Build) {
        self.build = Some(build);
    }

    /// A build read to the end, for a set now of `size` members: it
    /// becomes the set's pool if it holds as many.
    pub fn finish_build(&mut self, build: Build, size: u64) {
        let Build {
            prefix,
            mut members,
            gone,
            ..
        } = build;
        let mut place = 0;
        members.spans.retain(|_| {
            place += 1;
            !gone.get(place - 1).copied().unwrap_or(false)
        });
        if members.len() as u64 == size {
            self.keep(&prefix, members);
        } else {
            // Rows that disagree with the size: not read again at once.
            self.give_up_build(&prefix);
        }
    }

    /// A build of the set under `prefix` could not hold its members (or
    /// disagreed with its size): it is dropped, and its pops must make a
    /// streak again before the next.
    pub fn give_up_build(&mut self, prefix: &[u8]) {
        if let Some(s) = self.streaks.iter_mut().find(|s| s.prefix == prefix) {
            s.pops = 0;
        }
    }

    /// Members of the set under `prefix` popped by draws: if its pool is
    /// being read, those already read leave it (found by a binary search:
    /// they were read in key order, so in member order; marked, so that
    /// none moves and each pop costs a search).
    pub fn popped_meanwhile(&mut self, prefix: &[u8], popped: &[Vec<u8>]) {
        let Some(b) = self.build.as_mut().filter(|b| b.prefix == prefix) else {
            return;
        };
        let PoolMembers { bytes, spans } = &b.members;
        for m in popped {
            let found =
                spans.binary_search_by(|&(at, len)| bytes[at as usize..(at + len) as usize].cmp(m));
            if let Ok(i) = found {
                if b.gone.len() <= i {
                    b.gone.resize(i + 1, false);
                }
                b.gone[i] = true;
            }
        }
    }

    /// Keeps `members`, every member of the set under `prefix`, as its pool.
    pub fn keep(&mut self, prefix: &[u8], members: PoolMembers) {
        self.pools.retain(|p| p.prefix != prefix);
        // The oldest pools go first, to keep within the shard's bytes.
        let mut held: usize = self.pools.iter().map(|p| p.members.bytes()).sum();
        while held + members.bytes() > POOL_BYTES && !self.pools.is_empty() {
            held -= self.pools.remove(0).members.bytes();
        }
        self.pools.push(Pool {
            prefix: prefix.to_vec(),
            members,
        });
    }

    /// A row of `table` was written or deleted other than by a pop from its
    /// set's pool: that set's pool no longer holds its members.
    #[inline]
    pub fn touched(&mut self, table: Table, key: &[u8]) {
        if table != Table::Sub {
            return;
        }
        if !self.pools.is_empty() {
            self.pools.retain(|p| !key.starts_with(&p.prefix));
        }
        if self
            .build
            .as_ref()
            .is_some_and(|b| key.starts_with(&b.prefix))
        {
            self.build = None;
        }
    }

    /// Drops every pool and build (a transaction taken back, a table
    /// cleared).
    pub fn clear(&mut self) {
        self.pools.clear();
        self.build = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> PoolMembers {
        let mut m = PoolMembers::with_capacity(n);
        for i in 0..n {
            assert!(m.push(format!("m{i}").as_bytes()));
        }
        m
    }

    #[test]
    fn a_pool_hands_out_each_member_once() {
        let mut pools = Pools::default();
        pools.keep(b"p", members(100));
        let mut seen = std::collections::HashSet::new();
        for size in (1..=100u64).rev().step_by(3) {
            let want = 3.min(size as usize);
            let got = pools.draw(b"p", size, want).expect("pooled");
            assert_eq!(got.len(), want);
            for m in got {
                assert!(seen.insert(m));
            }
        }
        assert_eq!(seen.len(), 100);
        // Emptied: the pool is gone.
        assert!(pools.draw(b"p", 1, 1).is_none());
    }

    #[test]
    fn a_pool_that_disagrees_with_the_size_is_dropped() {
        let mut pools = Pools::default();
        pools.keep(b"p", members(10));
        assert!(pools.draw(b"p", 11, 1).is_none());
        assert!(pools.draw(b"p", 10, 1).is_none(), "dropped, not kept");
    }

    #[test]
    fn a_write_under_the_prefix_drops_the_pool() {
        let mut pools = Pools::default();
        pools.keep(b"pa", members(10));
        pools.keep(b"pb", members(10));
        pools.touched(Table::Meta, b"pa-x");
        pools.touched(Table::Sub, b"pa-x");
        assert!(pools.draw(b"pa", 10, 1).is_none());
        assert!(pools.draw(b"pb", 10, 1).is_some());
        pools.clear();
        assert!(pools.draw(b"pb", 9, 1).is_none());
    }

    #[test]
    fn a_pool_is_asked_for_after_a_streak_of_pops() {
        let mut pools = Pools::default();
        let size = 1600;
        // Pops in a row until those before the next are a sixteenth of
        // what is left: 95 (95 * 16 >= 1505).
        for i in 0..95 {
            assert!(!pools.pop_drawn(b"p", size - i, 1), "pop {i}");
        }
        assert!(pools.pop_drawn(b"p", size - 95, 1));
        // Another write changed the size between pops: the streak starts over.
        assert!(!pools.pop_drawn(b"p", size, 1));
        // Too big to hold, however long the streak.
        let big = POOL_MOST + 1;
        for i in 0..big {
            assert!(!pools.pop_drawn(b"q", big * 2 - i, 1));
        }
    }

    #[test]
    fn a_build_reads_a_chunk_a_millisecond_and_leaves_out_what_was_popped() {
        let mut pools = Pools::default();
        let mut b = pools.take_build(b"p", 1).expect("begun");
        for m in [b"a", b"b", b"c"] {
            assert!(b.members.push(m));
        }
        b.read_to(b"pc");
        assert_eq!(b.resume(), b"pc\0");
        pools.put_build(b);
        // One chunk a millisecond; another set waits while this one reads.
        assert!(pools.take_build(b"p", 1).is_none());
        assert!(pools.take_build(b"q", 2).is_none());
        // Popped meanwhile: one read already, one not read yet.
        pools.popped_meanwhile(b"p", &[b"b".to_vec(), b"e".to_vec()]);
        let mut b = pools.take_build(b"p", 2).expect("goes on");
        assert!(b.members.push(b"d"));
        pools.finish_build(b, 3);
        let mut got = pools.draw(b"p", 3, 3).expect("pooled");
        got.sort();
        assert_eq!(got, [b"a".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        // A build that disagrees with the set's size makes no pool.
        let mut b = pools.take_build(b"p", 3).expect("begun");
        assert!(b.members.push(b"a"));
        pools.finish_build(b, 2);
        assert!(pools.draw(b"p", 2, 1).is_none());
        // ... and its pops make a streak again before the next build.
        for i in 0..32 {
            pools.pop_drawn(b"s", 64 - i, 1);
        }
        assert!(pools.pop_drawn(b"s", 32, 1), "a streak of half the set");
        let b = pools.take_build(b"s", 3).expect("begun");
        pools.finish_build(b, 31);
        assert!(!pools.pop_drawn(b"s", 31, 1), "given up");
        // A write under the prefix drops the build; an idle one gives way.
        let b = pools.take_build(b"p", 4).expect("begun");
        pools.put_build(b);
        pools.touched(Table::Sub, b"px");
        let b = pools.take_build(b"q", 5).expect("nothing under way");
        pools.put_build(b);
        assert!(pools.take_build(b"r", 4 + BUILD_IDLE_MS).is_none());
        assert!(
            pools.take_build(b"r", 5 + BUILD_IDLE_MS).is_some(),
            "q idle"
        );
    }

    #[test]
    fn pops_from_a_pool_are_spread_evenly() {
        // Each of 10 members comes first about as often as any other.
        let mut firsts = [0u32; 10];
        for _ in 0..5000 {
            let mut pools = Pools::default();
            pools.keep(b"p", members(10));
            let m = pools.draw(b"p", 10, 1).unwrap().remove(0);
            let i: usize = std::str::from_utf8(&m[1..]).unwrap().parse().unwrap();
            firsts[i] += 1;
        }
        assert!(
            firsts.iter().all(|&n| (400..600).contains(&n)),
            "{firsts:?}"
        );
    }
}
