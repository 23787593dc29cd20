//! Through a real Envoy (the version the bootstrap installs): ext_authz over
//! gRPC to this service, then an echo upstream. Shows what Envoy actually
//! does with our answers: identity headers overwrite forged ones, the key
//! headers are removed before the upstream, rate-limit headers reach the
//! client (replacing an upstream's), and denials keep our JSON bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{envoy_bin, free_port, http1, repo_policy, start_service, RedisServer};
use axum::http::HeaderMap;

struct Envoy(Child);

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `grpc`: the authz cluster's endpoint address, as YAML.
fn envoy_config(listen: u16, admin: u16, grpc: &str, echo: u16) -> String {
    format!(
        r#"
admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: gateway
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: gateway
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: echo }}
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              grpc_service:
                envoy_grpc: {{ cluster_name: authz }}
                timeout: 2s
              failure_mode_allow: false
              status_on_error: {{ code: ServiceUnavailable }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: authz
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: authz
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {grpc} }} }}] }}]
  - name: echo
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: echo
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {echo} }} }} }} }}] }}]
"#
    )
}

/// Upstream that answers with the request headers it got, as JSON
/// (name → list of values), and sets its own `x-ratelimit-limit-requests`.
async fn start_echo() -> u16 {
    async fn echo(headers: HeaderMap) -> impl axum::response::IntoResponse {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in &headers {
            m.entry(k.as_str().to_string())
                .or_default()
                .push(v.to_str().unwrap_or("").to_string());
        }
        (
            [("x-ratelimit-limit-requests", "from-upstream")],
            axum::Json(m),
        )
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(echo);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

fn all<'a>(hs: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    hs.iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The Envoy binary, or `None` after printing SKIPPED: `make test` installs
/// Envoy first; only a bare `cargo test` may skip.
fn envoy_or_skip() -> Option<std::path::PathBuf> {
    let envoy = envoy_bin();
    if envoy.is_none() {
        assert!(std::env::var_os("CI").is_none(), "envoy not found under CI");
        println!("SKIPPED: envoy not found (run `make bootstrap`, or set ENVOY_BIN)");
    }
    envoy
}

/// An Envoy (one worker) with ext_authz to `grpc` and the echo upstream,
/// once ready: (process, gateway address, its config's directory).
async fn start_envoy(
    envoy: &std::path::Path,
    grpc: &str,
    echo: u16,
) -> (Envoy, String, tempfile::TempDir) {
    let (listen, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("envoy.yaml");
    std::fs::write(&cfg, envoy_config(listen, admin, grpc, echo)).unwrap();
    let envoy = Envoy(
        Command::new(envoy)
            .args([
                "-c",
                cfg.to_str().unwrap(),
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "error",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let admin_addr = format!("127.0.0.1:{admin}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::net::TcpStream::connect(&admin_addr).await.is_ok()
            && http1(&admin_addr, "GET", "/ready", &[], "").await.0 == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "envoy did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gw = format!("127.0.0.1:{listen}");
    (envoy, gw, dir)
}

/// The same hop over a Unix domain socket (`--grpc-uds`): allowed with the
/// rate-limit headers, and refused with this service's 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_over_a_unix_socket() {
    let Some(envoy) = envoy_or_skip() else {
        return;
    };
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("authz.sock");
    let mut cfg = tollgate_authz::server::ServeConfig::new(repo_policy());
    cfg.grpc_listen = "127.0.0.1:0".parse().unwrap();
    cfg.http_listen = "127.0.0.1:0".parse().unwrap();
    cfg.redis_url = "memory://".into();
    cfg.grpc_uds = Some(sock.clone());
    let svc = tollgate_authz::server::start(cfg).await.unwrap();
    let echo = start_echo().await;
    let grpc = format!("{{ pipe: {{ path: {:?} }} }}", sock.to_str().unwrap());
    let (_envoy, gw, _dir) = start_envoy(&envoy, &grpc, echo).await;
    let (status, hs, _) = http1(
        &gw,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer tg-test-rpm5")],
        "{}",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(all(&hs, "x-ratelimit-limit-requests"), ["5"]);
    let (status, _, body) = http1(
        &gw,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer tg-wrong")],
        "{}",
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("invalid_api_key"), "{body}");
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_seen_through_envoy() {
    let Some(envoy) = envoy_or_skip() else {
        return;
    };
    let redis = RedisServer::start();
    let svc = start_service(&repo_policy(), &redis.url()).await;
    let echo = start_echo().await;
    let grpc = format!(
        "{{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }}",
        svc.grpc_addr.port()
    );
    let (_envoy, gw, _dir) = start_envoy(&envoy, &grpc, echo).await;

    // Allowed: identity headers overwrite forged ones, the key never reaches
    // the upstream, rate-limit headers replace the upstream's.
    let (status, hs, body) = http1(
        &gw,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer tg-demo-key"),
            ("x-api-key", "tg-demo-key"),
            ("x-tollgate-tenant", "forged"),
            ("x-tollgate-key-id", "forged"),
            ("x-tollgate-models", "forged"),
            ("x-tollgate-reserved", "999999"),
            ("x-tollgate-slot", "forged;ttl=99999"),
        ],
        "{}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The reservation: the 2-byte body is 1 token of prompt, plus the
    // default 256 for the answer (its part, and what a request declaring
    // no limit needs); a forged value is overwritten.
    assert_eq!(seen_reserved(&body), "257;o=256;u=256");
    let seen: BTreeMap<String, Vec<String>> = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["x-tollgate-tenant"], vec!["demo"]);
    assert_eq!(seen["x-tollgate-key-id"], vec!["demo-key"]);
    assert_eq!(seen["x-tollgate-models"], vec!["*"]);
    assert!(!seen.contains_key("authorization"), "{seen:?}");
    assert!(!seen.contains_key("x-api-key"), "{seen:?}");
    // No cap applies to this key: a client's slot never reaches the filter.
    assert!(!seen.contains_key("x-tollgate-slot"), "{seen:?}");
    assert_eq!(all(&hs, "x-ratelimit-limit-requests"), vec!["1000000"]);
    assert_eq!(all(&hs, "x-ratelimit-remaining-requests"), vec!["999999"]);
    assert_eq!(all(&hs, "x-ratelimit-limit-tokens"), vec!["10000000000"]);
    assert_eq!(all(&hs, "x-ratelimit-remaining-tokens"), vec!["9999999743"]);
    assert_eq!(all(&hs, "x-ratelimit-reset-tokens"), vec!["1ms"]);
    assert_eq!(all(&hs, "x-ratelimit-reset-requests").len(), 1);

    // Missing key: 401 with our body and content type.
    let (status, hs, body) = http1(&gw, "POST", "/v1/chat/completions", &[], "{}").await;
    assert_eq!(status, 401);
    assert_eq!(all(&hs, "content-type"), vec!["application/json"]);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(v["error"]["param"], serde_json::Value::Null);

    // RPM 5: five through, the sixth 429 with retry-after and the headers.
    let rpm5 = || {
        http1(
            &gw,
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer tg-test-rpm5")],
            "{}",
        )
    };
    for _ in 0..5 {
        let (status, _, _) = rpm5().await;
        assert_eq!(status, 200);
    }
    let (status, hs, body) = rpm5().await;
    assert_eq!(status, 429);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "requests");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(all(&hs, "content-type"), vec!["application/json"]);
    let retry: u64 = all(&hs, "retry-after")[0].parse().unwrap();
    assert!((11..=12).contains(&retry));
    assert_eq!(all(&hs, "x-ratelimit-remaining-requests"), vec!["0"]);
    assert_eq!(all(&hs, "x-ratelimit-limit-requests"), vec!["5"]);

    svc.shutdown().await;
}

/// The `x-tollgate-reserved` value the echo upstream saw (exactly one).
fn seen_reserved(body: &str) -> String {
    let seen: BTreeMap<String, Vec<String>> = serde_json::from_str(body).unwrap();
    assert_eq!(seen["x-tollgate-reserved"].len(), 1, "{seen:?}");
    seen["x-tollgate-reserved"][0].clone()
}
