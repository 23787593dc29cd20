//! Reservations that fit the request and concurrency caps, against a real
//! Redis with two service instances: the answer reservation follows what
//! a key's requests declare, a top-up adds what a request needs beyond it
//! (or refuses it), a sequential client uses at least 90 % of a tokens/min
//! limit, concurrent clients with top-ups never pass T + one reservation;
//! `max_concurrent_requests` holds across instances for a key and its
//! tenant, a released slot frees at once (a Check at the cap waits for a
//! release on its way), renewals keep a slot, and slots nobody renews
//! expire.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{http1, metric, temp_policy, RedisServer};
use tollgate_authz::authz::{Authorizer, CheckInput, TopUpError};
use tollgate_authz::decision::Decision;
use tollgate_authz::metrics::Metrics;
use tollgate_authz::policy::{hash_key, Policy};
use tollgate_authz::server::{start, Running, ServeConfig};
use tollgate_authz::storage::{RedisStore, RedisStoreConfig};
use tollgate_wire::{OutputCover, SlotRef, TopUp, UsageReport};

type Instance = Authorizer<RedisStore>;

fn instance(redis: &RedisServer, policy: &str, slot_ttl_ms: u64) -> Instance {
    let mut cfg = RedisStoreConfig::new(redis.url());
    cfg.timeout = Duration::from_millis(250);
    let metrics = Arc::new(Metrics::new().unwrap());
    let store = RedisStore::new(&cfg)
        .unwrap()
        .with_call_counter(metrics.redis_calls.clone());
    Authorizer::new(Policy::from_yaml(policy).unwrap(), store, metrics).with_slot_ttl(slot_ttl_ms)
}

/// Tenant `t` (with `tenant` in its braces) and key `k` (`tg-k`, `key`
/// limits), plus key `k2` (`tg-k2`) of the same tenant without limits.
fn policy(key: &str, tenant: &str) -> String {
    format!(
        "version: 1\ntenants:\n  t: {{{tenant}}}\nkeys:\n  - id: k\n    tenant: t\n    sha256: {}\n    limits: {{{key}}}\n  - id: k2\n    tenant: t\n    sha256: {}\n",
        hash_key("tg-k"),
        hash_key("tg-k2"),
    )
}

fn input(key: &str, content_length: u64) -> CheckInput {
    CheckInput {
        authorization: Some(format!("Bearer {key}")),
        content_length: Some(content_length),
        ..Default::default()
    }
}

/// An admitted Check's reservation and answer part; panics on a denial.
fn reserved(d: &Decision) -> (u64, Option<OutputCover>) {
    match d {
        Decision::Allow {
            reserved, output, ..
        } => (*reserved, *output),
        other => panic!("not admitted: {other:?}"),
    }
}

fn report(reserved: u64, used: u64, need: Option<u64>) -> UsageReport {
    UsageReport {
        tenant: "t".into(),
        key_id: "k".into(),
        model: Some("openai/gpt-4o-mini".into()),
        prompt_tokens: used / 2,
        completion_tokens: used - used / 2,
        reserved: Some(reserved),
        output_limit: need,
        ..UsageReport::default()
    }
}

/// `tollgate_authz_<name>_total{<label>="<value>"}` in `text`.
fn counted(text: &str, name: &str, label: &str, value: &str) -> f64 {
    metric(
        text,
        &format!("tollgate_authz_{name}_total{{{label}=\"{value}\"}}"),
    )
}

fn top_up(reserved: u64, output: u64, need: u64) -> TopUp {
    TopUp {
        tenant: "t".into(),
        key_id: "k".into(),
        reserved,
        output,
        need,
        ..TopUp::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_reservation_follows_what_the_key_declares() {
    let redis = RedisServer::start();
    let p = policy("tokens_per_minute: 2000", "");
    let (a, b) = (instance(&redis, &p, 30_000), instance(&redis, &p, 30_000));
    // 100 bytes: 25 tokens of prompt, and the tenant's 256 for the answer.
    let d = a.check(&input("tg-k", 100)).await;
    let cover = OutputCover {
        reserved: 256,
        undeclared: 256,
    };
    assert_eq!(reserved(&d), (281, Some(cover)));
    let Decision::Allow { settle_now, .. } = d else {
        unreachable!()
    };
    assert!(settle_now, "2,000 tokens hold fewer than 128 reservations");
    // The answer declared 16: the next Checks reserve 16 for it.
    a.record_usage(&report(281, 20, Some(16))).await.unwrap();
    let learned = OutputCover {
        reserved: 16,
        undeclared: 256,
    };
    assert_eq!(
        reserved(&a.check(&input("tg-k", 100)).await),
        (41, Some(learned))
    );
    // Learned per instance: b has seen no report of this key.
    assert_eq!(
        reserved(&b.check(&input("tg-k", 100)).await),
        (281, Some(cover))
    );
    // An admitted top-up teaches its need at once...
    let t = b.top_up(&top_up(281, 256, 300)).await.unwrap();
    assert_eq!((t.reserved, t.refused), (325, None));
    assert_eq!(reserved(&b.check(&input("tg-k", 100)).await).0, 325);
    // ...a refused one nothing (it would lock the key's smaller requests
    // out of what is left).
    let t = b.top_up(&top_up(325, 300, 1900)).await.unwrap();
    assert!(t.refused.is_some());
    assert_eq!(reserved(&b.check(&input("tg-k", 100)).await).0, 325);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_up_adds_the_shortfall_or_refuses_it() {
    let redis = RedisServer::start();
    let p = policy("tokens_per_day: 2000", "reserve_completion_tokens: 16");
    let a = instance(&redis, &p, 30_000);
    let (r, _) = reserved(&a.check(&input("tg-k", 100)).await);
    assert_eq!(r, 41);
    let m = || a.metrics().render();
    // Covered: no store call.
    let calls = metric(&m(), "tollgate_authz_redis_calls_total{op=\"check\"}");
    let t = a.top_up(&top_up(41, 16, 16)).await.unwrap();
    assert_eq!((t.reserved, t.refused), (41, None));
    assert_eq!(
        metric(&m(), "tollgate_authz_redis_calls_total{op=\"check\"}"),
        calls
    );
    // 1,000 declared: 984 more.
    let t = a.top_up(&top_up(41, 16, 1000)).await.unwrap();
    assert_eq!((t.reserved, t.refused), (1025, None));
    // More than is left: refused, nothing taken, the client told when.
    let t = a.top_up(&top_up(41, 16, 1900)).await.unwrap();
    assert_eq!(t.reserved, 41);
    let refusal = t.refused.expect("refused");
    assert_eq!(
        (refusal.status, refusal.kind.as_str(), refusal.code.as_str()),
        (429, "tokens", "rate_limit_exceeded")
    );
    assert!(refusal.retry_after.is_some_and(|s| s >= 1));
    assert!(
        refusal.message.contains("tokens per day"),
        "{}",
        refusal.message
    );
    // Never past the smallest bucket: a need above 2,000 asks for the rest
    // of the bucket only (refused here, as it is not whole).
    let t = a.top_up(&top_up(41, 16, 1_000_000)).await.unwrap();
    assert!(t.refused.is_some());
    let text = m();
    let top_ups = |result| counted(&text, "top_ups", "result", result);
    assert_eq!(
        (top_ups("covered"), top_ups("added"), top_ups("refused")),
        (1.0, 1.0, 2.0)
    );
    assert_eq!(
        metric(&text, "tollgate_authz_checks_total"),
        1.0,
        "a top-up is no Check"
    );
    let unknown = TopUp {
        key_id: "nope".into(),
        ..top_up(41, 16, 1000)
    };
    assert!(matches!(
        a.top_up(&unknown).await,
        Err(TopUpError::UnknownKey(..))
    ));
}

/// One client sending requests one after the other (each declaring
/// `max_tokens` 16 and using 20 tokens), alternating over `instances`,
/// until the first refusal: the tokens it used.
async fn sequential(instances: &[&Instance]) -> u64 {
    let mut used = 0;
    for i in 0.. {
        let s = instances[i % instances.len()];
        let d = s.check(&input("tg-k", 100)).await;
        let Decision::Allow {
            reserved: mut r,
            output,
            ..
        } = d
        else {
            return used;
        };
        if output.is_some_and(|o| o.shortfall(Some(16)) > 0) {
            let t = s
                .top_up(&top_up(r, output.unwrap().reserved, 16))
                .await
                .unwrap();
            r = t.reserved;
        }
        s.record_usage(&report(r, 20, Some(16))).await.unwrap();
        used += 20;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_client_uses_at_least_90_percent_of_its_tokens_per_day() {
    // Per day: the refill during the test is a fraction of a token.
    const T: u64 = 2000;
    let redis = RedisServer::start();
    let p = policy(&format!("tokens_per_day: {T}"), "");
    let a = instance(&redis, &p, 30_000);
    let used = sequential(&[&a]).await;
    assert!(
        used as f64 >= 0.9 * T as f64 && used <= T,
        "used {used} of {T}"
    );
    // Alternating over two instances (each learns on its own).
    redis.cli(&["FLUSHALL"]);
    let (a, b) = (instance(&redis, &p, 30_000), instance(&redis, &p, 30_000));
    let used = sequential(&[&a, &b]).await;
    assert!(
        used as f64 >= 0.9 * T as f64 && used <= T,
        "used {used} of {T} over two instances"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_with_top_ups_never_pass_t_plus_one_reservation() {
    // Every request declares 50..=400 output tokens and uses all of it.
    const T: u64 = 40_000;
    let redis = RedisServer::start();
    let p = policy(
        &format!("tokens_per_day: {T}"),
        "reserve_completion_tokens: 100",
    );
    let a = Arc::new(instance(&redis, &p, 30_000));
    let b = Arc::new(instance(&redis, &p, 30_000));
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let (mut served, mut misses, mut n, mut largest) = (0, 0, i, 0);
            while misses < 3 {
                n = n.wrapping_mul(7).wrapping_add(3);
                let declared = 50 + n % 351;
                let refused = match s.check(&input("tg-k", 40)).await {
                    Decision::Allow {
                        reserved: r,
                        output: Some(o),
                        ..
                    } => {
                        let t = s.top_up(&top_up(r, o.reserved, declared)).await.unwrap();
                        largest = largest.max(t.reserved);
                        if t.refused.is_some() {
                            s.record_usage(&report(t.reserved, 0, None)).await.unwrap();
                            true
                        } else {
                            let used = 10 + declared;
                            s.record_usage(&report(t.reserved, used, Some(declared)))
                                .await
                                .unwrap();
                            served += used;
                            false
                        }
                    }
                    Decision::Deny { status: 429, .. } => true,
                    other => panic!("{other:?}"),
                };
                if refused {
                    misses += 1;
                    tokio::time::sleep(Duration::from_millis(1100)).await;
                }
            }
            (served, largest)
        }));
    }
    let (mut served, mut largest) = (0, 0);
    for t in tasks {
        let (s, l) = t.await.unwrap();
        served += s;
        largest = largest.max(l);
    }
    assert!(
        served <= T + largest + 5 && served as f64 >= 0.9 * T as f64,
        "served {served} tokens of a budget of {T} (largest reservation {largest})"
    );
}

/// `n` Checks of `key` at once, spread over `instances`: the slots of
/// those admitted, and the denials.
async fn at_once(
    instances: &[&Arc<Instance>],
    key: &str,
    n: usize,
) -> (Vec<String>, Vec<Decision>) {
    let mut tasks = Vec::new();
    for i in 0..n {
        let s = Arc::clone(instances[i % instances.len()]);
        let key = key.to_string();
        tasks.push(tokio::spawn(async move { s.check(&input(&key, 10)).await }));
    }
    let (mut slots, mut denied) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            Decision::Allow { slot, .. } => slots.push(slot.expect("a slot").id),
            d => denied.push(d),
        }
    }
    (slots, denied)
}

fn release(key_id: &str, slot: &str) -> UsageReport {
    UsageReport {
        tenant: "t".into(),
        key_id: key_id.into(),
        slot: Some(slot.into()),
        ..UsageReport::default()
    }
}

fn body(d: &Decision) -> String {
    match d {
        Decision::Deny {
            status: 429,
            body,
            headers,
        } => {
            assert!(
                headers.contains(&("retry-after", "1".to_string())),
                "{headers:?}"
            );
            body.clone()
        }
        other => panic!("not a 429: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_cap_holds_across_two_instances_for_a_key_and_its_tenant() {
    let redis = RedisServer::start();
    let p = policy(
        "max_concurrent_requests: 3",
        "limits: {max_concurrent_requests: 5}",
    );
    let a = Arc::new(instance(&redis, &p, 30_000));
    let b = Arc::new(instance(&redis, &p, 30_000));
    let (held, denied) = at_once(&[&a, &b], "tg-k", 10).await;
    assert_eq!((held.len(), denied.len()), (3, 7));
    let msg = body(&denied[0]);
    assert!(msg.contains("concurrency_limit_exceeded"), "{msg}");
    assert!(
        msg.contains("Concurrency limit reached for key k: 3 requests in flight, limit 3."),
        "{msg}"
    );
    // The tenant's cap counts every key: 2 more for k2, then none.
    let (held2, denied2) = at_once(&[&a, &b], "tg-k2", 4).await;
    assert_eq!((held2.len(), denied2.len()), (2, 2));
    assert!(body(&denied2[0]).contains("for tenant t: 5 requests in flight, limit 5."));
    // A release on either instance frees a slot at once.
    b.record_usage(&release("k", &held[0])).await.unwrap();
    let (again, _) = at_once(&[&a], "tg-k", 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(redis.cli(&["ZCARD", "tg:{t}:cc:k:k"]), "3");
    assert_eq!(redis.cli(&["ZCARD", "tg:{t}:cc:t"]), "5");
    // Everything released: every set empty, and each still expires.
    for s in held[1..].iter().chain(&again) {
        a.record_usage(&release("k", s)).await.unwrap();
    }
    for s in &held2 {
        b.record_usage(&release("k2", s)).await.unwrap();
    }
    for set in ["tg:{t}:cc:k:k", "tg:{t}:cc:k:k2", "tg:{t}:cc:t"] {
        assert_eq!(redis.cli(&["ZCARD", set]), "0", "{set}");
    }
    for k in redis.cli(&["KEYS", "*"]).lines() {
        let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
        assert!(ttl > 0, "{k} has no TTL ({ttl})");
    }
    let denials = |scope: &str| {
        [&a, &b]
            .iter()
            .map(|s| {
                metric(
                    &s.metrics().render(),
                    &format!("tollgate_authz_denials_total{{limit=\"concurrent_requests\",period=\"in_flight\",scope=\"{scope}\",tenant=\"t\"}}"),
                )
            })
            .sum::<f64>()
    };
    assert_eq!((denials("key"), denials("tenant")), (7.0, 2.0));
    // Each Check counted once: admitted when its slot was taken.
    let sum = |name: &str| {
        [&a, &b]
            .iter()
            .map(|s| metric(&s.metrics().render(), name))
            .sum::<f64>()
    };
    assert_eq!(
        sum("tollgate_authz_decisions_total{reason=\"no_limits\",result=\"allowed\"}"),
        6.0
    );
    assert_eq!(
        sum("tollgate_authz_decisions_total{reason=\"concurrency_limited\",result=\"denied\"}"),
        9.0
    );
    assert_eq!(sum("tollgate_authz_checks_total"), 15.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_at_the_cap_waits_for_a_release_on_its_way() {
    let redis = RedisServer::start();
    let p = policy("max_concurrent_requests: 1, requests_per_minute: 10", "");
    let a = Arc::new(instance(&redis, &p, 30_000));
    let (held, _) = at_once(&[&a], "tg-k", 1).await;
    let releaser = {
        let a = Arc::clone(&a);
        let slot = held[0].clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15)).await;
            a.record_usage(&release("k", &slot)).await.unwrap();
        })
    };
    let t = Instant::now();
    let (next, _) = at_once(&[&a], "tg-k", 1).await;
    releaser.await.unwrap();
    assert_eq!(next.len(), 1, "admitted once the release landed");
    assert!(t.elapsed() < Duration::from_millis(45), "{:?}", t.elapsed());
    // Nobody releases: refused after the wait, and its request unit given
    // back (2 admitted of 10, not 3).
    let d = a.check(&input("tg-k", 10)).await;
    body(&d);
    a.record_usage(&release("k", &next[0])).await.unwrap();
    let Decision::Allow { rate_headers, .. } = a.check(&input("tg-k", 10)).await else {
        panic!("admitted")
    };
    let remaining = rate_headers
        .iter()
        .find(|(n, _)| *n == "x-ratelimit-remaining-requests")
        .map(|(_, v)| v.clone());
    assert_eq!(remaining.as_deref(), Some("7"), "3 admitted of 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_slots_stay_and_slots_nobody_renews_expire() {
    let redis = RedisServer::start();
    let p = policy("max_concurrent_requests: 2", "");
    let a = Arc::new(instance(&redis, &p, 1000));
    let (held, _) = at_once(&[&a], "tg-k", 2).await;
    // One is renewed every 300 ms, the other never (its gateway died).
    let refs = [SlotRef {
        tenant: "t".into(),
        key_id: "k".into(),
        slot: held[0].clone(),
    }];
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(a.renew_slots(&refs).await, 1);
    }
    // 1.5 s on: the renewed one holds, the other expired.
    let (more, denied) = at_once(&[&a], "tg-k", 2).await;
    assert_eq!((more.len(), denied.len()), (1, 1));
    // Renewing an expired slot does not take it back.
    let gone = [SlotRef {
        slot: held[1].clone(),
        ..refs[0].clone()
    }];
    assert_eq!(a.renew_slots(&gone).await, 0);
    // Nobody renews any more: after the ttl every slot is free.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (all, _) = at_once(&[&a], "tg-k", 2).await;
    assert_eq!(all.len(), 2);
    let text = a.metrics().render();
    let slots = |op| counted(&text, "slots", "op", op);
    assert_eq!((slots("renewed"), slots("expired")), (5.0, 1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_capped_key_follows_its_tenants_failure_mode() {
    let mut redis = RedisServer::start();
    let p = format!(
        "version: 1\ntenants:\n  open: {{}}\n  closed: {{redis_failure: closed}}\nkeys:\n  - {{id: o, tenant: open, sha256: {}, limits: {{max_concurrent_requests: 1}}}}\n  - {{id: c, tenant: closed, sha256: {}, limits: {{max_concurrent_requests: 1}}}}\n",
        hash_key("tg-o"),
        hash_key("tg-c")
    );
    let a = instance(&redis, &p, 30_000);
    redis.kill();
    for _ in 0..2 {
        match a.check(&input("tg-o", 10)).await {
            Decision::Allow { slot: None, .. } => {}
            other => panic!("fail-open admits without a slot: {other:?}"),
        }
    }
    assert!(matches!(
        a.check(&input("tg-c", 10)).await,
        Decision::Deny { status: 503, .. }
    ));
}

/// A service with the usage token `secret`.
async fn serve(redis: &RedisServer, policy: &std::path::Path) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef-secret").unwrap();
    let mut cfg = ServeConfig::new(policy);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = redis.url();
    cfg.redis_timeout = Duration::from_millis(250);
    cfg.usage_token = Some(tollgate_authz::usage_token::UsageToken::from_file(&token).unwrap());
    start(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_ups_and_renewals_are_taken_from_the_gateway_only() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&policy(
        "tokens_per_day: 2000",
        "reserve_completion_tokens: 16",
    ));
    let svc = serve(&redis, &path).await;
    let addr = svc.http_addr.to_string();
    let json = ("content-type", "application/json");
    let token = ("x-tollgate-usage-token", "0123456789abcdef-secret");
    let up = r#"{"tenant":"t","key_id":"k","reserved":41,"output":16,"need":1000}"#;
    let (status, _, body) = http1(&addr, "POST", "/v1/reserve", &[json], up).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("usage_unauthorized"));
    let (status, _, body) = http1(&addr, "POST", "/v1/reserve", &[json, token], up).await;
    assert_eq!((status, body.as_str()), (200, r#"{"reserved":1025}"#));
    let (status, _, body) = http1(&addr, "POST", "/v1/reserve", &[json, token], "{}").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_top_up"), "{body}");
    let renew = r#"[{"tenant":"t","key_id":"k","slot":"abc1"}]"#;
    let (status, _, _) = http1(&addr, "POST", "/v1/slots/renew", &[json], renew).await;
    assert_eq!(status, 401);
    let (status, _, _) = http1(&addr, "POST", "/v1/slots/renew", &[json, token], renew).await;
    assert_eq!(status, 204);
    let (status, _, _) = http1(&addr, "POST", "/v1/slots/renew", &[json, token], "[{}]").await;
    assert_eq!(status, 400);
    svc.shutdown().await;
}
