//! One table of bucket rules (`tests/fixtures/bucket_vectors.json`) checked
//! against both implementations: the pure functions of `src/bucket.rs` and
//! the Lua script `src/storage/bucket.lua` in a real Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde::Deserialize;
use tollgate_authz::bucket::{self, BucketSpec, BucketState};
use tollgate_authz::storage::{bucket_key, BucketOp, RedisStore, RedisStoreConfig, Store};

use crate::common::RedisServer;

const DAY: u64 = 86_400_000;

#[derive(Deserialize)]
struct Table {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    capacities: Vec<u64>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    mode: String,
    takes: Vec<i64>,
    leases: Vec<u64>,
    denied: Option<usize>,
    levels: Vec<f64>,
    granted: Vec<u64>,
    /// Which buckets of the case this step touches (default: all, in order).
    buckets: Option<Vec<usize>>,
}

impl Step {
    fn buckets(&self, case: &Case) -> Vec<usize> {
        self.buckets
            .clone()
            .unwrap_or_else(|| (0..case.capacities.len()).collect())
    }
}

fn table() -> Table {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bucket_vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn spec(capacity: u64) -> BucketSpec {
    BucketSpec {
        capacity,
        window_ms: DAY,
    }
}

#[test]
fn rust_bucket_math_follows_the_table() {
    for case in table().cases {
        let mut states: Vec<Option<BucketState>> = vec![None; case.capacities.len()];
        for (n, step) in case.steps.iter().enumerate() {
            let ids = step.buckets(&case);
            let specs: Vec<BucketSpec> = ids.iter().map(|&i| spec(case.capacities[i])).collect();
            let now = 0;
            let (denied, levels, granted) = if step.mode == "take" {
                let current: Vec<_> = ids.iter().map(|&i| states[i]).collect();
                let (out, denied) =
                    bucket::check_and_take(&current, &specs, &step.takes, &step.leases, now);
                if denied.is_none() {
                    for (k, &i) in ids.iter().enumerate() {
                        if step.takes[k] != 0 || out[k].granted > 0 {
                            states[i] = Some(BucketState {
                                level: out[k].level,
                                ts_ms: now,
                            });
                        }
                    }
                }
                (
                    denied,
                    out.iter().map(|o| o.level).collect::<Vec<_>>(),
                    out.iter().map(|o| o.granted).collect::<Vec<_>>(),
                )
            } else {
                let mut levels = Vec::new();
                for (k, &i) in ids.iter().enumerate() {
                    let s = bucket::debit(states[i], specs[k], step.takes[k], now);
                    states[i] = Some(s);
                    levels.push(s.level);
                }
                (None, levels, vec![0; ids.len()])
            };
            let at = format!("{}, step {n}", case.name);
            assert_eq!(denied, step.denied, "{at}");
            assert_eq!(levels, step.levels, "{at}");
            assert_eq!(granted, step.granted, "{at}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_follows_the_table() {
    let redis = RedisServer::start();
    let mut cfg = RedisStoreConfig::new(redis.url());
    cfg.timeout = Duration::from_millis(500);
    let store = RedisStore::new(&cfg).unwrap();
    for (c, case) in table().cases.iter().enumerate() {
        let tenant = format!("vectors-{c}");
        for (n, step) in case.steps.iter().enumerate() {
            let ops: Vec<BucketOp> = step
                .buckets(case)
                .iter()
                .enumerate()
                .map(|(k, &i)| BucketOp {
                    key: bucket_key(&tenant, "rd", &format!("b{i}")),
                    spec: spec(case.capacities[i]),
                    take: step.takes[k],
                    lease: step.leases[k],
                })
                .collect();
            let out = if step.mode == "take" {
                store.check_and_take(&ops).await.unwrap()
            } else {
                store.debit(&ops).await.unwrap()
            };
            let at = format!("{}, step {n}", case.name);
            assert_eq!(out.denied, step.denied, "{at}");
            assert_eq!(out.granted, step.granted, "{at}");
            // Levels come back in thousandths, after a few ms of a day's refill.
            for (got, want) in out.levels.iter().zip(&step.levels) {
                assert!(
                    got >= &(want - 0.001) && got < &(want + 0.01),
                    "{at}: level {got}, want {want}"
                );
            }
        }
    }
}
