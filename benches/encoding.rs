//! Criterion benchmarks of the storage hot paths: key and score encoding,
//! metadata round trips, and a shard-style batch of SETs committed through
//! the shard's store (log append and write buffer, the background writer
//! moving full buffers into the redb file): what one group commit costs
//! per op.

use criterion::{black_box, criterion_group, criterion_main, Criterion};

use cairn::storage::encoding::{meta_key, score_from_bytes, score_to_bytes, Meta};
use cairn::storage::keyspace::{self, Key};
use cairn::storage::store::{Limits, Store};
use cairn::storage::{ShardState, WriteCtx};

fn encoding(c: &mut Criterion) {
    c.bench_function("meta_key", |b| {
        b.iter(|| {
            meta_key(
                black_box(0),
                black_box(1234),
                black_box(b"key:000000012345"),
            )
        })
    });
    c.bench_function("score_round_trip", |b| {
        b.iter(|| score_from_bytes(score_to_bytes(black_box(-1234.5678))))
    });
    let meta = Meta::string(vec![b'x'; 64], 0);
    let raw = meta.encode();
    c.bench_function("meta_encode", |b| b.iter(|| black_box(&meta).encode()));
    c.bench_function("meta_decode", |b| {
        b.iter(|| Meta::decode(black_box(&raw)).unwrap())
    });
}

fn shard_apply(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("shard-0.redb"),
        |path| {
            Ok(redb::Database::builder()
                .set_cache_size(64 << 20)
                .create(path)?)
        },
        Limits {
            cap: 64 << 20,
            filter_rows: cairn::storage::store::FILTER_MIN_ROWS,
            row_cache: 8 << 20,
        },
    )
    .unwrap();
    let mut state = ShardState::load(&store.latest(0).unwrap()).unwrap();
    let mut n = 0u64;
    // Per-op cost of a group commit at several batch sizes: the difference
    // between them is the fixed cost of one commit.
    for size in [10usize, 100, 1000] {
        c.bench_function(&format!("batch_of_{size}_sets_non_durable_commit"), |b| {
            b.iter(|| {
                let base = store.latest(0).unwrap();
                let mut w = WriteCtx::open(&base, 0, &mut state);
                for _ in 0..size {
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let name = format!("key:{:012}", (n >> 33) % 100_000);
                    let k = Key::new(0, name.as_bytes());
                    let old = keyspace::lookup_for_write(&mut w, k).unwrap();
                    keyspace::store(&mut w, k, old.as_ref(), &Meta::string(b"xxx".to_vec(), 0))
                        .unwrap();
                }
                let ops = w.finish().unwrap();
                drop(base);
                store.commit(ops, false).unwrap();
            })
        });
    }
}

criterion_group!(benches, encoding, shard_apply);
criterion_main!(benches);
