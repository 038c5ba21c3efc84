//! What one write costs redb itself, with no cairn code around it: the floor
//! under every write-heavy benchmark of cairn.
//!
//! A table of 300,000 rows keyed like a set's sub-keys (one key's prefix,
//! then `element:<12 digits>`, as redis-benchmark's SADD sends them) takes
//! inserts in write transactions of `batch` rows, each committed with
//! `Durability::None` as a shard commits a batch under everysec (plus, as
//! there, an `Immediate` commit once a second). The keys are either random
//! over 1,000,000 members (SADD, HSET, ZADD, SET with `-r`: every insert
//! lands on a leaf of its own) or ascending (RPUSH: inserts share a leaf).
//!
//! Random inserts cost several microseconds each at the batch sizes a shard
//! sees (a few hundred), because each copies a 4 KiB leaf on write, and the
//! commit checksums and frees every page it dirtied. That alone is more than
//! redis-server spends on a whole SADD, which is why the pipelined random-key
//! write benchmarks stay under half of Redis's throughput.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::Rng;
use redb::{Database, TableDefinition};

const SUB: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sub");
const PREFILL: u64 = 300_000;
const MEMBERS: u64 = 1_000_000;
/// Cache of one shard in the default config.toml.
const CACHE_MB: usize = 64;

/// A sub-key of member `i` of one set.
fn sub_key(i: u64) -> Vec<u8> {
    let mut k = b"\x00\x2a\x1b\x00\x05myset\x00\x00\x00\x00\x00\x00\x00\x01".to_vec();
    k.extend_from_slice(format!("element:{i:012}").as_bytes());
    k
}

/// A prefilled database, its directory, the next ascending member and when
/// it last made a commit durable.
struct Bench {
    db: Database,
    _dir: tempfile::TempDir,
    next: u64,
    last_sync: Instant,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Database::builder()
            .set_cache_size(CACHE_MB << 20)
            .create(dir.path().join("engine.redb"))
            .expect("create");
        let mut rng = rand::thread_rng();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(SUB).unwrap();
            for _ in 0..PREFILL {
                t.insert(sub_key(rng.gen_range(0..MEMBERS)).as_slice(), &b""[..])
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        Bench {
            db,
            _dir: dir,
            next: MEMBERS,
            last_sync: Instant::now(),
        }
    }

    /// Inserts `n` rows in transactions of `batch`; the time it took.
    fn insert(&mut self, n: u64, batch: u64, random: bool) -> Duration {
        let mut rng = rand::thread_rng();
        let start = Instant::now();
        let mut done = 0;
        while done < n {
            let mut txn = self.db.begin_write().unwrap();
            let durable = self.last_sync.elapsed() >= Duration::from_secs(1);
            txn.set_durability(if durable {
                redb::Durability::Immediate
            } else {
                redb::Durability::None
            })
            .unwrap();
            if durable {
                self.last_sync = Instant::now();
            }
            {
                let mut t = txn.open_table(SUB).unwrap();
                for _ in 0..batch.min(n - done) {
                    let member = if random {
                        rng.gen_range(0..MEMBERS)
                    } else {
                        self.next += 1;
                        self.next
                    };
                    t.insert(sub_key(member).as_slice(), &b""[..]).unwrap();
                }
            }
            txn.commit().unwrap();
            done += batch;
        }
        start.elapsed()
    }
}

fn inserts(c: &mut Criterion) {
    let mut group = c.benchmark_group("redb_insert");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(1));
    for (order, random) in [("random", true), ("ascending", false)] {
        for batch in [30u64, 300, 3000] {
            let mut bench = Bench::new();
            group.bench_function(BenchmarkId::new(order, batch), |b| {
                b.iter_custom(|iters| bench.insert(iters, batch, random))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, inserts);
criterion_main!(benches);
