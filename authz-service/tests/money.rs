//! Money budgets against a real Redis: exact spend from a scripted sequence
//! of usage reports (cached tokens, a cut stream), concurrent requests from
//! two instances against a small budget never overshoot it, a calendar day
//! and month roll over at local midnight in a non-UTC zone with the wall
//! clock passed in, and every counter carries a TTL past its window.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::RedisServer;
use tollgate_authz::authz::{Authorizer, CheckInput, Decision, UsageReport};
use tollgate_authz::metrics::Metrics;
use tollgate_authz::policy::{hash_key, Policy};
use tollgate_authz::storage::{RedisStore, RedisStoreConfig};

fn ms(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn policy(tenant_extra: &str, key_budgets: &str) -> Policy {
    Policy::from_yaml(&format!(
        "version: 1\ndefaults: {{time_zone: Europe/Paris}}\ntenants:\n  acme: {{{tenant_extra}}}\nkeys:\n  - id: k1\n    tenant: acme\n    sha256: {}\n    models: [\"openai/*\"]\n    budgets: {{{key_budgets}}}\n",
        hash_key("tg-money")
    ))
    .unwrap()
}

/// An authorizer on `redis` whose wall clock reads `clock`.
fn authz(p: Policy, redis: &RedisServer, clock: &Arc<AtomicI64>) -> Arc<Authorizer<RedisStore>> {
    let mut cfg = RedisStoreConfig::new(redis.url());
    cfg.timeout = Duration::from_millis(500);
    let store = RedisStore::new(&cfg).unwrap();
    let c = clock.clone();
    Arc::new(
        Authorizer::new(p, store, Arc::new(Metrics::new().unwrap()))
            .with_refill_wait(Duration::from_secs(2))
            .with_wall_clock(move || c.load(Ordering::SeqCst)),
    )
}

/// A Check of a 400-byte request: 100 + 256 tokens reserved.
fn input() -> CheckInput {
    CheckInput {
        authorization: Some("Bearer tg-money".into()),
        content_length: Some(400),
        ..Default::default()
    }
}

fn report(
    model: &str,
    prompt: u64,
    cached: u64,
    completion: u64,
    reserved: Option<u64>,
) -> UsageReport {
    UsageReport {
        tenant: "acme".into(),
        key_id: "k1".into(),
        model: Some(model.into()),
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: cached,
        cache_write_tokens: 0,
        reserved,
    }
}

fn headers(d: &Decision) -> std::collections::HashMap<&'static str, String> {
    match d {
        Decision::Allow { rate_headers, .. } => rate_headers.iter().cloned().collect(),
        Decision::Deny { headers, .. } => headers.iter().cloned().collect(),
        Decision::Unavailable(_) => Default::default(),
    }
}

/// Return every idle lease (1 s unused), so Redis holds exactly the spend.
async fn settle_leases(a: &Authorizer<RedisStore>) {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    a.maintain().await;
}

fn spent(redis: &RedisServer, key: &str) -> i64 {
    redis.cli(&["GET", key]).parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sequence_costs_exactly_its_prices() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2026-11-23T12:00:00Z")));
    let a = authz(
        policy("budgets: {usd_per_day: 10}", "usd_per_day: 1"),
        &redis,
        &clock,
    );
    // Reservation: 356 tokens at the highest price of openai/* ($10/M).
    for _ in 0..3 {
        let d = a.check(&input()).await;
        assert!(matches!(d, Decision::Allow { reserved: 356, .. }), "{d:?}");
        let h = headers(&d);
        assert_eq!(h["x-tollgate-budget-limit-usd"], "1.00");
        assert_eq!(h["x-tollgate-budget-scope"], "key/day");
    }
    // 1,000 prompt tokens of which 200 cached, 500 completion on gpt-4o-mini:
    // (800 × 0.15 + 200 × 0.075 + 500 × 0.60) / 1,000,000 = $0.000435.
    a.record_usage(&report("openai/gpt-4o-mini", 1000, 200, 500, Some(356)))
        .await
        .unwrap();
    // 2,000 prompt (1,000 cached), 1,000 completion on gpt-4o:
    // 1,000 × 2.50 + 1,000 × 1.25 + 1,000 × 10 = $0.01375.
    a.record_usage(&report("openai/gpt-4o", 2000, 1000, 1000, Some(356)))
        .await
        .unwrap();
    // A stream cut before its end: no `reserved`, so its reservation
    // ($0.00356) stays charged and the usage seen ($0.0000045) is added.
    a.record_usage(&report("openai/gpt-4o-mini", 10, 0, 5, None))
        .await
        .unwrap();
    settle_leases(&a).await;
    let expected = 435_000 + 13_750_000 + 3_560_000 + 4_500;
    assert_eq!(spent(&redis, "tg:{acme}:$d:2026-11-23:k:k1"), expected);
    assert_eq!(spent(&redis, "tg:{acme}:$d:2026-11-23:t"), expected);
    // The counters expire one hour after Paris midnight (23:00 UTC).
    let ttl: i64 = redis
        .cli(&["PTTL", "tg:{acme}:$d:2026-11-23:k:k1"])
        .parse()
        .unwrap();
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let expires = wall_now + ttl;
    assert!(
        (expires - ms("2026-11-24T00:00:00Z")).abs() < 5_000,
        "ttl {ttl}"
    );
    // Spend metric per tenant, key and model (label values from the table).
    let text = a.metrics().render();
    assert!(
        text.contains(r#"tollgate_authz_spend_usd_total{key="k1",model="openai/gpt-4o",tenant="acme"} 0.01375"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_two_instances_stay_within_the_budget() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2026-11-23T12:00:00Z")));
    // $0.05 a day; each request reserves $0.00356 and costs exactly that
    // (356 completion tokens of gpt-4o): at most 14 fit.
    let p = || policy("", "usd_per_day: 0.05");
    let (a, b) = (authz(p(), &redis, &clock), authz(p(), &redis, &clock));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..4 {
                match s.check(&input()).await {
                    Decision::Allow { reserved, .. } => {
                        admitted += 1;
                        s.record_usage(&report("openai/gpt-4o", 0, 0, 356, Some(reserved)))
                            .await
                            .unwrap();
                    }
                    Decision::Deny {
                        status: 429, body, ..
                    } => {
                        assert!(body.contains(r#""code":"budget_exceeded""#), "{body}");
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    settle_leases(&a).await;
    b.maintain().await;
    let total = spent(&redis, "tg:{acme}:$d:2026-11-23:k:k1");
    assert!(admitted <= 14, "admitted {admitted}");
    assert!(admitted >= 12, "admitted only {admitted} of 14 possible");
    // Redis holds what was spent plus what each instance still leases on a
    // budget it saw exhausted (kept until the window ends, to refuse while
    // Redis is down): less than one reservation per instance.
    let stranded = total - admitted as i64 * 3_560_000;
    assert!(
        (0..2 * 3_560_000).contains(&stranded),
        "total {total}, admitted {admitted}"
    );
    assert!(total <= 50_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_and_month_roll_over_at_local_midnight() {
    let redis = RedisServer::start();
    // 23:59:59 on Nov 30 in New York (UTC-5).
    let clock = Arc::new(AtomicI64::new(ms("2026-12-01T04:59:59Z")));
    let a = authz(
        policy(
            "time_zone: America/New_York, budgets: {usd_per_month: 1}",
            "usd_per_day: 0.01",
        ),
        &redis,
        &clock,
    );
    // Two requests fit the day's $0.01 ($0.00356 each), the third does not.
    assert!(matches!(a.check(&input()).await, Decision::Allow { .. }));
    assert!(matches!(a.check(&input()).await, Decision::Allow { .. }));
    let d = a.check(&input()).await;
    let Decision::Deny {
        status,
        body,
        headers,
    } = &d
    else {
        panic!("{d:?}")
    };
    assert_eq!(*status, 429);
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert_eq!(v["error"]["type"], "insufficient_quota");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Budget exhausted for key k1: $0.01 per day")
            && msg.contains("resets at 2026-12-01T00:00:00-05:00 (in 1s)"),
        "{msg}"
    );
    assert!(headers.contains(&("retry-after", "1".to_string())));
    // Midnight in New York: a new day and a new month.
    clock.store(ms("2026-12-01T05:00:00Z"), Ordering::SeqCst);
    let d = a.check(&input()).await;
    assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
    assert_eq!(headers_of_reset(&d), "24h0m0s");
    settle_leases(&a).await;
    assert_eq!(spent(&redis, "tg:{acme}:$d:2026-11-30:k:k1"), 2 * 3_560_000);
    assert_eq!(spent(&redis, "tg:{acme}:$d:2026-12-01:k:k1"), 3_560_000);
    assert_eq!(spent(&redis, "tg:{acme}:$m:2026-11:t"), 2 * 3_560_000);
    assert_eq!(spent(&redis, "tg:{acme}:$m:2026-12:t"), 3_560_000);
}

fn headers_of_reset(d: &Decision) -> String {
    headers(d)
        .get("x-tollgate-budget-reset")
        .cloned()
        .unwrap_or_default()
}
