//! Money budgets against a real Redis: exact spend from a scripted sequence
//! of usage reports (cached tokens, a cut stream), concurrent requests from
//! two instances against a small budget never overshoot it, a calendar day
//! and month roll over at local midnight in a non-UTC zone with the wall
//! clock passed in, and every counter carries a TTL past its window.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::RedisServer;
use tollgate_authz::authz::{Authorizer, CheckInput, Decision, UsageReport};
use tollgate_authz::metrics::Metrics;
use tollgate_authz::policy::{hash_key, Policy};
use tollgate_authz::storage::{RedisStore, RedisStoreConfig};

/// A test clock's time. The tests' clocks stand in 2096: Redis expires the
/// spend counters on its own clock, at an hour past the end of their window,
/// so a window in the past would be deleted as soon as it is written.
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
        web_searches: 0,
        reserved,
        ..UsageReport::default()
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

/// `key` expires at `at` (within 5 s of the real clock's reading).
fn assert_expires_at(redis: &RedisServer, key: &str, at: &str) {
    let ttl: i64 = redis.cli(&["PTTL", key]).parse().unwrap();
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((wall_now + ttl - ms(at)).abs() < 5_000, "{key}: ttl {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sequence_costs_exactly_its_prices() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2096-11-23T12:00:00Z")));
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
    assert_eq!(spent(&redis, "tg:{acme}:$d:2096-11-23:k:k1"), expected);
    assert_eq!(spent(&redis, "tg:{acme}:$d:2096-11-23:t"), expected);
    // The counters expire one hour after Paris midnight (23:00 UTC).
    assert_expires_at(
        &redis,
        "tg:{acme}:$d:2096-11-23:k:k1",
        "2096-11-24T00:00:00Z",
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
    let clock = Arc::new(AtomicI64::new(ms("2096-11-23T12:00:00Z")));
    // $0.05 a day; each request reserves $0.00356 and costs exactly that
    // (356 completion tokens of gpt-4o): at most 14 fit.
    let p = || policy("", "usd_per_day: 0.05");
    let (a, b) = (authz(p(), &redis, &clock), authz(p(), &redis, &clock));
    race(
        &redis,
        &a,
        &b,
        input,
        "budget_exceeded",
        "tg:{acme}:$d:2096-11-23:k:k1",
    )
    .await;
}

/// 16 clients on two instances send 4 Checks of `check()` each; every
/// admitted one costs exactly its $0.00356 reservation. A $0.05 budget
/// (counter `counter`) admits 12 to 14 of them, and Redis holds what they
/// spent plus what each instance still leases on a budget it saw exhausted
/// (kept until the window ends, to refuse while Redis is down): less than
/// one reservation per instance.
async fn race(
    redis: &RedisServer,
    a: &Arc<Authorizer<RedisStore>>,
    b: &Arc<Authorizer<RedisStore>>,
    check: fn() -> CheckInput,
    denial: &'static str,
    counter: &str,
) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..4 {
                match s.check(&check()).await {
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
                        assert!(body.contains(denial), "{body}");
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
    settle_leases(a).await;
    b.maintain().await;
    let total = spent(redis, counter);
    assert!(admitted <= 14, "admitted {admitted}");
    assert!(admitted >= 12, "admitted only {admitted} of 14 possible");
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
    let clock = Arc::new(AtomicI64::new(ms("2096-12-01T04:59:59Z")));
    let a = authz(
        policy(
            "time_zone: America/New_York, budgets: {usd_per_month: 1}",
            "usd_per_day: 0.01",
        ),
        &redis,
        &clock,
    );
    // Two requests fit the day's $0.01 ($0.00356 each), the third does not.
    let d = a.check(&input()).await;
    let Decision::Allow { reserved_at, .. } = d else {
        panic!("{d:?}")
    };
    // The minute of the reservation, for the usage report to settle.
    assert_eq!(
        reserved_at,
        Some(ms("2096-12-01T04:59:00Z") as u64 / 60_000)
    );
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
            && msg.contains("resets at 2096-12-01T00:00:00-05:00 (in 1s)"),
        "{msg}"
    );
    assert!(headers.contains(&("retry-after", "1".to_string())));
    // Midnight in New York: a new day and a new month.
    clock.store(ms("2096-12-01T05:00:00Z"), Ordering::SeqCst);
    let d = a.check(&input()).await;
    assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
    assert_eq!(headers_of_reset(&d), "24h0m0s");
    // One of the answers admitted on Nov 30 reports after midnight: it is
    // settled on Nov 30's day and November's month, not on the new ones.
    // 1,000 prompt and 500 completion tokens of gpt-4o-mini cost $0.00045:
    // $0.00311 of its $0.00356 reservation comes back.
    a.record_usage(&UsageReport {
        reserved_at,
        ..report("openai/gpt-4o-mini", 1000, 0, 500, Some(356))
    })
    .await
    .unwrap();
    settle_leases(&a).await;
    let nov_30 = 2 * 3_560_000 - 3_110_000;
    assert_eq!(spent(&redis, "tg:{acme}:$d:2096-11-30:k:k1"), nov_30);
    assert_eq!(spent(&redis, "tg:{acme}:$d:2096-12-01:k:k1"), 3_560_000);
    assert_eq!(spent(&redis, "tg:{acme}:$m:2096-11:t"), nov_30);
    assert_eq!(spent(&redis, "tg:{acme}:$m:2096-12:t"), 3_560_000);
}

#[test]
fn a_report_settles_at_its_reservation_minute_unless_it_is_implausible() {
    use tollgate_authz::spend::{settled_at, GRACE_MS};
    let now = ms("2096-12-01T05:00:30Z");
    let minute = |t: &str| Some(ms(t) as u64 / 60_000);
    assert_eq!(
        settled_at(minute("2096-12-01T04:59:59Z"), now),
        ms("2096-12-01T04:59:00Z")
    );
    assert_eq!(settled_at(None, now), now);
    // In the future, or older than the counters outlive their window.
    assert_eq!(settled_at(minute("2096-12-01T05:02:00Z"), now), now);
    assert_eq!(
        settled_at(Some((now - GRACE_MS) as u64 / 60_000 - 1), now),
        now
    );
    assert_eq!(settled_at(Some(u64::MAX), now), now);
}

fn headers_of_reset(d: &Decision) -> String {
    headers(d)
        .get("x-tollgate-budget-reset")
        .cloned()
        .unwrap_or_default()
}

/// A Check of a 400-byte request declaring `model`.
fn declaring(model: &str) -> CheckInput {
    CheckInput {
        model: Some(model.into()),
        ..input()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_budget_is_charged_only_for_its_model() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2096-11-23T12:00:00Z")));
    let a = authz(
        policy(
            r#"budgets: {usd_per_month: 10, models: {"openai/gpt-4o-*": {usd_per_month: 2}}}"#,
            r#"usd_per_day: 1, models: {"openai/gpt-4o": {usd_per_day: 0.3, soft_percent: 1}}"#,
        ),
        &redis,
        &clock,
    );
    // Undeclared: refused, since the budget per model could not be reserved.
    let d = a.check(&input()).await;
    let Decision::Deny { status, body, .. } = &d else {
        panic!("{d:?}")
    };
    assert_eq!(*status, 400);
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], "model_not_declared");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    // An alias is no declaration (its budgets per model are unknown here),
    // on a key that may use it.
    let any = Policy::from_yaml(&format!(
        "version: 1\ntenants:\n  acme: {{}}\nkeys:\n  - id: k1\n    tenant: acme\n    sha256: {}\n    budgets: {{models: {{\"openai/gpt-4o\": {{usd_per_day: 1}}}}}}\n",
        hash_key("tg-money")
    ))
    .unwrap();
    let d = authz(any, &redis, &clock).check(&declaring("fast")).await;
    assert!(
        matches!(&d, Decision::Deny { status: 400, body, .. } if body.contains("model_not_declared")),
        "{d:?}"
    );
    // Declared gpt-4o: reserved on the key's and tenant's budgets and on
    // the key's gpt-4o budget (the tenant's `openai/gpt-4o-*` does not match).
    let d = a.check(&declaring("openai/gpt-4o")).await;
    assert!(matches!(d, Decision::Allow { reserved: 356, .. }), "{d:?}");
    let h = headers(&d);
    assert_eq!(h["x-tollgate-budget-scope"], "key model openai/gpt-4o/day");
    assert!(
        h["x-tollgate-budget-warning"].contains("key model openai/gpt-4o/day"),
        "{h:?}"
    );
    // Declared gpt-4o-mini: the tenant's pattern matches, the key's does not.
    let d = a.check(&declaring("openai/gpt-4o-mini")).await;
    assert!(matches!(d, Decision::Allow { reserved: 356, .. }), "{d:?}");
    // 2,000 prompt (1,000 cached), 1,000 completion on gpt-4o: $0.01375.
    a.record_usage(&report("openai/gpt-4o", 2000, 1000, 1000, Some(356)))
        .await
        .unwrap();
    // 1,000 prompt (200 cached), 500 completion on gpt-4o-mini: $0.000435.
    a.record_usage(&report("openai/gpt-4o-mini", 1000, 200, 500, Some(356)))
        .await
        .unwrap();
    settle_leases(&a).await;
    assert_eq!(
        spent(&redis, "tg:{acme}:$d:2096-11-23:km:k1:openai/gpt-4o"),
        13_750_000
    );
    assert_eq!(
        spent(&redis, "tg:{acme}:$m:2096-11:tm:openai/gpt-4o-*"),
        435_000
    );
    assert_eq!(spent(&redis, "tg:{acme}:$d:2096-11-23:k:k1"), 14_185_000);
    assert_eq!(spent(&redis, "tg:{acme}:$m:2096-11:t"), 14_185_000);
    // The CLI's rows name every window, the per-model ones included.
    let p = a.policy();
    let rows = tollgate_authz::spend::rows(&p, "acme", None, ms("2096-11-23T12:00:00Z")).unwrap();
    let keys: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.scope.as_str(), r.key.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("tenant acme", "tg:{acme}:$m:2096-11:t"),
            (
                "tenant acme model openai/gpt-4o-*",
                "tg:{acme}:$m:2096-11:tm:openai/gpt-4o-*"
            ),
            ("key k1", "tg:{acme}:$d:2096-11-23:k:k1"),
            (
                "key k1 model openai/gpt-4o",
                "tg:{acme}:$d:2096-11-23:km:k1:openai/gpt-4o"
            ),
        ]
    );
    let table = tollgate_authz::spend::render(
        "acme",
        "Europe/Paris",
        &rows
            .iter()
            .map(|r| (r.clone(), Some(spent(&redis, &r.key))))
            .collect::<Vec<_>>(),
    );
    assert!(
        table.contains(
            "key k1 model openai/gpt-4o        day    2096-11-23         0.01375           0.30        0.28625"
        ),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_stay_within_a_model_budget() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2096-11-23T12:00:00Z")));
    // The key's whole-day budget is large; gpt-4o has $0.05 a day: at most
    // 14 requests reserving and costing $0.00356 each fit.
    let p = || {
        policy(
            "",
            r#"usd_per_day: 100, models: {"openai/gpt-4o": {usd_per_day: 0.05}}"#,
        )
    };
    let (a, b) = (authz(p(), &redis, &clock), authz(p(), &redis, &clock));
    let gpt_4o = || declaring("openai/gpt-4o");
    let counter = "tg:{acme}:$d:2096-11-23:km:k1:openai/gpt-4o";
    race(&redis, &a, &b, gpt_4o, "on model openai/gpt-4o", counter).await;
    // Another model is not held to gpt-4o's budget.
    let d = a.check(&declaring("openai/gpt-4o-mini")).await;
    assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
}

/// Redis key of the slot of rolling window `label` holding `at`.
fn slot(label: &str, at: &str, scope: &str) -> String {
    let r = tollgate_authz::rolling::Rolling::parse(label).unwrap();
    r.slot_key("acme", scope, r.slot_of(ms(at)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_window_frees_spend_as_its_slots_age_out() {
    let redis = RedisServer::start();
    // A future day, so no slot's expiry is already past on the real clock.
    let clock = Arc::new(AtomicI64::new(ms("2096-11-25T10:15:00Z")));
    let a = authz(
        policy("", "rolling: [{window: 6h, usd: 0.01, soft_percent: 50}]"),
        &redis,
        &clock,
    );
    // Each Check reserves $0.00356 (356 tokens at $10/M); the cap is $0.01.
    let d = a.check(&input()).await;
    assert!(matches!(d, Decision::Allow { reserved: 356, .. }), "{d:?}");
    assert_eq!(headers(&d)["x-tollgate-budget-scope"], "key/6h");
    // It costs exactly its reservation: 356 completion tokens of gpt-4o.
    a.record_usage(&report("openai/gpt-4o", 0, 0, 356, Some(356)))
        .await
        .unwrap();
    clock.store(ms("2096-11-25T12:30:00Z"), Ordering::SeqCst);
    let d = a.check(&input()).await;
    assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
    let h = headers(&d);
    assert_eq!(h["x-tollgate-budget-remaining-usd"], "0.00288");
    assert_eq!(
        h["x-tollgate-budget-warning"],
        "key/6h 71% used (soft cap 50%)"
    );
    // $0.00712 spent: a third reservation does not fit until the 10:00
    // slot leaves the window at 16:00.
    for at in ["2096-11-25T12:30:00Z", "2096-11-25T15:59:59.999Z"] {
        clock.store(ms(at), Ordering::SeqCst);
        let d = a.check(&input()).await;
        let Decision::Deny {
            status: 429,
            body,
            headers,
        } = &d
        else {
            panic!("{at}: {d:?}")
        };
        assert!(body.contains(r#""code":"budget_exceeded""#), "{body}");
        assert!(
            body.contains("$0.01 per 6h, $0.00288 left")
                && body.contains("resets at 2096-11-25T16:00:00Z"),
            "{body}"
        );
        let retry: u64 = headers
            .iter()
            .find(|(n, _)| *n == "retry-after")
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert_eq!(
            retry,
            ((ms("2096-11-25T16:00:00Z") - ms(at)) as u64).div_ceil(1000)
        );
    }
    clock.store(ms("2096-11-25T16:00:00Z"), Ordering::SeqCst);
    let d = a.check(&input()).await;
    assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
    // A short answer: 100 completion tokens cost $0.001, the rest of the
    // reservation goes back to its slot.
    a.record_usage(&report("openai/gpt-4o", 0, 0, 100, Some(356)))
        .await
        .unwrap();
    let k = "k:k1";
    assert_eq!(
        spent(&redis, &slot("6h", "2096-11-25T10:15:00Z", k)),
        3_560_000
    );
    assert_eq!(
        spent(&redis, &slot("6h", "2096-11-25T12:30:00Z", k)),
        3_560_000
    );
    assert_eq!(
        spent(&redis, &slot("6h", "2096-11-25T16:00:00Z", k)),
        1_000_000
    );
    // Each slot expires an hour after it has left the window (16:00's
    // slot leaves at 22:00).
    assert_expires_at(
        &redis,
        &slot("6h", "2096-11-25T16:00:00Z", k),
        "2096-11-25T23:00:00Z",
    );
    // The CLI sums the window's slots: $0.00456 at 16:00.
    let p = a.policy();
    let rows =
        tollgate_authz::spend::rows(&p, "acme", Some("k1"), ms("2096-11-25T16:00:00Z")).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].slots.len(), 6);
    let spent_now: i64 = rows[0].slots.iter().map(|s| spent(&redis, s)).sum();
    assert_eq!(spent_now, 4_560_000);
    let table = tollgate_authz::spend::render(
        "acme",
        "Europe/Paris",
        &[(rows[0].clone(), Some(spent_now))],
    );
    assert!(table.contains("key k1"), "{table}");
    assert!(table.contains("0.00456"), "{table}");
    // Its reset is the earliest instant a slot leaves the window.
    assert!(
        table.contains("key k1                   rolling 6h                 0.00456           0.01        0.00544  2096-11-25T17:00:00Z"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_stay_within_a_rolling_budget() {
    let redis = RedisServer::start();
    let clock = Arc::new(AtomicI64::new(ms("2096-11-25T12:00:00Z")));
    // $0.05 in 24 hours: at most 14 requests of $0.00356 fit.
    let p = || policy("", "rolling: [{window: 24h, usd: 0.05}]");
    let (a, b) = (authz(p(), &redis, &clock), authz(p(), &redis, &clock));
    let counter = slot("24h", "2096-11-25T12:00:00Z", "k:k1");
    race(&redis, &a, &b, input, "per 24h", &counter).await;
    // No lease on a rolling window: Redis holds exactly what was admitted.
    assert_eq!(spent(&redis, &counter), 14 * 3_560_000);
}

#[test]
fn a_bad_rolling_budget_is_refused_naming_its_field() {
    let bad = |b: &str| {
        Policy::from_yaml(&format!(
            "version: 1\ntenants:\n  acme: {{}}\nkeys:\n  - id: k1\n    tenant: acme\n    sha256: {}\n    budgets: {{{b}}}\n",
            hash_key("tg-money")
        ))
        .unwrap_err()
        .to_string()
    };
    let e = bad("rolling: [{window: 25h, usd: 1}]");
    assert!(
        e.contains("budgets.rolling[0].window") && e.contains("rolling window \"25h\""),
        "{e}"
    );
    let e = bad("rolling: [{window: 7d, usd: 0}]");
    assert!(e.contains("budgets.rolling[0].usd must be"), "{e}");
    let e = bad("rolling: [{window: 7d, usd: 1, soft_percent: 0}]");
    assert!(e.contains("budgets.rolling[0].soft_percent"), "{e}");
    let e = bad("rolling: [{window: 24h, usd: 1}, {window: 1d, usd: 2}]");
    assert!(
        e.contains("budgets.rolling[1].window \"1d\" repeats"),
        "{e}"
    );
    let e = bad("rolling: [{window: 24h, dollars: 1}]");
    assert!(e.contains("dollars"), "{e}");
}
