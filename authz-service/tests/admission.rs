//! Admission with leases, against real Redis (one server, and a 3-primary
//! Redis Cluster): two service instances enforce one limit exactly under
//! 16 concurrent clients, token reservations settle, policy changes reach
//! every instance within 1 s, an instance killed mid-window loses at most
//! its lease, an exhausted key stays refused while Redis is down, and usage
//! reports sent during an outage are applied when it returns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{
    check_key, client, client_headers, http1, http_status, metric, start_service, temp_policy,
    AuthzClient, RedisCluster, RedisServer,
};
use tollgate_authz::policy::hash_key;
use tollgate_authz::server::{start, Running, ServeConfig};
use tollgate_authz::storage::AnyStore;

const CLIENTS: usize = 16;

fn one_key_policy(limits: &str, tenant_extra: &str) -> String {
    format!(
        "version: 1\ntenants:\n  shared: {{{tenant_extra}}}\nkeys:\n  - id: k\n    tenant: shared\n    sha256: {}\n    limits: {{{limits}}}\n",
        hash_key("tg-shared")
    )
}

/// Redis calls per Check of one instance, from its own metrics.
fn calls_per_check(s: &Running) -> (f64, f64) {
    let text = s.authorizer.metrics().render();
    let calls: f64 = text
        .lines()
        .filter(|l| l.starts_with("tollgate_authz_redis_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    (calls, metric(&text, "tollgate_authz_checks_total"))
}

/// `CLIENTS` concurrent clients, half on each instance, each sending
/// `per_client` Checks back to back; the number admitted.
async fn hammer(a: &Running, b: &Running, per_client: usize) -> usize {
    let (ca, cb) = (client(a).await, client(b).await);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let mut c: AuthzClient = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..per_client {
                match http_status(&check_key(&mut c, "tg-shared").await.unwrap()) {
                    200 => admitted += 1,
                    429 => {}
                    other => panic!("unexpected status {other}"),
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    admitted
}

/// Wait until the instance reaches Redis (a cluster connects in the
/// background).
async fn wait_connected(s: &Running) {
    let AnyStore::Redis(store) = s.authorizer.store() else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.load_script().await.is_err() {
        assert!(Instant::now() < deadline, "never connected to redis");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn exact_under_concurrency(redis_url: &str) {
    // A daily limit: the refill during the test is a fraction of one unit.
    const N: usize = 2000;
    let (_dir, path) = temp_policy(&one_key_policy(&format!("requests_per_day: {N}"), ""));
    let a = start_service(&path, redis_url).await;
    let b = start_service(&path, redis_url).await;
    for s in [&a, &b] {
        wait_connected(s).await;
    }
    let admitted = hammer(&a, &b, 2 * N / CLIENTS).await;
    assert!(
        admitted as f64 >= N as f64 * 0.99 && admitted <= N + 1,
        "admitted {admitted} of {} (limit {N})",
        2 * N
    );
    // Most Checks never reached Redis, and none failed open.
    for s in [&a, &b] {
        let (calls, checks) = calls_per_check(s);
        assert!(
            calls / checks < 0.3,
            "{calls} Redis calls for {checks} checks"
        );
        let text = s.authorizer.metrics().render();
        assert_eq!(metric(&text, "tollgate_authz_fail_open_total"), 0.0);
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_admit_n_under_16_clients() {
    let redis = RedisServer::start();
    exact_under_concurrency(&redis.url()).await;
    // Every key written has a TTL (leases add no keys).
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(!keys.is_empty());
    for k in keys.lines() {
        let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
        assert!(ttl > 0, "{k} has no TTL ({ttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_redis_cluster_admit_n_under_16_clients() {
    let cluster = RedisCluster::start();
    exact_under_concurrency(&cluster.url()).await;
    for node in &cluster.nodes {
        for k in node.cli(&["KEYS", "*"]).lines().filter(|k| !k.is_empty()) {
            let ttl: i64 = node.cli(&["PTTL", k]).parse().unwrap();
            assert!(ttl > 0, "{k} has no TTL ({ttl})");
        }
    }
}

async fn post_usage(s: &Running, body: &str) -> u16 {
    let json = [("content-type", "application/json")];
    http1(&s.http_addr.to_string(), "POST", "/v1/usage", &json, body)
        .await
        .0
}

fn usage(reserved: u64, completion: u64) -> String {
    format!(
        r#"{{"tenant":"shared","key_id":"k","model":"m","prompt_tokens":0,"completion_tokens":{completion},"reserved":{reserved}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_answer_is_refunded_and_a_long_one_charged() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&one_key_policy(
        "tokens_per_day: 10000",
        "reserve_completion_tokens: 300",
    ));
    let svc = start_service(&path, &redis.url()).await;
    let mut c = client(&svc).await;
    let remaining = |r: &_| -> u64 {
        client_headers(r)["x-ratelimit-remaining-tokens"]
            .parse()
            .unwrap()
    };

    let r = check_key(&mut c, "tg-shared").await.unwrap();
    assert_eq!(remaining(&r), 9700, "300 reserved");
    // The answer used 50: 250 come back.
    assert_eq!(post_usage(&svc, &usage(300, 50)).await, 204);
    let r = check_key(&mut c, "tg-shared").await.unwrap();
    assert_eq!(remaining(&r), 10000 - 50 - 300);
    // The answer used 700: 400 more are charged.
    assert_eq!(post_usage(&svc, &usage(300, 700)).await, 204);
    let r = check_key(&mut c, "tg-shared").await.unwrap();
    assert_eq!(remaining(&r), 10000 - 50 - 700 - 300);
    // A report of an older filter (no reservation) is debited in full.
    assert_eq!(
        post_usage(
            &svc,
            r#"{"tenant":"shared","key_id":"k","prompt_tokens":0,"completion_tokens":100}"#
        )
        .await,
        204
    );
    let r = check_key(&mut c, "tg-shared").await.unwrap();
    assert_eq!(remaining(&r), 10000 - 50 - 700 - 100 - 300 - 300);
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_serves_at_most_t_plus_one_reservation() {
    // T tokens a day; every request reserves 100 and uses 10..=100.
    const T: u64 = 40_000;
    const R: u64 = 100;
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&one_key_policy(
        &format!("tokens_per_day: {T}"),
        &format!("reserve_completion_tokens: {R}"),
    ));
    let a = Arc::new(start_service(&path, &redis.url()).await);
    let b = Arc::new(start_service(&path, &redis.url()).await);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut c = client(&s).await;
            let mut served = 0;
            let mut misses = 0;
            let mut n = i as u64;
            // Back to back; after a refusal wait out the cached refusal
            // (refunds may have refilled the bucket); stop after three.
            while misses < 3 {
                match http_status(&check_key(&mut c, "tg-shared").await.unwrap()) {
                    200 => {
                        n = n.wrapping_mul(7).wrapping_add(3);
                        let used = 10 + n % 91;
                        assert_eq!(post_usage(&s, &usage(R, used)).await, 204);
                        served += used;
                    }
                    429 => {
                        misses += 1;
                        tokio::time::sleep(Duration::from_millis(1100)).await;
                    }
                    other => panic!("unexpected status {other}"),
                }
            }
            served
        }));
    }
    let mut served = 0;
    for t in tasks {
        served += t.await.unwrap();
    }
    // The refill of a day's budget during the test is a few tokens.
    assert!(
        served <= T + R + 5 && served as f64 >= 0.9 * T as f64,
        "served {served} tokens of a budget of {T}"
    );
    for s in [a, b] {
        Arc::try_unwrap(s).ok().unwrap().shutdown().await;
    }
}

/// A service with the default reload interval (500 ms).
async fn start_default(policy: &Path, redis_url: &str) -> Running {
    let mut cfg = ServeConfig::new(policy);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = redis_url.to_string();
    cfg.redis_timeout = Duration::from_millis(250);
    start(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_and_a_removed_key_apply_on_every_instance_within_a_second() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&one_key_policy("requests_per_minute: 100000", ""));
    let a = start_default(&path, &redis.url()).await;
    let b = start_default(&path, &redis.url()).await;
    // Warm up: both instances hold leases.
    assert_eq!(hammer(&a, &b, 20).await, 20 * CLIENTS);
    assert!(!a.authorizer.leases().is_empty() && !b.authorizer.leases().is_empty());

    // The same bucket, lowered from 100,000 to 10 a minute: the 320 taken
    // (and the leases) are 0.2 s of the new refill, so about 10 are left.
    std::fs::write(&path, one_key_policy("requests_per_minute: 10", "")).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let admitted = hammer(&a, &b, 5).await;
    assert!(
        (1..=10).contains(&admitted),
        "admitted {admitted} under a limit of 10"
    );

    std::fs::write(&path, "version: 1\ntenants:\n  shared: {}\nkeys: []\n").unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for s in [&a, &b] {
        let mut c = client(s).await;
        assert_eq!(
            http_status(&check_key(&mut c, "tg-shared").await.unwrap()),
            401
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_key_stays_refused_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let (_dir, path) = temp_policy(&one_key_policy("requests_per_minute: 5", ""));
    let svc = start_service(&path, &redis.url()).await;
    let mut c = client(&svc).await;
    for _ in 0..5 {
        assert_eq!(
            http_status(&check_key(&mut c, "tg-shared").await.unwrap()),
            200
        );
    }
    assert_eq!(
        http_status(&check_key(&mut c, "tg-shared").await.unwrap()),
        429
    );
    redis.kill();
    // Past the 1 s refusal cache, Redis unreachable: still refused, never
    // admitted by the fail-open policy (the bucket cannot have refilled).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..5 {
        let r = check_key(&mut c, "tg-shared").await.unwrap();
        assert_eq!(http_status(&r), 429);
    }
    let text = svc.authorizer.metrics().render();
    assert_eq!(metric(&text, "tollgate_authz_fail_open_total"), 0.0);
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_sent_during_an_outage_is_applied_when_redis_returns() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let (_dir, path) = temp_policy(&one_key_policy("tokens_per_minute: 100000", ""));
    let svc = start_service(&path, &redis.url()).await;
    let tokens = || {
        metric(
            &svc.authorizer.metrics().render(),
            r#"tollgate_authz_usage_tokens_total{tenant="shared"}"#,
        )
    };
    assert_eq!(post_usage(&svc, &usage(0, 10)).await, 204);
    assert_eq!(tokens(), 10.0);
    redis.kill();
    for _ in 0..3 {
        assert_eq!(post_usage(&svc, &usage(0, 100)).await, 202);
    }
    let text = svc.authorizer.metrics().render();
    assert_eq!(metric(&text, "tollgate_authz_usage_queued"), 3.0);
    assert_eq!(tokens(), 10.0, "nothing counted as debited while queued");

    let redis = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokens() < 310.0 {
        assert!(Instant::now() < deadline, "queued usage never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = svc.authorizer.metrics().render();
    assert_eq!(metric(&text, "tollgate_authz_usage_queued"), 0.0);
    assert_eq!(metric(&text, "tollgate_authz_usage_dropped_total"), 0.0);
    // The restarted (empty) Redis holds the 300 tokens of the outage.
    let full: i64 = redis.cli(&["GET", "tg:{shared}:tm:k:k"]).parse().unwrap();
    assert!(full > 0);
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_mid_window_loses_at_most_its_lease() {
    use std::process::{Command, Stdio};

    const N: usize = 1000;
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&one_key_policy(&format!("requests_per_day: {N}"), ""));
    let (grpc, http) = (common::free_port(), common::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-authz"))
        .args(["serve", "--policy"])
        .arg(&path)
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .args(["--redis-url", &redis.url(), "--redis-timeout-ms", "250"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        if let Ok(c) = AuthzClient::connect(format!("http://127.0.0.1:{grpc}")).await {
            break c;
        }
        assert!(Instant::now() < deadline, "the service did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // 100 Checks back to back: the instance now holds a lease.
    const USED: usize = 100;
    for _ in 0..USED {
        assert_eq!(
            http_status(&check_key(&mut c, "tg-shared").await.unwrap()),
            200
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // Another instance gets what is left, minus at most the dead one's
    // lease: an eighth of what was left at its last grant.
    let b = start_service(&path, &redis.url()).await;
    let mut c = client(&b).await;
    let mut admitted = 0;
    for _ in 0..N {
        if http_status(&check_key(&mut c, "tg-shared").await.unwrap()) == 200 {
            admitted += 1;
        }
    }
    let lost = N - USED - admitted;
    // It did hold a lease (1..), and lost no more than the bound.
    assert!(
        (1..=(N - USED) / 8).contains(&lost),
        "lost {lost} units with the killed instance"
    );
    b.shutdown().await;
}
