//! Memory of this instance's lease state per active key: N keys, each with
//! the four buckets of the demo policy (key and tenant × requests and
//! tokens), granted a lease as a Check would; prints the growth of the
//! process's resident memory (`/proc/self/statm`) divided by N.
//!
//! ```text
//! cargo run --release -p tollgate-authz --example lease_memory -- 1000000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use tollgate_authz::bucket::BucketSpec;
use tollgate_authz::lease::Leases;
use tollgate_authz::storage::{bucket_key, BucketOp, Outcome};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(1_000_000);
    let spec = BucketSpec {
        capacity: 1_000_000,
        window_ms: 60_000,
    };
    let leases = Leases::new();
    let outcome = Outcome {
        denied: None,
        levels: vec![900.0; 4],
        granted: vec![10; 4],
    };
    let before = rss_bytes();
    let now = Instant::now();
    for i in 0..n {
        let tenant = format!("tenant-{i:07}");
        let key = format!("k:key-{i:07}");
        let ops: Vec<BucketOp> = [
            ("rm", key.as_str()),
            ("tm", key.as_str()),
            ("rm", "t"),
            ("tm", "t"),
        ]
        .iter()
        .map(|(kp, scope)| BucketOp {
            key: bucket_key(&tenant, kp, scope),
            spec,
            take: 1,
            lease: 0,
        })
        .collect();
        leases.grant(&ops, &outcome, now);
    }
    let grown = rss_bytes() - before;
    println!(
        "keys: {n}; lease entries: {}; resident memory grew {grown} bytes = {:.0} bytes per key ({:.0} per bucket)",
        leases.len(),
        grown as f64 / n as f64,
        grown as f64 / (4 * n) as f64
    );
}
