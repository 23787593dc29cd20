//! Full gRPC tests over 127.0.0.1:0: ext_authz Check, grpc.health.v1, and
//! the HTTP side, against a real redis-server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::CheckResponse;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::common::{
    check_key, client, header_map, http1, repo_policy, request_with, start_service, RedisServer,
};

/// (status code, header map, body) of a response's HTTP part.
fn denied(resp: &CheckResponse) -> (i32, HashMap<String, String>, serde_json::Value) {
    match &resp.http_response {
        Some(HttpResponse::DeniedResponse(d)) => (
            d.status.as_ref().map(|s| s.code).unwrap_or(0),
            header_map(&d.headers),
            serde_json::from_str(&d.body).unwrap(),
        ),
        other => panic!("expected a denied response, got {other:?}"),
    }
}

fn ok_headers(
    resp: &CheckResponse,
) -> (
    HashMap<String, String>,
    Vec<String>,
    HashMap<String, String>,
) {
    assert_eq!(resp.status.as_ref().map(|s| s.code), Some(0));
    match &resp.http_response {
        Some(HttpResponse::OkResponse(ok)) => {
            for h in ok.headers.iter().chain(&ok.response_headers_to_add) {
                assert_eq!(
                    h.append_action,
                    HeaderAppendAction::OverwriteIfExistsOrAdd as i32
                );
                #[allow(deprecated)]
                let append = h.append;
                assert_eq!(append, None);
            }
            (
                header_map(&ok.headers),
                ok.headers_to_remove.clone(),
                header_map(&ok.response_headers_to_add),
            )
        }
        other => panic!("expected an OK response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_over_grpc_with_redis() {
    let redis = RedisServer::start();
    let svc = start_service(&repo_policy(), &redis.url()).await;
    let mut client = client(&svc).await;

    // Health: SERVING for the overall server and the Authorization service.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", svc.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.auth.v3.Authorization"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            ServingStatus::Serving as i32,
            "service {service:?}"
        );
    }

    // Missing key: 401 invalid_api_key, OpenAI body, JSON content type.
    let r = client.check(request_with(&[])).await.unwrap().into_inner();
    let (status, hs, body) = denied(&r);
    assert_eq!(status, 401);
    assert_eq!(
        hs.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(body["error"]["param"], serde_json::Value::Null);

    // Unknown key: 401, and the key never appears in the body.
    let r = check_key(&mut client, "tg-not-a-key").await.unwrap();
    let (status, _, body) = denied(&r);
    assert_eq!(status, 401);
    assert!(!body.to_string().contains("tg-not-a-key"));

    // Demo key: OK, identity headers overwrite, key headers removed, rate headers.
    let r = client
        .check(request_with(&[
            ("authorization", "Bearer tg-demo-key"),
            ("x-tollgate-tenant", "forged"),
        ]))
        .await
        .unwrap()
        .into_inner();
    let (req, removed, resp) = ok_headers(&r);
    assert_eq!(
        req.get("x-tollgate-tenant").map(String::as_str),
        Some("demo")
    );
    assert_eq!(
        req.get("x-tollgate-key-id").map(String::as_str),
        Some("demo-key")
    );
    assert_eq!(req.get("x-tollgate-models").map(String::as_str), Some("*"));
    assert_eq!(
        removed,
        vec![
            "authorization".to_string(),
            "x-api-key".to_string(),
            // No cap applies: a client's slot header never reaches the filter.
            "x-tollgate-slot".to_string()
        ]
    );
    assert_eq!(
        resp.get("x-ratelimit-limit-requests").map(String::as_str),
        Some("1000000")
    );
    assert_eq!(
        resp.get("x-ratelimit-remaining-requests")
            .map(String::as_str),
        Some("999999")
    );
    assert_eq!(
        resp.get("x-ratelimit-limit-tokens").map(String::as_str),
        Some("10000000000")
    );
    assert_eq!(
        resp.get("x-ratelimit-remaining-tokens").map(String::as_str),
        Some("9999999744"),
        "the default reservation of 256 tokens is taken"
    );
    assert_eq!(
        req.get("x-tollgate-reserved").map(String::as_str),
        Some("256;o=256;u=256"),
        "256 in all, all of it for the answer, which is what a request declaring no limit needs"
    );
    assert_eq!(
        resp.get("x-ratelimit-reset-tokens").map(String::as_str),
        Some("1ms")
    );
    assert!(resp.contains_key("x-ratelimit-reset-requests"));

    // x-api-key works too.
    let r = client
        .check(request_with(&[("x-api-key", "tg-demo-key")]))
        .await
        .unwrap()
        .into_inner();
    ok_headers(&r);

    // RPM 5: five admitted with falling remaining, the sixth 429 naming the limit.
    for i in 0..5u32 {
        let r = check_key(&mut client, "tg-test-rpm5").await.unwrap();
        let (_, _, resp) = ok_headers(&r);
        assert_eq!(resp["x-ratelimit-limit-requests"], "5");
        assert_eq!(resp["x-ratelimit-remaining-requests"], (4 - i).to_string());
    }
    let r = check_key(&mut client, "tg-test-rpm5").await.unwrap();
    let (status, hs, body) = denied(&r);
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "requests");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "Rate limit reached for key rpm5-key on requests per minute: limit 5, remaining 0."
        ),
        "{msg}"
    );
    let retry: u64 = hs["retry-after"].parse().unwrap();
    assert!((11..=12).contains(&retry), "retry-after {retry}");
    assert_eq!(hs["x-ratelimit-limit-requests"], "5");
    assert_eq!(hs["x-ratelimit-remaining-requests"], "0");
    assert_eq!(hs["content-type"], "application/json");

    // TPM 100: the Check reserves the whole 100 (the reservation is capped at
    // the bucket); a usage report of 150 tokens settling that reservation
    // drives it to -50, then it is refused with type "tokens". A whole
    // bucket has no answer part to top up, and holds under 128
    // reservations: the filter settles it at once (`;now`).
    let (req, _, resp) = ok_headers(&check_key(&mut client, "tg-test-tpm").await.unwrap());
    assert_eq!(req["x-tollgate-reserved"], "100;now");
    assert_eq!(resp["x-ratelimit-remaining-tokens"], "0");
    let http = svc.http_addr.to_string();
    let status = post_usage(&http, r#"{"tenant":"test-tpm","key_id":"tpm-key","model":"openai/gpt-4o-mini","prompt_tokens":100,"completion_tokens":50,"reserved":100}"#).await;
    assert_eq!(status, 204);
    let r = check_key(&mut client, "tg-test-tpm").await.unwrap();
    let (status, hs, body) = denied(&r);
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "tokens");
    assert_eq!(hs["x-ratelimit-remaining-tokens"], "0");
    // The next request needs its 100-token reservation: 150 tokens away,
    // 90 s at 100/min.
    let retry: u64 = hs["retry-after"].parse().unwrap();
    assert!((89..=90).contains(&retry), "retry-after {retry}");
    // Redis holds the debit, with a TTL.
    // Stored: the time the bucket is full again, in µs on Redis's clock:
    // level -50 of 100/min is 150 tokens = 90 s away.
    let full: i64 = redis
        .cli(&["GET", "tg:{test-tpm}:tm:k:tpm-key"])
        .parse()
        .unwrap();
    let time = redis.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<i64>().unwrap());
    let now_us = parts.next().unwrap() * 1_000_000 + parts.next().unwrap();
    let ahead = full - now_us;
    assert!(
        ahead > 89_000_000 && ahead <= 90_000_000,
        "full in {ahead} us"
    );
    assert_eq!(
        redis.cli(&["OBJECT", "ENCODING", "tg:{test-tpm}:tm:k:tpm-key"]),
        "int"
    );
    let ttl: i64 = redis
        .cli(&["PTTL", "tg:{test-tpm}:tm:k:tpm-key"])
        .parse()
        .unwrap();
    assert!(ttl > 80_000 && ttl <= 90_000, "ttl {ttl}");

    // Bad usage reports: 400 with an OpenAI-format body.
    assert_eq!(post_usage(&http, "{not json").await, 400);
    assert_eq!(
        post_usage(
            &http,
            r#"{"tenant":"demo","key_id":"nope","prompt_tokens":1}"#
        )
        .await,
        400
    );
    assert_eq!(
        post_usage(
            &http,
            r#"{"tenant":"demo","key_id":"demo-key","prompt_tokens":-1}"#
        )
        .await,
        400
    );

    // A batch (the filter's per-worker sums): every report is recorded, and
    // one bad report does not lose the others.
    let demo = |p: u64| {
        format!(
            r#"{{"tenant":"demo","key_id":"demo-key","model":"openai/gpt-4o-mini","prompt_tokens":{p},"completion_tokens":1}}"#
        )
    };
    let batch = format!("[{},{}]", demo(6), demo(4));
    assert_eq!(post_usage(&http, &batch).await, 204);
    assert!(!redis.cli(&["GET", "tg:{demo}:tm:k:demo-key"]).is_empty());
    let mixed = format!(
        r#"[{},{{"tenant":"demo","key_id":"nope","prompt_tokens":1}}]"#,
        demo(2)
    );
    let json = [("content-type", "application/json")];
    let (status, _, body) = http1(&http, "POST", "/v1/usage", &json, &mixed).await;
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "unknown_key");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("1 of 2 usage reports were not recorded."),
        "{msg}"
    );
    assert_eq!(post_usage(&http, "[]").await, 204);
    assert_eq!(post_usage(&http, r#"[{"tenant":"demo"}]"#).await, 400);
    let (_, _, metrics) = http1(&http, "GET", "/metrics", &[], "").await;
    // 6+1 + 4+1 + 2+1 tokens for demo.
    assert!(
        metrics.contains(r#"tollgate_authz_usage_tokens_total{tenant="demo"} 15"#),
        "{metrics}"
    );

    // Metrics count decisions by result and reason.
    let (_, _, metrics) = http1(&http, "GET", "/metrics", &[], "").await;
    assert!(
        metrics.contains(r#"tollgate_authz_decisions_total{reason="ok",result="allowed"} 8"#),
        "{metrics}"
    );
    assert!(metrics.contains(
        r#"tollgate_authz_decisions_total{reason="rate_limited_requests",result="denied"} 1"#
    ));
    assert!(metrics.contains(
        r#"tollgate_authz_decisions_total{reason="rate_limited_tokens",result="denied"} 1"#
    ));
    // Denials by the limit that refused them, labelled from the policy.
    assert!(metrics.contains(
        r#"tollgate_authz_denials_total{limit="requests",period="minute",scope="key",tenant="test-rpm"} 1"#
    ), "{metrics}");
    assert!(metrics.contains(
        r#"tollgate_authz_denials_total{limit="tokens",period="minute",scope="key",tenant="test-tpm"} 1"#
    ), "{metrics}");
    assert!(metrics
        .contains(r#"tollgate_authz_decisions_total{reason="missing_key",result="denied"} 1"#));
    assert!(metrics
        .contains(r#"tollgate_authz_decisions_total{reason="invalid_key",result="denied"} 1"#));
    assert!(metrics.contains("tollgate_authz_check_duration_seconds_count 12"));
    assert!(metrics.contains("tollgate_authz_redis_duration_seconds_bucket"));
    let (_, _, health) = http1(&http, "GET", "/healthz", &[], "").await;
    assert!(health.starts_with("ok"));

    svc.shutdown().await;
}

/// POST a usage report to the HTTP side; the response status.
async fn post_usage(addr: &str, body: &str) -> u16 {
    let json = [("content-type", "application/json")];
    http1(addr, "POST", "/v1/usage", &json, body).await.0
}

/// With a usage token, `POST /v1/usage` debits only reports that carry it:
/// a missing or wrong token is refused with 401 before the body is read,
/// nothing is debited, and the refusal is counted.
#[tokio::test]
async fn usage_reports_need_the_gateway_token() {
    let mut cfg = tollgate_authz::server::ServeConfig::new(repo_policy());
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = "memory://".into();
    let token = "gw-0123456789abcdef0123456789abcdef";
    cfg.usage_token = Some(tollgate_authz::usage_token::UsageToken::new(token).unwrap());
    let svc = tollgate_authz::server::start(cfg).await.unwrap();
    let http = svc.http_addr.to_string();
    let report = r#"{"tenant":"demo","key_id":"demo-key","prompt_tokens":5,"completion_tokens":5}"#;
    let with = |t: &'static str| {
        [
            ("content-type", "application/json"),
            ("x-tollgate-usage-token", t),
        ]
    };

    for headers in [
        &[("content-type", "application/json")][..],
        &with("gw-0123456789abcdef0123456789abcdeX")[..],
        &with("")[..],
    ] {
        let (status, _, body) = http1(&http, "POST", "/v1/usage", headers, report).await;
        assert_eq!(status, 401, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "usage_unauthorized");
        assert_eq!(body["error"]["type"], "authentication_error");
        assert!(!body.to_string().contains(token));
    }
    // Refused before parsing: even a malformed body gets the 401.
    assert_eq!(post_usage(&http, "{oops").await, 401);
    let (_, _, metrics) = http1(&http, "GET", "/metrics", &[], "").await;
    assert!(
        metrics.contains(r#"tollgate_authz_usage_reports_total{result="unauthorized"} 4"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains("tollgate_authz_usage_tokens_total{"),
        "{metrics}"
    );

    let (status, _, _) = http1(&http, "POST", "/v1/usage", &with(token), report).await;
    assert_eq!(status, 204);
    let (_, _, metrics) = http1(&http, "GET", "/metrics", &[], "").await;
    assert!(
        metrics.contains(r#"tollgate_authz_usage_tokens_total{tenant="demo"} 10"#),
        "{metrics}"
    );
    svc.shutdown().await;
}
