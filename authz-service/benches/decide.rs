//! Criterion benches of the in-process decision (no Redis): the cost this
//! service adds on top of the gRPC and Redis round trips. A scenario table;
//! the in-memory store with a manual clock, so runs are deterministic.
//! Run: `cargo bench -p tollgate-authz --bench decide`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_authz::authz::{Authorizer, CheckInput, Decision};
use tollgate_authz::bucket::{check_and_take, BucketSpec, BucketState};
use tollgate_authz::metrics::Metrics;
use tollgate_authz::policy::{hash_key, Policy};
use tollgate_authz::service::{check_input, to_response};
use tollgate_authz::storage::{ManualClock, MemoryStore};

/// A policy with 1,000 keys over 10 tenants plus the keys the scenarios use.
fn policy() -> Policy {
    let mut y = String::from("version: 1\ntenants:\n");
    for t in 0..10 {
        y.push_str(&format!(
            "  t{t}:\n    limits: {{requests_per_minute: 1000000000, tokens_per_minute: 1000000000000000}}\n    model_limits:\n      openai/gpt-4o: {{requests_per_minute: 1000000000}}\n"
        ));
    }
    y.push_str("keys:\n");
    for k in 0..1000 {
        y.push_str(&format!(
            "  - id: k{k}\n    tenant: t{}\n    sha256: {}\n    limits: {{requests_per_minute: 1000000000, tokens_per_minute: 1000000000000000}}\n",
            k % 10,
            hash_key(&format!("tg-key-{k}"))
        ));
    }
    Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}"))
}

fn input(auth: Option<&str>, model: Option<&str>) -> CheckInput {
    CheckInput {
        authorization: auth.map(String::from),
        api_key: None,
        model: model.map(String::from),
        content_length: None,
    }
}

fn benches(c: &mut Criterion) {
    // Timers on: a Check that refills its leases waits with a timeout.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let metrics = Arc::new(Metrics::new().unwrap_or_else(|e| panic!("{e}")));
    let authz = Authorizer::new(
        policy(),
        MemoryStore::new(ManualClock::new(1_000_000)),
        metrics,
    );

    let scenarios: [(&str, CheckInput); 4] = [
        ("missing key (401)", input(None, None)),
        ("unknown key (401)", input(Some("Bearer tg-nope"), None)),
        ("known key, 4 buckets", input(Some("Bearer tg-key-7"), None)),
        (
            "known key + model, 5 buckets",
            input(Some("Bearer tg-key-7"), Some("openai/gpt-4o")),
        ),
    ];
    for (name, inp) in &scenarios {
        c.bench_function(&format!("check: {name}"), |b| {
            b.iter(|| {
                let d = rt.block_on(authz.check(black_box(inp)));
                black_box(to_response(d).is_ok())
            })
        });
    }
    // The decision must be what the scenario says.
    assert!(matches!(
        rt.block_on(authz.check(&scenarios[2].1)),
        Decision::Allow { .. }
    ));

    // What the six x-ratelimit-* response headers cost the service: the
    // same allowed Check, its response built and encoded as tonic sends it,
    // with the headers and with them dropped before the response is built
    // (their strings are formatted in both: the difference is carrying them
    // in the response and encoding them).
    for (name, keep) in [("with", true), ("without", false)] {
        c.bench_function(
            &format!("allowed Check + encoded response, {name} rate-limit headers"),
            |b| {
                b.iter(|| {
                    let mut d = rt.block_on(authz.check(black_box(&scenarios[2].1)));
                    if let (false, Decision::Allow { rate_headers, .. }) = (keep, &mut d) {
                        rate_headers.clear();
                    }
                    black_box(to_response(d).map(|r| prost::Message::encode_to_vec(&r).len()))
                })
            },
        );
    }

    let req = envoy_types::pb::envoy::service::auth::v3::CheckRequest::default();
    c.bench_function("check_input: empty request", |b| {
        b.iter(|| black_box(check_input(black_box(&req))))
    });

    let specs = [BucketSpec {
        capacity: 1000,
        window_ms: 60_000,
    }; 4];
    let states = [Some(BucketState {
        level: 500.0,
        ts_ms: 0,
    }); 4];
    c.bench_function("bucket math: 4 buckets", |b| {
        b.iter(|| {
            black_box(check_and_take(
                black_box(&states),
                &specs,
                &[1, 1, 0, 0],
                &[0, 0, 0, 0],
                30_000,
            ))
        })
    });
}

criterion_group!(decide, benches);
criterion_main!(decide);
