//! Redis killed mid-test: fail-open keeps serving (counted in metrics), a
//! fail-closed tenant is refused with 503, and serving recovers when Redis
//! returns. Authentication never depends on Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;

use crate::common::{
    check_key, client, client_headers, http_status, metric, repo_policy, start_service, RedisServer,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_open_then_recovers() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let svc = start_service(&repo_policy(), &redis.url()).await;
    let mut c = client(&svc).await;
    let metrics = || svc.authorizer.metrics().render();

    let r = check_key(&mut c, "tg-demo-key").await.unwrap();
    assert_eq!(http_status(&r), 200);
    assert!(client_headers(&r).contains_key("x-ratelimit-remaining-requests"));

    redis.kill();

    // Fail-open: allowed, without rate-limit headers, counted.
    for _ in 0..5 {
        let r = check_key(&mut c, "tg-demo-key").await.unwrap();
        assert_eq!(http_status(&r), 200);
        assert!(!client_headers(&r).contains_key("x-ratelimit-remaining-requests"));
    }
    let m = metrics();
    assert_eq!(metric(&m, "tollgate_authz_fail_open_total"), 5.0);
    assert_eq!(
        metric(
            &m,
            r#"tollgate_authz_decisions_total{reason="fail_open",result="allowed"}"#
        ),
        5.0
    );
    let errors: f64 = ["timeout", "unavailable"]
        .iter()
        .map(|e| {
            metric(
                &m,
                &format!(r#"tollgate_authz_redis_errors_total{{error="{e}",op="check"}}"#),
            )
        })
        .sum();
    assert_eq!(errors, 5.0);

    // Authentication still works without Redis.
    assert_eq!(
        http_status(&check_key(&mut c, "tg-wrong").await.unwrap()),
        401
    );

    // A fail-closed tenant is refused with 503 and an OpenAI body that
    // names the budget store, not the authorization service.
    let r = check_key(&mut c, "tg-test-closed").await.unwrap();
    assert_eq!(http_status(&r), 503);
    let body: serde_json::Value = match &r.http_response {
        Some(HttpResponse::DeniedResponse(d)) => serde_json::from_str(&d.body).unwrap(),
        other => panic!("not denied: {other:?}"),
    };
    assert_eq!(body["error"]["code"], "rate_limiter_unavailable");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The budget store (Redis) is unavailable"),
        "{msg}"
    );
    assert_eq!(
        client_headers(&r).get("retry-after").map(String::as_str),
        Some("1")
    );

    // Redis returns on the same port: serving with real decisions resumes.
    let _redis = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = check_key(&mut c, "tg-demo-key").await.unwrap();
        assert_eq!(http_status(&r), 200);
        if client_headers(&r).contains_key("x-ratelimit-remaining-requests") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "did not recover after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        http_status(&check_key(&mut c, "tg-test-closed").await.unwrap()),
        200
    );
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_mode_answers_unavailable() {
    let yaml = format!(
        "version: 1\ndefaults:\n  redis_failure: envoy\ntenants:\n  t: {{limits: {{requests_per_minute: 10}}}}\nkeys:\n  - id: k\n    tenant: t\n    sha256: {}\n",
        tollgate_authz::policy::hash_key("tg-envoy")
    );
    let (_dir, path) = common::temp_policy(&yaml);
    // Nothing listens on this port.
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    let svc = start_service(&path, &url).await;
    let mut c = client(&svc).await;
    let err = check_key(&mut c, "tg-envoy").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    // Authentication failures are still answered without Redis.
    assert_eq!(
        http_status(&check_key(&mut c, "tg-nope").await.unwrap()),
        401
    );
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_without_redis_and_connects_when_it_appears() {
    let port = common::free_port();
    let svc = start_service(&repo_policy(), &format!("redis://127.0.0.1:{port}")).await;
    let mut c = client(&svc).await;
    // No Redis yet: authentication works, limits fail open.
    let r = check_key(&mut c, "tg-demo-key").await.unwrap();
    assert_eq!(http_status(&r), 200);
    assert!(!client_headers(&r).contains_key("x-ratelimit-remaining-requests"));
    assert_eq!(
        http_status(&check_key(&mut c, "tg-nope").await.unwrap()),
        401
    );

    let _redis = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = check_key(&mut c, "tg-demo-key").await.unwrap();
        if client_headers(&r).contains_key("x-ratelimit-remaining-requests") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never connected to the late Redis"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    svc.shutdown().await;
}
