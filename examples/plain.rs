//! A plain client of cairn: the redis crate, unchanged, against a running
//! server. Start one with `cargo run --release`, then:
//!
//! ```sh
//! cargo run --example plain -- 127.0.0.1:6379
//! ```

use redis::Commands;

fn main() -> redis::RedisResult<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6379".into());
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let mut con = client.get_connection()?;

    // Strings and counters, exactly as against Redis.
    let _: () = con.set_ex("greeting", "hello from cairn", 60)?;
    let greeting: String = con.get("greeting")?;
    let visits: i64 = con.incr("visits", 1)?;
    println!(
        "{greeting} (visit {visits}, ttl {}s)",
        con.ttl::<_, i64>("greeting")?
    );

    // A pipeline: one round trip, replies in order, many writes per commit.
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.set(format!("item:{i}"), i).ignore();
    }
    pipe.mget(&["item:0", "item:99"]);
    let (ends,): (Vec<i64>,) = pipe.query(&mut con)?;
    println!("pipelined 100 SETs, first and last: {ends:?}");

    // MSET across shards is atomic: no reader sees half of it.
    let _: () = con.mset(&[("a", "1"), ("b", "1"), ("c", "1")])?;
    let keys: Vec<String> = con.keys("item:9*")?;
    println!(
        "{} keys match item:9*, dbsize {}",
        keys.len(),
        redis::cmd("DBSIZE").query::<i64>(&mut con)?
    );
    Ok(())
}
