#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use mock_llm::core::config::Config;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn stats_count_and_redact() {
    let app = app();
    let hello = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
    openai(&app, hello, &[]).await;
    openai(&app, hello, &[]).await;
    call(
        &app,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer mock-openai-key-2")],
        hello,
    )
    .await;
    call(
        &app,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer tg-virtual-secret-1234")],
        hello,
    )
    .await;
    call(
        &app,
        "POST",
        "/v1beta/models/gemini-2.0-flash:generateContent?key=mock-gemini-key-1",
        &[],
        "{}",
    )
    .await;
    let s = call(&app, "GET", "/_mock/stats", &[], "").await;
    let text = s.text();
    for secret in [
        "mock-openai-key-1",
        "mock-openai-key-2",
        "tg-virtual-secret-1234",
        "mock-gemini-key-1",
    ] {
        assert!(!text.contains(secret), "{secret} leaked into stats");
    }
    let v = s.json();
    assert_eq!(v["total"], 5);
    assert_eq!(v["by_key"]["openai-1"], 2);
    assert_eq!(v["by_key"]["openai-2"], 1);
    let unknown = v["by_key"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.starts_with("unknown:"))
        .unwrap()
        .clone();
    assert_eq!(unknown.len(), "unknown:".len() + 12);
    let c = v["counts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key_id"] == "openai-1")
        .unwrap()
        .clone();
    assert_eq!(c["model"], "gpt-4o-mini");
    assert_eq!(c["status"], 200);
    assert_eq!(c["count"], 2);
    let recent = v["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 5);
    assert_eq!(recent[0]["headers"]["authorization"], "<redacted>");
    assert_eq!(recent[0]["body"]["model"], "gpt-4o-mini");
    assert_eq!(recent[0]["key_id"], "openai-1");
    let seqs: Vec<u64> = recent.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert!(recent[0]["ts_ms"].as_u64().unwrap() <= recent[4]["ts_ms"].as_u64().unwrap());
    assert!(recent[4]["path"]
        .as_str()
        .unwrap()
        .ends_with("key=<redacted>"));
    let r = call(&app, "POST", "/_mock/reset", &[], "").await;
    assert_eq!(r.status, 200);
    let v = call(&app, "GET", "/_mock/stats", &[], "").await.json();
    assert_eq!(v["total"], 0);
    assert_eq!(v["recent"].as_array().unwrap().len(), 0);
    let h = call(&app, "GET", "/_mock/health", &[], "").await;
    assert_eq!(h.json(), serde_json::json!({"status":"ok"}));
}

#[test]
fn invalid_configs_are_rejected() {
    let base = std::fs::read_to_string(config_path()).unwrap();
    assert!(Config::from_yaml(&base).is_ok());
    let typo = base.replace("recent_requests:", "recent_request:");
    assert!(Config::from_yaml(&typo)
        .unwrap_err()
        .contains("unknown field"));
    let rate = base.replace("\"429\": 0,", "\"429\": 1.5,");
    assert!(Config::from_yaml(&rate)
        .unwrap_err()
        .contains("error_rates.429"));
    let nokey = "providers:\n  o:\n    kind: openai\n    keys: [{name: a}]\n    models: [m]\n";
    assert!(Config::from_yaml(nokey)
        .unwrap_err()
        .contains("missing key"));
    let dup = "providers:\n  a: {kind: openai, keys: [], models: []}\n  b: {kind: openai, keys: [], models: []}\n";
    assert!(Config::from_yaml(dup)
        .unwrap_err()
        .contains("already uses path_prefix"));
}

#[test]
fn latency_distributions() {
    let yaml = |d: &str| {
        format!("behavior: {{latency: {{dist: {d}, mean_ms: 100, sd_ms: 30}}}}\nproviders: {{}}\n")
    };
    for d in ["fixed", "normal", "lognormal"] {
        let cfg = Config::from_yaml(&yaml(d)).unwrap();
        let app = mock_llm::app::App::new(&cfg);
        let xs: Vec<f64> = (0..20000)
            .map(|_| app.sample_latency(&cfg.behavior) as f64)
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
        assert!((mean - 100.0).abs() < 3.0, "{d}: mean {mean}");
        if d == "fixed" {
            assert_eq!(sd, 0.0);
        } else {
            assert!((sd - 30.0).abs() < 3.0, "{d}: sd {sd}");
        }
    }
}

#[test]
fn error_rates_apply() {
    let yaml = "behavior: {error_rates: {\"503\": 0.5}}\nproviders:\n  o: {kind: openai, keys: [{name: a, key: k}], models: [m]}\n";
    let cfg = Config::from_yaml(yaml).unwrap();
    let app = mock_llm::app::App::new(&cfg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n503 = rt.block_on(async {
        let mut n = 0;
        for _ in 0..1000 {
            let r = call(
                &app,
                "POST",
                "/v1/chat/completions",
                &[("authorization", "Bearer k")],
                r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
            )
            .await;
            assert!(r.status == 200 || r.status == 503);
            n += (r.status == 503) as u32;
        }
        n
    });
    assert!((400..600).contains(&n503), "{n503}");
}

async fn raw(addr: std::net::SocketAddr, req: &str) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn over_a_socket_with_reset_and_body_limit() {
    let cfg = Config::from_yaml(
        &std::fs::read_to_string(config_path())
            .unwrap()
            .replace("max_body_bytes: 33554432", "max_body_bytes: 1000"),
    )
    .unwrap();
    let app = Arc::new(mock_llm::app::App::new(&cfg));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let srv = tokio::spawn(mock_llm::server::serve(l, app));
    let out = raw(
        addr,
        "GET /_mock/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with(r#"{"status":"ok"}"#));
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
    let req = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer mock-openai-key-1\r\nx-mock-error: reset\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    let e = raw(addr, &req).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    let big = "x".repeat(2000);
    let req = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer mock-openai-key-1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{big}", big.len());
    let out = raw(addr, &req).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    srv.abort();
}

#[tokio::test]
async fn http2_prior_knowledge_is_served() {
    use http_body_util::BodyExt;
    let app = Arc::new(mock_llm::app::App::new(
        &Config::load(&config_path()).unwrap(),
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let srv = tokio::spawn(mock_llm::server::serve(l, app));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"over h2"}]}"#;
    let req = hyper::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("authorization", "Bearer mock-openai-key-1")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let v: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "mock response to: over h2"
    );
    // A reset fault resets the stream; the connection keeps serving.
    let req = hyper::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("authorization", "Bearer mock-openai-key-1")
        .header("x-mock-error", "reset")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    assert!(send.send_request(req).await.is_err());
    let req = hyper::Request::get(format!("http://{addr}/_mock/health"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(send.send_request(req).await.unwrap().status(), 200);
    srv.abort();
}
