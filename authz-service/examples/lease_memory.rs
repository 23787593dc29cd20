//! Memory of this instance's lease state per active key: N virtual keys,
//! each with the four buckets of a demo-like key (key and tenant ×
//! requests and tokens per minute), K keys per tenant, every bucket
//! granted a lease as a Check would. Prints the growth of the process's
//! resident memory (`/proc/self/statm`) divided by N; then lets every key
//! go idle ([`IDLE`] later), sweeps, and prints resident memory again;
//! then makes N other keys active and prints it once more.
//!
//! ```text
//! cargo run --release -p tollgate-authz --example lease_memory -- 1000000       # K = 100
//! cargo run --release -p tollgate-authz --example lease_memory -- 1000000 1     # a tenant per key
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use tollgate_authz::bucket::BucketSpec;
use tollgate_authz::lease::{Leases, IDLE};
use tollgate_authz::storage::{bucket_key, BucketOp, Outcome};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().unwrap())
    };
    let n = arg(1, 1_000_000);
    let per_tenant = arg(2, 100).max(1);
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
    let grant = |round: usize, now: Instant| {
        let mut ops: Vec<BucketOp> = Vec::with_capacity(4);
        for i in 0..n {
            let tenant = format!("tenant-{round}-{:07}", i / per_tenant);
            let key = format!("k:key-{i:07}");
            ops.clear();
            ops.extend(
                [
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
                }),
            );
            leases.grant(&ops, &outcome, now);
        }
    };
    grant(1, now);
    let active = rss_bytes();
    let grown = active - before;
    println!(
        "keys: {n} ({per_tenant} per tenant); buckets: {}; resident memory grew {grown} bytes = {:.0} bytes per active key",
        leases.len(),
        grown as f64 / n as f64,
    );
    let returned = leases.sweep(now + IDLE).len();
    let idle = rss_bytes();
    println!(
        "after {} ms idle: buckets: {}, {returned} leases returned; resident memory {} bytes above the start = {:.0} bytes per key that was active",
        IDLE.as_millis(),
        leases.len(),
        idle.saturating_sub(before),
        idle.saturating_sub(before) as f64 / n as f64,
    );
    // Another N keys once the first went idle: they reuse that memory.
    grant(2, now + IDLE);
    let again = rss_bytes();
    println!(
        "another {n} keys active: resident memory {} bytes above the start = {:.0} bytes per active key",
        again.saturating_sub(before),
        again.saturating_sub(before) as f64 / n as f64,
    );
}
