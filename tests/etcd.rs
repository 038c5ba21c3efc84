//! The etcd client (src/cluster/etcd.rs) against a real etcd: reads,
//! compare-and-swap writes, watches, endpoint fallback, and failing fast
//! when etcd is gone.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use cairn::cluster::etcd::{Etcd, EtcdError, Versioned, WatchEvent};
use common::etcd::TestEtcd;

/// Generous for a live etcd on a busy machine (a put waits for an fsync).
const TIMEOUT: Duration = Duration::from_secs(5);
/// Short, for the tests where nothing will answer.
const SHORT: Duration = Duration::from_millis(800);

fn client(etcd: &TestEtcd) -> Etcd {
    Etcd::new(vec![etcd.endpoint.clone()], TIMEOUT)
}

/// A loopback address nothing listens on.
fn dead_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn put(value: &[u8], mod_revision: i64) -> WatchEvent {
    WatchEvent::Put(Versioned {
        value: value.to_vec(),
        mod_revision,
    })
}

fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, EtcdError>, started: Instant) {
    assert!(
        matches!(result, Err(EtcdError::Unavailable(_))),
        "expected Unavailable, got {result:?}"
    );
    let took = started.elapsed();
    assert!(took < SHORT + Duration::from_millis(500), "took {took:?}");
}

#[tokio::test]
async fn get_of_a_missing_key() {
    let etcd = TestEtcd::start();
    let (value, revision) = client(&etcd).get(b"nothing here").await.unwrap();
    assert_eq!(value, None);
    assert!(revision >= 1, "{revision}");
}

#[tokio::test]
async fn put_if_compares_the_mod_revision() {
    let etcd = TestEtcd::start();
    let c = client(&etcd);
    let key = b"topology";

    let first = c.put_if(key, b"one", 0).await.unwrap().expect("absent key");
    let (value, revision) = c.get(key).await.unwrap();
    assert_eq!(
        value,
        Some(Versioned {
            value: b"one".to_vec(),
            mod_revision: first
        })
    );
    assert_eq!(revision, first);

    // 0 means "must not exist"; a revision other than the current one loses.
    assert_eq!(c.put_if(key, b"two", 0).await.unwrap(), None);
    assert_eq!(c.put_if(key, b"two", first - 1).await.unwrap(), None);
    assert_eq!(c.put_if(key, b"two", first + 1).await.unwrap(), None);
    let second = c
        .put_if(key, b"two", first)
        .await
        .unwrap()
        .expect("current");
    assert!(second > first);
    // The revision the first writer read is now stale.
    assert_eq!(c.put_if(key, b"three", first).await.unwrap(), None);

    // Empty and binary values survive the base64 round trip.
    let empty = c.put_if(key, b"", second).await.unwrap().expect("current");
    let (value, _) = c.get(key).await.unwrap();
    assert_eq!(value.unwrap().value, b"");
    let binary: Vec<u8> = (0..=255).collect();
    c.put_if(key, &binary, empty)
        .await
        .unwrap()
        .expect("current");
    assert_eq!(c.get(key).await.unwrap().0.unwrap().value, binary);

    c.delete(key).await.unwrap();
    assert_eq!(c.get(key).await.unwrap().0, None);
    c.delete(key).await.unwrap();
}

#[tokio::test]
async fn watch_sees_puts_in_order_and_a_delete() {
    let etcd = TestEtcd::start();
    let c = client(&etcd);
    let key = b"topology";
    c.put_if(b"other", b"x", 0).await.unwrap().unwrap();

    let mut watch = c.watch(key, 0).await.unwrap();
    let r1 = c.put_if(key, b"one", 0).await.unwrap().unwrap();
    c.put_if(b"other", b"y", 0).await.unwrap(); // another key: not seen
    let r2 = c.put_if(key, b"two", r1).await.unwrap().unwrap();
    let r3 = c.put_if(key, b"", r2).await.unwrap().unwrap();
    c.delete(key).await.unwrap();
    let (_, r4) = c.get(key).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..4 {
        let event = tokio::time::timeout(TIMEOUT, watch.next()).await;
        seen.push(event.expect("event in time").unwrap());
    }
    assert_eq!(
        seen,
        [
            put(b"one", r1),
            put(b"two", r2),
            put(b"", r3),
            WatchEvent::Delete { revision: r4 }
        ]
    );

    // From a past revision, the history is replayed.
    let mut replay = c.watch(key, r2).await.unwrap();
    assert_eq!(replay.next().await.unwrap(), put(b"two", r2));
    assert_eq!(replay.next().await.unwrap(), put(b"", r3));
    assert_eq!(
        replay.next().await.unwrap(),
        WatchEvent::Delete { revision: r4 }
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_fails() {
    let etcd = TestEtcd::start();
    let c = client(&etcd);
    let r1 = c.put_if(b"k", b"one", 0).await.unwrap().unwrap();
    let r2 = c.put_if(b"k", b"two", r1).await.unwrap().unwrap();
    etcd.compact(r2);
    let mut watch = c.watch(b"k", r1).await.unwrap();
    let next = tokio::time::timeout(TIMEOUT, watch.next()).await.unwrap();
    assert!(matches!(next, Err(EtcdError::Protocol(_))), "{next:?}");
}

#[tokio::test]
async fn a_dead_first_endpoint_is_skipped() {
    let etcd = TestEtcd::start();
    let c = Etcd::new(vec![dead_endpoint(), etcd.endpoint.clone()], TIMEOUT);
    let r1 = c.put_if(b"k", b"v", 0).await.unwrap().unwrap();
    let mut watch = c.watch(b"k", r1).await.unwrap();
    assert_eq!(watch.next().await.unwrap(), put(b"v", r1));
    assert_eq!(c.get(b"k").await.unwrap().0.unwrap().value, b"v");
    c.delete(b"k").await.unwrap();
}

#[tokio::test]
async fn a_silent_first_endpoint_leaves_time_for_the_next() {
    let etcd = TestEtcd::start();
    // Accepts connections (the kernel does) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoints = vec![
        silent.local_addr().unwrap().to_string(),
        etcd.endpoint.clone(),
    ];
    let c = Etcd::new(endpoints, Duration::from_secs(4));
    assert_eq!(c.get(b"k").await.unwrap().0, None);

    let alone = Etcd::new(vec![silent.local_addr().unwrap().to_string()], SHORT);
    let started = Instant::now();
    assert_unavailable(alone.get(b"k").await, started);
}

#[tokio::test]
async fn everything_fails_fast_while_etcd_is_stopped() {
    let mut etcd = TestEtcd::start();
    let c = Etcd::new(vec![etcd.endpoint.clone()], SHORT);
    let r1 = c.put_if(b"k", b"v", 0).await.unwrap().unwrap();
    let mut open_watch = c.watch(b"k", 0).await.unwrap();

    etcd.stop();
    let started = Instant::now();
    assert_unavailable(open_watch.next().await, started);
    let started = Instant::now();
    assert_unavailable(c.get(b"k").await, started);
    let started = Instant::now();
    assert_unavailable(c.put_if(b"k", b"w", r1).await, started);
    let started = Instant::now();
    assert_unavailable(c.delete(b"k").await, started);
    let started = Instant::now();
    assert_unavailable(c.watch(b"k", 0).await, started);
    let both_dead = Etcd::new(vec![dead_endpoint(), etcd.endpoint.clone()], SHORT);
    let started = Instant::now();
    assert_unavailable(both_dead.get(b"k").await, started);

    // Back on the same data: the same client carries on.
    etcd.start_again();
    let (value, _) = c.get(b"k").await.unwrap();
    assert_eq!(value.unwrap().mod_revision, r1);
    assert!(c.put_if(b"k", b"w", r1).await.unwrap().is_some());
}
