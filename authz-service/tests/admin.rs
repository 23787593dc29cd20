//! The admin API: keys made, changed, revoked and rotated on one instance
//! reach another sharing the same real Redis within 1 s (measured and
//! printed); rotation grace and expiry end on both; the API's errors, the
//! policy file's keys read-only, usage read from the store (slots in
//! flight of a key's `max_concurrent_requests` too); bad input
//! fuzzed (seeded, bounded); and, with the binary run as the user runs it
//! (the `keys` CLI against two `serve` processes logging at debug), the
//! admin token and every secret absent from every log and metric.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    check_key, client, free_port, header_map, http1, http_status, request_with, temp_policy,
    AuthzClient, RedisServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::CheckResponse;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tollgate_authz::admin::AdminToken;
use tollgate_authz::policy::hash_key;
use tollgate_authz::server::{start, Running, ServeConfig};

const GRACE_2S: &str = r#"{"grace_seconds":2}"#;
const NARROW: &str = r#"{"models":["openai/*"]}"#;
const TOKEN: &str = "test-admin-token-0123456789abcdef";

fn policy_yaml() -> String {
    format!(
        "version: 1\ntenants:\n  team: {{}}\n  other: {{}}\nkeys:\n  - id: file-key\n    tenant: team\n    sha256: {}\n",
        hash_key("tg-file-key")
    )
}

async fn start_admin(policy: &Path, redis_url: &str) -> Running {
    let mut cfg = ServeConfig::new(policy);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.admin_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = redis_url.to_string();
    cfg.redis_timeout = Duration::from_millis(250);
    cfg.reload_interval = Duration::from_millis(50);
    cfg.admin_token = Some(AdminToken::named(TOKEN, "admin token").unwrap());
    start(cfg).await.unwrap()
}

/// `POST /admin/keys` with the token.
async fn create(r: &Running, body: &str) -> (u16, Value) {
    call(r, "POST", "/admin/keys", body).await
}

/// One admin call with the token: (status, JSON body).
async fn call(r: &Running, method: &str, path: &str, body: &str) -> (u16, Value) {
    call_as(r, Some(TOKEN), method, path, body).await
}

async fn call_as(
    r: &Running,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    let addr = r.admin_addr.unwrap().to_string();
    let (status, hs, text) = http1(&addr, method, path, &headers, body).await;
    assert!(
        hs.iter()
            .any(|(k, v)| k == "content-type" && v == "application/json"),
        "{method} {path}: not JSON: {hs:?} {text}"
    );
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text:?}"));
    (status, v)
}

/// The 401's code of a denied Check (`""` for anything else).
fn denial_code(r: &CheckResponse) -> String {
    match &r.http_response {
        Some(HttpResponse::DeniedResponse(d)) => {
            let v: Value = serde_json::from_str(&d.body).unwrap_or_default();
            v["error"]["code"].as_str().unwrap_or("").to_string()
        }
        _ => String::new(),
    }
}

/// Check `key` every 5 ms until `done` says so: the time it took.
async fn until(
    c: &mut AuthzClient,
    key: &str,
    limit: Duration,
    done: impl Fn(&CheckResponse) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let r = check_key(c, key).await.unwrap();
        if done(&r) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "not within {limit:?}: {} {}",
            http_status(&r),
            denial_code(&r)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn summary(name: &str, mut d: Vec<Duration>) -> Duration {
    d.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: n={} min {:.0} ms, median {:.0} ms, max {:.0} ms",
        d.len(),
        ms(&d[0]),
        ms(&d[d.len() / 2]),
        ms(&d[d.len() - 1])
    );
    d[d.len() - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_share_keys_within_a_second() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&policy_yaml());
    let a = start_admin(&path, &redis.url()).await;
    let b = start_admin(&path, &redis.url()).await;
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let limit = Duration::from_secs(1);

    // Made on one, admitted on the other; then revoked on the other,
    // refused on both.
    let (mut made, mut revoked) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let (writer, reader, creader) = if i % 2 == 0 {
            (&a, &b, &mut cb)
        } else {
            (&b, &a, &mut ca)
        };
        let body = json!({"tenant": "team", "id": format!("k{i}"), "limits": {"requests_per_minute": 1000}});
        let (s, v) = create(writer, &body.to_string()).await;
        assert_eq!(s, 201, "{v}");
        let secret = v["secret"].as_str().unwrap().to_string();
        assert!(secret.starts_with("tg-") && secret.len() == 43);
        made.push(until(creader, &secret, limit, |r| http_status(r) == 200).await);
        let (s, v) = call(reader, "POST", &format!("/admin/keys/k{i}/revoke"), "").await;
        assert_eq!((s, v["state"].as_str()), (200, Some("revoked")));
        // The instance that revoked refuses at once.
        let mut cr = client(reader).await;
        let r = check_key(&mut cr, &secret).await.unwrap();
        assert_eq!(
            (http_status(&r), denial_code(&r)),
            (401, "key_revoked".into())
        );
        let mut cw = client(writer).await;
        revoked.push(
            until(&mut cw, &secret, limit, |r| {
                http_status(r) == 401 && denial_code(r) == "key_revoked"
            })
            .await,
        );
    }
    assert!(summary("created on one, admitted on the other", made) < limit);
    assert!(summary("revoked on one, refused on the other", revoked) < limit);

    // An update reaches the other instance: models narrowed → 403.
    let (s, v) = create(&a, r#"{"tenant":"team","id":"narrow"}"#).await;
    assert_eq!(s, 201);
    let secret = v["secret"].as_str().unwrap().to_string();
    until(&mut cb, &secret, limit, |r| http_status(r) == 200).await;
    let (s, _) = call(&a, "PATCH", "/admin/keys/narrow", NARROW).await;
    assert_eq!(s, 200);
    let started = Instant::now();
    loop {
        let req = request_with(&[
            ("authorization", &format!("Bearer {secret}")),
            ("x-tollgate-model", "anthropic/claude-3-5-haiku"),
        ]);
        if http_status(&cb.check(req).await.unwrap().into_inner()) == 403 {
            break;
        }
        assert!(started.elapsed() < limit, "update not applied on b");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Rotation: the new secret works on both within 1 s, the old one until
    // its grace ends, then 401 key_expired on both.
    let (s, v) = create(&a, r#"{"tenant":"team","id":"rot"}"#).await;
    assert_eq!(s, 201);
    let old = v["secret"].as_str().unwrap().to_string();
    until(&mut cb, &old, limit, |r| http_status(r) == 200).await;
    let (s, v) = call(&b, "POST", "/admin/keys/rot/rotate", GRACE_2S).await;
    assert_eq!(s, 200, "{v}");
    let rotated_at = Instant::now();
    let new = v["secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(
        v["key"]["previous_secrets_valid_until"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let took = until(&mut ca, &new, limit, |r| http_status(r) == 200).await;
    println!(
        "rotated on one, new secret admitted on the other: {:.0} ms",
        took.as_secs_f64() * 1000.0
    );
    for c in [&mut ca, &mut cb] {
        assert_eq!(
            http_status(&check_key(c, &old).await.unwrap()),
            200,
            "old secret in its grace"
        );
    }
    tokio::time::sleep(Duration::from_millis(2100).saturating_sub(rotated_at.elapsed())).await;
    for c in [&mut ca, &mut cb] {
        let r = check_key(c, &old).await.unwrap();
        assert_eq!(
            (http_status(&r), denial_code(&r)),
            (401, "key_expired".into())
        );
        assert_eq!(http_status(&check_key(c, &new).await.unwrap()), 200);
    }

    // Expiry: admitted on both until it, then 401 key_expired on both.
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(1500);
    let body = json!({"tenant": "team", "id": "short", "expires_at": at.to_string()});
    let (s, v) = create(&b, &body.to_string()).await;
    assert_eq!(s, 201, "{v}");
    let secret = v["secret"].as_str().unwrap().to_string();
    until(&mut ca, &secret, limit, |r| http_status(r) == 200).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for c in [&mut ca, &mut cb] {
        let r = check_key(c, &secret).await.unwrap();
        assert_eq!(
            (http_status(&r), denial_code(&r)),
            (401, "key_expired".into())
        );
    }
    let (_, v) = call(&a, "GET", "/admin/keys/short", "").await;
    assert_eq!(v["state"], "expired");

    // Both list the same keys, the file's among them.
    let (_, la) = call(&a, "GET", "/admin/keys?usage=false", "").await;
    let (_, lb) = call(&b, "GET", "/admin/keys?usage=false", "").await;
    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&la), ids(&lb));
    assert!(ids(&la).contains(&"file-key".to_string()));
    assert_eq!(ids(&la).len(), 14);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_and_refusals() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&policy_yaml());
    let a = start_admin(&path, &redis.url()).await;
    let mut c = client(&a).await;

    // The token: missing or wrong → 401 in the error shape.
    for token in [None, Some("wrong-token-0123456789abcdef")] {
        let (s, v) = call_as(&a, token, "GET", "/admin/keys", "").await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (401, Some("admin_unauthorized"))
        );
    }
    // The OpenAPI document, without a token.
    let (s, v) = call_as(&a, None, "GET", "/admin/openapi.json", "").await;
    assert_eq!(s, 200);
    assert!(v["paths"]["/admin/keys/{id}/rotate"]["post"].is_object());

    // Policy-file keys: read, never changed.
    let (s, v) = call(&a, "GET", "/admin/keys/file-key", "").await;
    assert_eq!((s, v["source"].as_str()), (200, Some("policy_file")));
    for (m, p, b) in [
        ("PATCH", "/admin/keys/file-key", "{}"),
        ("POST", "/admin/keys/file-key/revoke", ""),
        ("POST", "/admin/keys/file-key/rotate", ""),
    ] {
        let (s, v) = call(&a, m, p, b).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (409, Some("key_read_only")),
            "{m} {p}"
        );
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("policy file"));
    }
    let (s, v) = create(&a, r#"{"tenant":"team","id":"file-key"}"#).await;
    assert_eq!((s, v["error"]["code"].as_str()), (409, Some("key_exists")));

    // Bad input: each a 400 naming what is wrong.
    for (body, code, needle) in [
        (
            r#"{"tenant":"nobody"}"#,
            "unknown_tenant",
            "not in the policy file",
        ),
        (
            r#"{"tenant":"team","limits":{"requests_per_minute":0}}"#,
            "invalid_key",
            "must be greater than 0",
        ),
        (
            r#"{"tenant":"team","limitz":{}}"#,
            "invalid_body",
            "unknown field",
        ),
        (
            r#"{"tenant":"team","models":[]}"#,
            "invalid_key",
            "models must not be empty",
        ),
        (
            r#"{"tenant":"team","expires_at":"2001-01-01T00:00:00Z"}"#,
            "invalid_request",
            "not in the future",
        ),
        (
            r#"{"tenant":"team","expires_at":"soon"}"#,
            "invalid_request",
            "RFC 3339",
        ),
        (
            r#"{"tenant":"team","budgets":{"usd_per_day":-1}}"#,
            "invalid_key",
            "usd_per_day",
        ),
        (
            r#"{"tenant":"team","id":"has space"}"#,
            "invalid_request",
            "must match",
        ),
        ("not json", "invalid_body", "Invalid request body"),
    ] {
        let (s, v) = create(&a, body).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {v}"
        );
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    let (s, v) = call(&a, "GET", "/admin/keys/nope", "").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("key_not_found"))
    );
    let (s, _) = call(&a, "DELETE", "/admin/keys/nope", "").await;
    assert_eq!(s, 405);

    // Usage is what the store says: 3 Checks of a key with a limit, a
    // usage report of a key with a budget.
    let (s, v) = create(
        &a,
        r#"{"tenant":"team","id":"limited","limits":{"requests_per_minute":10}}"#,
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let limited = v["secret"].as_str().unwrap().to_string();
    for _ in 0..3 {
        assert_eq!(
            http_status(&check_key(&mut c, &limited).await.unwrap()),
            200
        );
    }
    let body = json!({"tenant": "team", "id": "spender", "limits": {"requests_per_minute": 10},
                      "budgets": {"usd_per_day": "1.50"}});
    let (s, v) = create(&a, &body.to_string()).await;
    assert_eq!(s, 201, "{v}");
    let spender = v["secret"].as_str().unwrap().to_string();
    let report = json!({"tenant": "team", "key_id": "spender", "model": "openai/gpt-4o-mini",
                        "prompt_tokens": 1000000, "completion_tokens": 0});
    let http = a.http_addr.to_string();
    let (s, _, _) = http1(&http, "POST", "/v1/usage", &[], &report.to_string()).await;
    assert_eq!(s, 204);
    // Leases held by this instance count as used; give them back first.
    a.authorizer.leases().clear();
    a.authorizer.money_leases().clear();
    a.authorizer.maintain().await;
    let (_, v) = call(&a, "GET", "/admin/keys/limited", "").await;
    let usage = &v["usage"];
    assert_eq!(usage["limits"][0]["limit"], "requests_per_minute");
    assert_eq!(usage["limits"][0]["capacity"], 10);
    let remaining = usage["limits"][0]["remaining"].as_i64().unwrap();
    assert!((7..=8).contains(&remaining), "{usage}");
    let (_, v) = call(&a, "GET", "/admin/keys/spender", "").await;
    let usage = &v["usage"];
    // 1M prompt tokens of gpt-4o-mini at $0.15 per million.
    assert_eq!(usage["budgets"][0]["spent_usd"], "0.15", "{usage}");
    assert_eq!(usage["budgets"][0]["remaining_usd"], "1.35");
    assert_eq!(usage["limits"][0]["remaining"], 10);

    // Raise the budget, drop the limit: a merge patch.
    let (s, v) = call(
        &a,
        "PATCH",
        "/admin/keys/spender",
        r#"{"budgets":{"usd_per_day":"5"},"limits":{"requests_per_minute":null}}"#,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["limits"], json!({}));
    assert_eq!(v["usage"]["budgets"][0]["budget_usd"], "5.00");
    assert_eq!(v["usage"]["budgets"][0]["spent_usd"], "0.15");
    let (s, v) = call(&a, "PATCH", "/admin/keys/spender", r#"{"tenant":"other"}"#).await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("body")));
    // models: null would remove the field, which means any model: refused.
    let (s, v) = call(&a, "PATCH", "/admin/keys/spender", r#"{"models":null}"#).await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("models")),
        "{v}"
    );
    // Cache breakpoints: the key's own setting (none: the tenant's, off),
    // shown and sent to the filter.
    let breakpoints = |r: &CheckResponse| match &r.http_response {
        Some(HttpResponse::OkResponse(ok)) => header_map(&ok.headers)
            .get("x-tollgate-cache-breakpoints")
            .cloned(),
        _ => None,
    };
    let r = check_key(&mut c, &spender).await.unwrap();
    assert_eq!(breakpoints(&r).as_deref(), Some("0"));
    let (s, v) = call(
        &a,
        "PATCH",
        "/admin/keys/spender",
        r#"{"cache_breakpoints":true}"#,
    )
    .await;
    assert_eq!((s, &v["cache_breakpoints"]), (200, &json!(true)), "{v}");
    until(&mut c, &spender, Duration::from_secs(1), |r| {
        breakpoints(r).as_deref() == Some("1")
    })
    .await;

    // Revoked: no change, no rotation; revoking again is the same answer.
    call(&a, "POST", "/admin/keys/spender/revoke", "").await;
    let (s, v) = call(&a, "POST", "/admin/keys/spender/rotate", "").await;
    assert_eq!((s, v["error"]["code"].as_str()), (409, Some("key_revoked")));
    let (s, v) = call(&a, "POST", "/admin/keys/spender/revoke", "").await;
    assert_eq!((s, v["state"].as_str()), (200, Some("revoked")));
    // Its id stays taken.
    let (s, _) = create(&a, r#"{"tenant":"team","id":"spender"}"#).await;
    assert_eq!(s, 409);

    // Pages and the tenant filter; a generated id.
    let (s, v) = create(&a, r#"{"tenant":"other"}"#).await;
    assert_eq!(s, 201);
    assert!(v["key"]["id"].as_str().unwrap().starts_with("key-"));
    let (_, p1) = call(&a, "GET", "/admin/keys?limit=1&usage=false", "").await;
    assert_eq!(
        (
            p1["has_more"].as_bool(),
            p1["data"].as_array().unwrap().len()
        ),
        (Some(true), 1)
    );
    let after = p1["next_after"].as_str().unwrap();
    let (_, p2) = call(
        &a,
        "GET",
        &format!("/admin/keys?limit=100&after={after}"),
        "",
    )
    .await;
    assert_eq!(p2["data"].as_array().unwrap().len(), 3);
    let (_, t) = call(&a, "GET", "/admin/keys?tenant=other", "").await;
    assert_eq!(t["data"].as_array().unwrap().len(), 1);
    a.shutdown().await;

    // Without a token the admin API is off.
    let mut cfg = ServeConfig::new(&path);
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = "memory://".into();
    let off = start(cfg).await.unwrap();
    assert!(off.admin_addr.is_none());
    off.shutdown().await;
}

/// A random JSON value, `depth` levels at most.
fn random_value(rng: &mut impl Rng, depth: u32) -> Value {
    match rng.random_range(0..if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random_range(-2.0..1e12)),
        4 => json!(
            [
                "0",
                "-1",
                "1e400",
                "",
                "*",
                "openai/*",
                "1.0000000001",
                "tg-x",
                "team",
                "ü\u{0}"
            ][rng.random_range(0..10)]
        ),
        5 => json!("x".repeat(rng.random_range(0..5000))),
        6 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "tenant",
                "id",
                "models",
                "limits",
                "model_limits",
                "budgets",
                "expires_at",
                "requests_per_minute",
                "usd_per_day",
                "rolling",
                "window",
                "usd",
                "soft_percent",
                "grace_seconds",
                "zzz",
            ];
            Value::Object(
                (0..rng.random_range(0..5))
                    .map(|_| {
                        (
                            keys[rng.random_range(0..keys.len())].to_string(),
                            random_value(rng, depth - 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_bad_input_gets_clear_errors() {
    let (_dir, path) = temp_policy(&policy_yaml());
    let a = start_admin(&path, "memory://").await;
    let (s, _) = create(&a, r#"{"tenant":"team","id":"victim"}"#).await;
    assert_eq!(s, 201);
    let mut rng = rand::rngs::StdRng::seed_from_u64(38);
    let started = Instant::now();
    let valid = json!({"tenant": "team", "models": ["openai/*"], "limits": {"requests_per_minute": 5},
                       "budgets": {"usd_per_day": 2, "rolling": [{"window": "24h", "usd": 1}]},
                       "expires_at": "2099-01-01T00:00:00Z"});
    let mut seen = std::collections::BTreeMap::new();
    const N: usize = 2000;
    for i in 0..N {
        let (method, path) = [
            ("POST", "/admin/keys"),
            ("PATCH", "/admin/keys/victim"),
            ("POST", "/admin/keys/victim/rotate"),
            ("GET", "/admin/keys?limit=%ff&tenant=x"),
            ("PATCH", "/admin/keys/%zz"),
        ][i % 5];
        let body = match rng.random_range(0..4) {
            // A valid body with one field replaced by anything.
            0 | 1 => {
                let mut b = valid.clone();
                let field = [
                    "tenant",
                    "id",
                    "models",
                    "limits",
                    "budgets",
                    "expires_at",
                    "model_limits",
                ][rng.random_range(0..7)];
                b[field] = random_value(&mut rng, 3);
                b.to_string()
            }
            2 => random_value(&mut rng, 4).to_string(),
            // Text that is not JSON.
            _ => (0..rng.random_range(0..200))
                .map(|_| rng.random_range(1u8..=255) as char)
                .collect(),
        };
        let (s, v) = call(&a, method, path, &body).await;
        assert!(s < 500, "{method} {path} {body:?}: {s} {v}");
        if s >= 400 {
            let e = &v["error"];
            assert!(
                e["message"].is_string() && e["type"].is_string() && e["code"].is_string(),
                "{v}"
            );
            assert!(e["message"].as_str().unwrap().len() < 1000, "{v}");
        }
        *seen.entry(s).or_insert(0) += 1;
    }
    println!(
        "fuzzed {N} requests in {:?}: statuses {seen:?}",
        started.elapsed()
    );
    assert!(seen.contains_key(&400));
    // Still serving, and the victim key still usable or validly changed.
    let (s, v) = call(&a, "GET", "/admin/keys/victim", "").await;
    assert_eq!(s, 200, "{v}");
    assert!(started.elapsed() < Duration::from_secs(120));
    a.shutdown().await;
}

/// The binary as a user runs it: `tollgate-authz keys …` against two
/// `serve` processes on one Redis, logging at debug; neither the admin
/// token nor any secret may appear in a log or a metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_verbs_and_no_secret_in_logs_or_metrics() {
    let bin = env!("CARGO_BIN_EXE_tollgate-authz");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, policy_yaml()).unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut servers = Vec::new();
    for n in 0..2 {
        let (grpc, http, admin) = (free_port(), free_port(), free_port());
        let log = std::fs::File::create(dir.path().join(format!("serve{n}.log"))).unwrap();
        let child = Command::new(bin)
            .args([
                "serve",
                "--policy",
                policy.to_str().unwrap(),
                "--redis-url",
                &redis.url(),
            ])
            .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
            .args(["--http-listen", &format!("127.0.0.1:{http}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--admin-token-file", token_file.to_str().unwrap()])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        servers.push((child, grpc, http, admin));
    }
    // The admin port is bound last.
    for (_, _, _, admin) in &servers {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", *admin)).is_err() {
            assert!(Instant::now() < deadline, "serve did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let cli = |admin: u16, args: &[&str]| {
        let out = Command::new(bin)
            .args(["keys", "--admin-url", &format!("http://127.0.0.1:{admin}")])
            .args(["--admin-token-file", token_file.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (
            out.status.code(),
            v,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (a, b) = (servers[0].3, servers[1].3);
    let mut secrets = Vec::new();
    let (code, v, err) = cli(
        a,
        &[
            "create",
            "--tenant",
            "team",
            "--id",
            "cli-key",
            "--requests-per-minute",
            "100",
            "--max-concurrent-requests",
            "4",
            "--usd-per-day",
            "3",
            "--model",
            "openai/*",
        ],
    );
    assert_eq!(code, Some(0), "{v} {err}");
    assert!(err.contains("shown only once"));
    secrets.push(v["secret"].as_str().unwrap().to_string());
    assert_eq!(v["key"]["limits"]["requests_per_minute"], 100);
    assert_eq!(v["key"]["limits"]["max_concurrent_requests"], 4);
    let (code, v, _) = cli(
        b,
        &[
            "update",
            "cli-key",
            "--usd-per-day",
            "10",
            "--json",
            r#"{"model_limits":{"openai/gpt-4o":{"requests_per_minute":5}}}"#,
        ],
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["usage"]["budgets"][0]["budget_usd"], "10.00");
    assert_eq!(v["model_limits"]["openai/gpt-4o"]["requests_per_minute"], 5);
    let (code, v, _) = cli(a, &["rotate", "cli-key", "--grace-seconds", "60"]);
    assert_eq!(code, Some(0), "{v}");
    secrets.push(v["secret"].as_str().unwrap().to_string());
    let mut gb = AuthzClient::connect(format!("http://127.0.0.1:{}", servers[1].1))
        .await
        .unwrap();
    for s in &secrets {
        until(&mut gb, s, Duration::from_secs(1), |r| {
            http_status(r) == 200
        })
        .await;
    }
    let (code, v, _) = cli(b, &["list", "--tenant", "team"]);
    assert_eq!(code, Some(0));
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    let (code, v, _) = cli(b, &["get", "cli-key"]);
    assert_eq!(
        (code, v["usage"]["limits"][0]["capacity"].as_u64()),
        (Some(0), Some(100))
    );
    let (code, v, _) = cli(a, &["revoke", "cli-key"]);
    assert_eq!((code, v["state"].as_str()), (Some(0), Some("revoked")));
    for s in &secrets {
        until(&mut gb, s, Duration::from_secs(1), |r| {
            denial_code(r) == "key_revoked"
        })
        .await;
    }
    // Errors: exit 1 with the API's message; a bad token is refused.
    let (code, _, err) = cli(a, &["update", "file-key", "--requests-per-minute", "1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("policy file"), "{err}");
    std::fs::write(dir.path().join("bad"), "not-the-admin-token-000").unwrap();
    let out = Command::new(bin)
        .args([
            "keys",
            "list",
            "--admin-url",
            &format!("http://127.0.0.1:{a}"),
        ])
        .args([
            "--admin-token-file",
            dir.path().join("bad").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));

    // Every metric endpoint and every log: no secret, no admin token.
    let mut texts = Vec::new();
    for (_, _, http, _) in &servers {
        texts.push(
            http1(&format!("127.0.0.1:{http}"), "GET", "/metrics", &[], "")
                .await
                .2,
        );
    }
    for (mut child, ..) in servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    for n in 0..2 {
        texts.push(std::fs::read_to_string(dir.path().join(format!("serve{n}.log"))).unwrap());
    }
    assert!(
        texts[2].contains("admin_addr") && texts[0].contains("tollgate_authz_admin_requests_total")
    );
    for (i, t) in texts.iter().enumerate() {
        assert!(!t.contains(TOKEN), "admin token in text {i}");
        for s in &secrets {
            assert!(!t.contains(s.as_str()), "a secret in text {i}");
            assert!(!t.contains(&s[3..]), "a secret's body in text {i}");
        }
    }
}

/// The key's `max_concurrent_requests` row of its usage: (capacity,
/// remaining).
fn concurrency_row(v: &Value) -> Option<(u64, i64)> {
    v["usage"]["limits"]
        .as_array()?
        .iter()
        .find(|l| l["limit"] == "max_concurrent_requests")
        .map(|l| {
            (
                l["capacity"].as_u64().unwrap(),
                l["remaining"].as_i64().unwrap(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_takes_a_concurrency_cap_like_a_file_key() {
    let redis = RedisServer::start();
    let (_dir, path) = temp_policy(&policy_yaml());
    let a = start_admin(&path, &redis.url()).await;
    let mut c = client(&a).await;
    let limit = Duration::from_secs(1);
    let body = r#"{"tenant":"team","id":"capped","limits":{"max_concurrent_requests":2}}"#;
    let (s, v) = create(&a, body).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["key"]["limits"], json!({"max_concurrent_requests": 2}));
    assert_eq!(concurrency_row(&v["key"]), Some((2, 2)), "none in flight");
    let secret = v["secret"].as_str().unwrap().to_string();
    // Two requests in flight (their slots never released), the third over
    // the cap.
    until(&mut c, &secret, limit, |r| http_status(r) == 200).await;
    let r = check_key(&mut c, &secret).await.unwrap();
    assert_eq!(http_status(&r), 200);
    let r = check_key(&mut c, &secret).await.unwrap();
    assert_eq!(
        (http_status(&r), denial_code(&r)),
        (429, "concurrency_limit_exceeded".into())
    );
    // Its usage shows the slots held.
    let (s, v) = call(&a, "GET", "/admin/keys/capped", "").await;
    assert_eq!(s, 200);
    assert_eq!(concurrency_row(&v), Some((2, 0)), "{v}");
    // Raised to 3: one more admitted once the change applied.
    let (s, v) = call(
        &a,
        "PATCH",
        "/admin/keys/capped",
        r#"{"limits":{"max_concurrent_requests":3}}"#,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    until(&mut c, &secret, limit, |r| http_status(r) == 200).await;
    let (_, v) = call(&a, "GET", "/admin/keys/capped", "").await;
    assert_eq!(concurrency_row(&v), Some((3, 0)), "{v}");
    // A cap per model, or of 0, is refused as a policy file's would be.
    for (patch, needle) in [
        (
            r#"{"model_limits":{"openai/gpt-4o":{"max_concurrent_requests":1}}}"#,
            "concurrency caps are per key and per tenant",
        ),
        (
            r#"{"limits":{"max_concurrent_requests":0}}"#,
            "max_concurrent_requests must be greater than 0",
        ),
    ] {
        let (s, v) = call(&a, "PATCH", "/admin/keys/capped", patch).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some("invalid_key")),
            "{v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{v}"
        );
    }
    // A file key without a cap lists none.
    let (_, v) = call(&a, "GET", "/admin/keys/file-key", "").await;
    assert_eq!(concurrency_row(&v), None);
    a.shutdown().await;
}
