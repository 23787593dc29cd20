//! Redis memory per active bucket: writes N distinct buckets through the real
//! bucket script (EVALSHA, pipelined) and reports the growth of
//! `used_memory` from `INFO memory` divided by N.
//!
//! ```text
//! redis-server --port 16391 --save '' --daemonize no &
//! cargo run --release -p tollgate-authz --example redis_memory -- redis://127.0.0.1:16391 1000000
//! ```
//! Use an empty Redis: the figure is a difference of two `INFO` readings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tollgate_authz::storage::redis::BUCKET_LUA;

fn used_memory(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("redis://127.0.0.1:16391");
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_connection().unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(BUCKET_LUA)
        .query(&mut con)
        .unwrap();
    let before = used_memory(&mut con);
    let started = std::time::Instant::now();
    let mut i = 0;
    while i < n {
        let mut p = redis::pipe();
        for j in i..(i + 1000).min(n) {
            // A key's requests-per-day bucket, as the service names it. After
            // one take its TTL is 86.4 s, so every bucket is still live when
            // memory is read.
            p.cmd("EVALSHA")
                .arg(&sha)
                .arg(1)
                .arg(format!("tg:{{tenant-{j:07}}}:rd:k:key-{j:07}"))
                .arg("take")
                .arg(1000)
                .arg(86_400_000)
                .arg(1)
                .ignore();
        }
        let () = p.query(&mut con).unwrap();
        i += 1000;
    }
    let after = used_memory(&mut con);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    println!(
        "buckets written: {n} in {:.1} s; keys in db: {keys}; used_memory grew {} bytes = {:.1} bytes per bucket",
        started.elapsed().as_secs_f64(),
        after - before,
        (after - before) as f64 / n as f64
    );
}
