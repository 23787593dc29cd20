#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! Per-key fault injection (`faults` on a configured key) and the
//! per-request fault headers.

use crate::common;
use crate::common::*;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use mock_llm::app::App;
use mock_llm::core::config::Config;
use mock_llm::core::ctx::{Reply, ResetOnBodyError};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello there world"}]}"#;
const STREAM: &str =
    r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;

fn flaky(seed: &str) -> App {
    let yaml = format!(
        "providers:\n  o:\n    kind: openai\n    models: [m]\n    keys:\n      - {{name: ok, key: k-ok}}\n      - name: flaky\n        key: k-flaky\n        faults: {{{seed}\"429\": 0.2, retry_after_s: 7, \"500\": 0.1, \"503\": 0.1, slow: 0.1, slow_ms: 5, reset: 0.1, reset_after_first_chunk: 0.1}}\n"
    );
    App::new(&Config::from_yaml(&yaml).unwrap())
}

/// What one request on a key turned into, read from the reply itself.
async fn outcome(app: &App, key: &str, body: &str) -> String {
    let auth = format!("Bearer {key}");
    let (parts, ()) = Request::post("/v1/chat/completions")
        .header("authorization", auth)
        .body(())
        .unwrap()
        .into_parts();
    match app.handle(parts, Bytes::from(body.to_string())).await {
        Reply::Reset => "reset".into(),
        Reply::Delayed(r, ms) => format!("{} after {ms} ms", r.status().as_u16()),
        Reply::Response(r) => {
            let marked = r.extensions().get::<ResetOnBodyError>().is_some();
            let status = r.status().as_u16();
            if status == 429 {
                assert_eq!(r.headers()["retry-after"], "7");
            }
            let (_, mut b) = r.into_parts();
            let mut aborted = false;
            while let Some(f) = b.frame().await {
                if f.is_err() {
                    aborted = true;
                    break;
                }
            }
            assert_eq!(marked, aborted, "only the reset fault cuts the body");
            if aborted {
                format!("{status} reset mid-body")
            } else {
                status.to_string()
            }
        }
    }
}

async fn sequence(app: &App, key: &str, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(outcome(app, key, CHAT).await);
    }
    out
}

fn counts(v: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for o in v {
        *m.entry(o.clone()).or_insert(0) += 1;
    }
    m
}

#[tokio::test]
async fn key_faults_follow_the_rates_and_repeat_for_a_seed() {
    let a = sequence(&flaky("seed: 7, "), "k-flaky", 1000).await;
    let c = counts(&a);
    let expect = [
        ("200", 0.3),
        ("429", 0.2),
        ("500", 0.1),
        ("503", 0.1),
        ("200 after 5 ms", 0.1),
        ("reset", 0.1),
        ("200 reset mid-body", 0.1),
    ];
    assert_eq!(c.len(), expect.len(), "{c:?}");
    for (k, rate) in expect {
        let n = c.get(k).copied().unwrap_or(0) as f64;
        assert!((n - 1000.0 * rate).abs() < 60.0, "{k}: {n} of 1000 ({c:?})");
    }
    // The same seed gives the same outcome for the n-th request.
    assert_eq!(sequence(&flaky("seed: 7, "), "k-flaky", 1000).await, a);
    assert_ne!(sequence(&flaky("seed: 8, "), "k-flaky", 1000).await, a);
    // Without a seed the sequence still repeats (derived from the global
    // seed and the key's name).
    let b = sequence(&flaky(""), "k-flaky", 200).await;
    assert_eq!(sequence(&flaky(""), "k-flaky", 200).await, b);
    // Other keys are untouched.
    let app = flaky("seed: 7, ");
    assert!(sequence(&app, "k-ok", 200).await.iter().all(|o| o == "200"));
}

#[test]
fn concurrency_does_not_change_the_counts() {
    let seq = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(sequence(&flaky("seed: 7, "), "k-flaky", 400));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let par = rt.block_on(async {
        let app = Arc::new(flaky("seed: 7, "));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..400 {
            let app = app.clone();
            set.spawn(async move { outcome(&app, "k-flaky", CHAT).await });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    assert_eq!(counts(&par), counts(&seq));
}

#[tokio::test]
async fn reset_after_first_chunk_cuts_a_stream_after_one_chunk() {
    let r = openai(
        &common::app(),
        &STREAM.replace("\"m\"", "\"gpt-4o-mini\""),
        &[("x-mock-error", "reset-after-first-chunk")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.aborted);
    let data = r.sse_data();
    assert_eq!(
        data.len(),
        2,
        "role chunk and one content chunk: {}",
        r.text()
    );
    assert_eq!(
        data[1]["choices"][0]["delta"]["content"],
        "mock response to"
    );
    assert!(!r.text().contains("[DONE]"));
}

#[tokio::test]
async fn fault_headers_set_retry_after_and_delay() {
    let app = common::app();
    let r = openai(
        &app,
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}"#,
        &[("x-mock-error", "429"), ("x-mock-retry-after", "9")],
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("9"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    let r = anthropic(
        &app,
        r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
        &[("x-mock-error", "429"), ("x-mock-retry-after", "11")],
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("11"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    // A slow answer starts later, streams included.
    let (parts, ()) = Request::post("/v1/chat/completions")
        .header("authorization", "Bearer mock-openai-key-1")
        .header("x-mock-slow-ms", "25")
        .body(())
        .unwrap()
        .into_parts();
    let body =
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    match app.handle(parts, Bytes::from(body)).await {
        Reply::Delayed(r, 25) => assert_eq!(r.status(), 200),
        _ => panic!("x-mock-slow-ms did not delay the stream"),
    }
}

#[tokio::test]
async fn key_faults_answer_in_each_providers_format() {
    let yaml = "providers:\n  a: {kind: anthropic, models: [c], keys: [{name: a, key: ka, faults: {seed: 1, \"429\": 1, retry_after_s: 4}}]}\n  g: {kind: gemini, models: [g], keys: [{name: g, key: kg, faults: {\"503\": 1}}]}\n  z: {kind: azure, models: [d], keys: [{name: z, key: kz, faults: {\"500\": 1}}]}\n";
    let app = App::new(&Config::from_yaml(yaml).unwrap());
    let r = call(
        &app,
        "POST",
        "/v1/messages",
        &[("x-api-key", "ka"), AV],
        r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("4"));
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let r = call(
        &app,
        "POST",
        "/v1beta/models/g:generateContent",
        &[("x-goog-api-key", "kg")],
        r#"{"contents":[{"parts":[{"text":"x"}]}]}"#,
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");
    let r = call(
        &app,
        "POST",
        "/openai/deployments/d/chat/completions?api-version=2024-10-21",
        &[("api-key", "kz")],
        r#"{"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "server_error");
}

#[test]
fn bad_fault_config_is_refused() {
    let base =
        "providers:\n  o: {kind: openai, models: [m], keys: [{name: a, key: k, faults: FAULTS}]}\n";
    for (faults, want) in [
        (
            "{\"429\": 0.6, \"500\": 0.6}",
            "provider o: key a: faults: the rates sum to 1.2",
        ),
        (
            "{slow: 1.5}",
            "provider o: key a: faults.slow must be within 0..=1",
        ),
        ("{slow_ms: 700000}", "faults.slow_ms must be <= 600000"),
        ("{\"502\": 0.1}", "unknown field"),
    ] {
        let e = Config::from_yaml(&base.replace("FAULTS", faults)).unwrap_err();
        assert!(e.contains(want), "{faults}: {e}");
    }
}

#[tokio::test]
async fn reset_after_first_chunk_over_a_socket_is_a_tcp_reset() {
    let app = Arc::new(common::app());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let srv = tokio::spawn(mock_llm::server::serve(l, app));
    let body = r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let req = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer mock-openai-key-1\r\nx-mock-error: reset-after-first-chunk\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let err = loop {
        match s.read(&mut buf).await {
            Ok(0) => panic!("closed without a reset: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("mock response to"), "{text}");
    srv.abort();
}
