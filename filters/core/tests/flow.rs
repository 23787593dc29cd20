//! The request flow against the in-memory host: routing, header rewriting,
//! local replies, response translation, cooldown, usage reports, stats.

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_core::config::Runtime;
use tollgate_core::flow::{Action, Flow};
use tollgate_core::host::fake::FakeHost;
use tollgate_core::keys::XorShift;
use tollgate_core::usage::{Report, UsageBatch};

fn host(method: &str, path: &str, body: &[u8]) -> FakeHost {
    let mut h = FakeHost {
        now: 1_700_000_000_000,
        ..FakeHost::default()
    };
    h.req_headers = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        ("x-tollgate-tenant".into(), "demo".into()),
        ("x-tollgate-key-id".into(), "demo-key".into()),
        ("x-tollgate-models".into(), "*".into()),
        ("authorization".into(), "Bearer tg-demo-key".into()),
        ("content-length".into(), body.len().to_string()),
    ];
    h.req_body = body.to_vec();
    h
}

fn flow() -> Flow {
    Flow::new(Arc::new(common::runtime()))
}

/// Run the request side; returns the flow and whether it was forwarded.
fn request(h: &mut FakeHost, body_eos: bool) -> (Flow, bool) {
    request_with(flow(), h, body_eos)
}

fn request_with(mut f: Flow, h: &mut FakeHost, body_eos: bool) -> (Flow, bool) {
    if f.on_request_headers(h, false) == Action::Continue {
        return (f, true);
    }
    if h.local_reply.is_some() {
        return (f, false);
    }
    let n = h.req_body.len();
    let a = f.on_request_body(h, n, body_eos);
    (f, a == Action::Continue && h.local_reply.is_none())
}

/// Upstream answer; headers already in `h.resp_headers` are kept as extras.
fn respond(f: &mut Flow, h: &mut FakeHost, status: u16, ctype: &str, body: &[u8]) {
    let extra = std::mem::take(&mut h.resp_headers);
    h.resp_headers = vec![
        (":status".into(), status.to_string()),
        ("content-type".into(), ctype.into()),
        ("content-length".into(), body.len().to_string()),
    ];
    h.resp_headers.extend(extra);
    h.resp_body = body.to_vec();
    let held = f.on_response_headers(h, false);
    // Every answer from the provider but a stream holds the headers until
    // its body is complete (a cut body then never reaches the client as 200).
    let stream = ctype.contains("event-stream") || ctype.contains("eventstream");
    let expect_hold = !h.envoy_local_response && (status >= 400 || !stream);
    assert_eq!(held == Action::Pause, expect_hold);
    let n = h.resp_body.len();
    f.on_response_body(h, n, true);
    f.on_log(h);
}

fn reply(h: &FakeHost) -> (u16, Value) {
    let (s, _, b) = h.local_reply.clone().expect("local reply");
    (s, serde_json::from_slice(&b).unwrap())
}

fn chat(model: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .unwrap()
}

const OPENAI_ANSWER: &[u8] = br#"{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}"#;

/// One OpenAI answer of 4 + 2 tokens through a flow using `batch`.
fn answer_into(batch: &Rc<RefCell<UsageBatch>>) -> FakeHost {
    let mut h = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o-mini"));
    let f = flow().with_usage_batch(Rc::clone(batch));
    let (mut f, fwd) = request_with(f, &mut h, true);
    assert!(fwd);
    respond(&mut f, &mut h, 200, "application/json", OPENAI_ANSWER);
    h
}

#[test]
fn batched_usage_is_summed_for_the_worker_to_post() {
    let batch = Rc::new(RefCell::new(UsageBatch::default()));
    for _ in 0..3 {
        let h = answer_into(&batch);
        assert!(h.posts.is_empty(), "nothing posted per answer");
        assert_eq!(
            h.metrics["tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.prompt_tokens"], 4,
            "stats stay per answer"
        );
    }
    let body = batch.borrow_mut().take_body().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!([{"tenant": "demo", "key_id": "demo-key", "model": "openai/gpt-4o-mini", "prompt_tokens": 12, "completion_tokens": 6}])
    );
}

#[test]
fn a_full_batch_is_posted_by_the_answer_that_fills_it() {
    let batch = Rc::new(RefCell::new(UsageBatch::default()));
    for i in 0..UsageBatch::MAX_ENTRIES - 1 {
        batch.borrow_mut().add(Report {
            tenant: "t".into(),
            key_id: format!("k{i}"),
            model: Some("openai/gpt-4o-mini".into()),
            prompt_tokens: 1,
            completion_tokens: 1,
            ..Report::default()
        });
    }
    let h = answer_into(&batch);
    assert_eq!(h.posts.len(), 1);
    let (cluster, path, body) = &h.posts[0];
    assert_eq!(
        (cluster.as_str(), path.as_str()),
        ("tollgate_authz_http", "/v1/usage")
    );
    let sent: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(sent.as_array().unwrap().len(), UsageBatch::MAX_ENTRIES);
    assert_eq!(sent[UsageBatch::MAX_ENTRIES - 1]["key_id"], "demo-key");
    assert!(batch.borrow().is_empty());
}

#[test]
fn the_reservation_and_its_minute_are_echoed_in_the_usage_report() {
    let mut h = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o-mini"));
    h.req_headers
        .push(("x-tollgate-reserved".into(), "500@28333333".into()));
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    assert_eq!(
        h.req_header("x-tollgate-reserved"),
        None,
        "not sent upstream"
    );
    respond(&mut f, &mut h, 200, "application/json", OPENAI_ANSWER);
    let usage: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
    assert_eq!(
        (&usage["reserved"], &usage["reserved_at"]),
        (&json!(500), &json!(28333333))
    );
}

#[test]
fn openai_request_is_rewritten() {
    let mut h = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o-mini"));
    h.random = vec![3]; // slot 3 of [1,1,1,2] → openai-2
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    assert_eq!(
        h.req_header("x-tollgate-cluster").as_deref(),
        Some("openai")
    );
    assert_eq!(
        h.req_header(":path").as_deref(),
        Some("/v1/chat/completions")
    );
    assert_eq!(
        h.req_header("authorization").as_deref(),
        Some("Bearer sk-two")
    );
    for gone in [
        "x-tollgate-tenant",
        "x-tollgate-key-id",
        "x-tollgate-models",
        "x-api-key",
    ] {
        assert_eq!(h.req_header(gone), None, "{gone}");
    }
    assert!(h.route_cleared);
    let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
    assert_eq!(sent["model"], "gpt-4o-mini");
    assert_eq!(
        h.req_header("content-length"),
        Some(h.req_body.len().to_string())
    );

    respond(&mut f, &mut h, 200, "application/json", OPENAI_ANSWER);
    assert_eq!(
        h.resp_body,
        OPENAI_ANSWER.to_vec(),
        "OpenAI bodies pass through untouched"
    );
    assert_eq!(
        h.resp_header("x-tollgate-provider").as_deref(),
        Some("openai")
    );
    assert_eq!(h.posts.len(), 1);
    let (cluster, path, usage) = &h.posts[0];
    assert_eq!(
        (cluster.as_str(), path.as_str()),
        ("tollgate_authz_http", "/v1/usage")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(usage).unwrap(),
        json!({"tenant": "demo", "key_id": "demo-key", "model": "openai/gpt-4o-mini", "prompt_tokens": 4, "completion_tokens": 2})
    );
    assert_eq!(
        h.metrics["tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.requests"],
        1
    );
    assert_eq!(
        h.metrics
            ["tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.prompt_tokens"],
        4
    );
    assert_eq!(
        h.metrics["tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.completion_tokens"],
        2
    );
    assert!(h.metrics.contains_key(
        "tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.upstream_latency_ms"
    ));
    assert!(h.metrics.contains_key(
        "tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o-mini.tokens_per_second"
    ));
    // The facts the access log and the tracer read (filter state).
    let props: std::collections::BTreeMap<_, _> = h
        .properties
        .iter()
        .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    assert_eq!(
        props,
        [
            ("tollgate.cached_tokens", "0"),
            ("tollgate.input_tokens", "4"),
            ("tollgate.key_id", "demo-key"),
            ("tollgate.model", "gpt-4o-mini"),
            ("tollgate.operation", "chat"),
            ("tollgate.output_tokens", "2"),
            ("tollgate.provider", "openai"),
            ("tollgate.tenant", "demo"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect()
    );
}

#[test]
fn compatible_provider_uses_its_base_path() {
    let mut h = host(
        "POST",
        "/v1/chat/completions?x=1",
        &chat("mistral/mistral-small-latest"),
    );
    let (_, fwd) = request(&mut h, true);
    assert!(fwd);
    assert_eq!(
        h.req_header(":path").as_deref(),
        Some("/mistral/v1/chat/completions")
    );
    assert_eq!(
        h.req_header("x-tollgate-cluster").as_deref(),
        Some("mistral")
    );
    assert_eq!(
        h.req_header("authorization").as_deref(),
        Some("Bearer mk-one")
    );
}

#[test]
fn stream_usage_injected_unless_disabled() {
    let body = |m: &str| {
        serde_json::to_vec(
            &json!({"model": m, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .unwrap()
    };
    let mut h = host("POST", "/v1/chat/completions", &body("fast"));
    request(&mut h, true);
    let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    // mistral has "stream_usage": false in the test config.
    let mut h = host(
        "POST",
        "/v1/chat/completions",
        &body("mistral/mistral-small-latest"),
    );
    request(&mut h, true);
    let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
    assert!(sent.get("stream_options").is_none());
}

#[test]
fn embeddings_route() {
    let body = br#"{"model":"openai/text-embedding-3-small","input":["a","b"]}"#;
    let mut h = host("POST", "/v1/embeddings", body);
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    assert_eq!(h.req_header(":path").as_deref(), Some("/v1/embeddings"));
    respond(
        &mut f,
        &mut h,
        200,
        "application/json",
        br#"{"object":"list","data":[],"usage":{"prompt_tokens":2,"total_tokens":2}}"#,
    );
    let u: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
    assert_eq!(
        (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
        (Some(2), Some(0))
    );
}

#[test]
fn anthropic_round_trip() {
    let mut h = host("POST", "/v1/chat/completions", &chat("smart"));
    h.random = vec![1];
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    assert_eq!(h.req_header(":path").as_deref(), Some("/v1/messages"));
    assert_eq!(h.req_header("x-api-key").as_deref(), Some("ak-two"));
    assert_eq!(
        h.req_header("anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(h.req_header("authorization"), None);
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":2}}"#;
    respond(&mut f, &mut h, 200, "application/json", body);
    assert_eq!(
        h.resp_header("content-length"),
        Some(h.resp_body.len().to_string())
    );
    let out: Value = serde_json::from_slice(&h.resp_body).unwrap();
    assert_eq!(out["object"], "chat.completion");
    assert_eq!(out["choices"][0]["message"]["content"], "Hello");
    assert_eq!(out["usage"]["total_tokens"], 9);
    let u: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
    assert_eq!(u["model"], "anthropic/claude-sonnet-4-5");
}

#[test]
fn anthropic_stream_through_flow() {
    let body = br#"{"model":"smart","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut h = host("POST", "/v1/chat/completions", body);
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    h.resp_headers = vec![
        (":status".into(), "200".into()),
        ("content-type".into(), "text/event-stream".into()),
    ];
    f.on_response_headers(&mut h, false);
    let stream = include_str!("fixtures/anthropic_tool_stream.sse").as_bytes();
    let mut client = Vec::new();
    for (i, chunk) in stream.chunks(50).enumerate() {
        h.resp_body = chunk.to_vec();
        let last = (i + 1) * 50 >= stream.len();
        assert_eq!(
            f.on_response_body(&mut h, chunk.len(), last),
            Action::Continue
        );
        client.extend_from_slice(&h.resp_body);
    }
    f.on_log(&mut h);
    let s = String::from_utf8(client).unwrap();
    assert!(s.ends_with("data: [DONE]\n\n"));
    assert!(
        !s.contains("\"usage\""),
        "client did not ask for include_usage"
    );
    let u: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
    assert_eq!(
        (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
        (Some(130), Some(89))
    );
    assert!(h.metrics.contains_key(
        "tollgate.tenant.demo.key.demo-key.provider.anthropic.model.claude-sonnet-4-5.ttft_ms"
    ));
}

#[test]
fn local_replies() {
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "GET",
            "/v1/chat/completions",
            vec![],
            405,
            "method_not_allowed",
        ),
        ("POST", "/v1/completions", chat("fast"), 404, "unknown_url"),
        ("POST", "/admin", chat("fast"), 404, "unknown_url"),
        ("POST", "/v1/models", vec![], 405, "method_not_allowed"),
        (
            "POST",
            "/v1/chat/completions",
            chat("openai/gpt-9"),
            404,
            "model_not_found",
        ),
        (
            "POST",
            "/v1/chat/completions",
            chat("gpt-4o"),
            404,
            "model_not_found",
        ),
        (
            "POST",
            "/v1/chat/completions",
            b"{not json".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            b"\xff\xfe".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            b"[1]".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            br#"{"model":"fast","messages":[]}"#.to_vec(),
            400,
            "invalid_value",
        ),
        (
            "POST",
            "/v1/chat/completions",
            br#"{"model":"fast","messages":[{"role":"user","content":"x"}],"stream":1}"#.to_vec(),
            400,
            "invalid_value",
        ),
        (
            "POST",
            "/v1/chat/completions",
            br#"{"model":"smart","messages":[{"role":"user","content":"x"}],"frobnicate":3}"#
                .to_vec(),
            400,
            "unsupported_parameter",
        ),
        (
            "POST",
            "/v1/embeddings",
            br#"{"model":"openai/text-embedding-3-small"}"#.to_vec(),
            400,
            "invalid_value",
        ),
        (
            "POST",
            "/v1/embeddings",
            br#"{"model":"smart","input":"x"}"#.to_vec(),
            400,
            "unsupported_endpoint",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let mut h = host(method, path, &body);
        let (_, fwd) = request(&mut h, true);
        assert!(!fwd, "{method} {path}");
        let (s, v) = reply(&h);
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {path} {}",
            String::from_utf8_lossy(&body)
        );
        assert!(v["error"]["message"].is_string());
        assert!(v["error"].get("param").is_some() && v["error"].get("type").is_some());
    }
}

#[test]
fn no_body_and_too_large() {
    let mut h = host("POST", "/v1/chat/completions", b"");
    let mut f = flow();
    assert_eq!(f.on_request_headers(&mut h, true), Action::Pause);
    assert_eq!(reply(&h).0, 400);

    let mut h = host("POST", "/v1/chat/completions", b"");
    h.req_headers.retain(|(k, _)| k != "content-length");
    h.req_headers.push(("content-length".into(), "5000".into()));
    let mut f = flow();
    assert_eq!(f.on_request_headers(&mut h, false), Action::Pause);
    // The body is read and discarded, then 413 (no reset mid-upload).
    assert!(h.local_reply.is_none());
    h.req_body = vec![b'x'; 3000];
    assert_eq!(f.on_request_body(&mut h, 3000, false), Action::Pause);
    assert!(h.req_body.is_empty(), "drained");
    assert!(h.local_reply.is_none());
    f.on_request_body(&mut h, 2000, true);
    assert_eq!(reply(&h).1["error"]["code"], "request_too_large");
    assert_eq!(reply(&h).0, 413);

    // Past DRAIN_FACTOR × the limit the 413 goes out at once.
    let mut h = host("POST", "/v1/chat/completions", b"");
    h.req_headers.retain(|(k, _)| k != "content-length");
    h.req_headers
        .push(("content-length".into(), "999999999".into()));
    let mut f = flow();
    f.on_request_headers(&mut h, false);
    f.on_request_body(&mut h, 4096 * 9, false);
    assert_eq!(reply(&h).0, 413);

    // Chunked body over the limit: noticed while buffering, drained, 413.
    let mut h = host("POST", "/v1/chat/completions", &[b' '; 5000]);
    h.req_headers.retain(|(k, _)| k != "content-length");
    let mut f = flow();
    assert_eq!(f.on_request_headers(&mut h, false), Action::Pause);
    assert_eq!(f.on_request_body(&mut h, 1000, false), Action::Pause);
    assert!(h.local_reply.is_none());
    assert_eq!(f.on_request_body(&mut h, 5000, false), Action::Pause);
    assert!(h.req_body.is_empty());
    assert!(h.local_reply.is_none());
    f.on_request_body(&mut h, 10, true);
    assert_eq!(reply(&h).0, 413);
}

#[test]
fn allow_list_enforced() {
    let mut h = host("POST", "/v1/chat/completions", &chat("smart"));
    h.req_headers.retain(|(k, _)| k != "x-tollgate-models");
    h.req_headers
        .push(("x-tollgate-models".into(), "openai/*,fast".into()));
    assert!(!request(&mut h, true).1);
    assert_eq!(reply(&h).1["error"]["code"], "model_not_allowed");
    assert_eq!(reply(&h).0, 403);

    let mut h = host("POST", "/v1/chat/completions", &chat("fast"));
    h.req_headers.retain(|(k, _)| k != "x-tollgate-models");
    h.req_headers
        .push(("x-tollgate-models".into(), "anthropic/*, fast".into()));
    assert!(request(&mut h, true).1, "alias allowed by name");

    // No allow-list header at all: fail closed.
    let mut h = host("POST", "/v1/chat/completions", &chat("fast"));
    h.req_headers.retain(|(k, _)| k != "x-tollgate-models");
    assert!(!request(&mut h, true).1);
    assert_eq!(reply(&h).0, 403);
}

#[test]
fn declared_model_header_must_match_the_body() {
    for (declared, ok) in [
        ("fast", true),
        ("openai/gpt-4o-mini", true),
        ("openai/gpt-4o", false),
        ("smart", false),
    ] {
        let mut h = host("POST", "/v1/chat/completions", &chat("fast"));
        h.req_headers
            .push(("x-tollgate-model".into(), declared.into()));
        let (_, fwd) = request(&mut h, true);
        assert_eq!(fwd, ok, "{declared}");
        if ok {
            assert_eq!(h.req_header("x-tollgate-model"), None, "not forwarded");
        } else {
            assert_eq!(reply(&h).1["error"]["code"], "model_mismatch");
        }
    }
}

#[test]
fn models_list_and_one_model() {
    let mut h = host("GET", "/v1/models", b"");
    h.req_headers.retain(|(k, _)| k != "x-tollgate-models");
    h.req_headers
        .push(("x-tollgate-models".into(), "openai/*,smart".into()));
    let mut f = flow();
    assert_eq!(f.on_request_headers(&mut h, true), Action::Pause);
    let (s, v) = reply(&h);
    assert_eq!(s, 200);
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![
            "openai/gpt-4o",
            "openai/gpt-4o-mini",
            "openai/text-embedding-3-small",
            "fast",
            "smart"
        ]
    );
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["owned_by"], "openai");

    let mut h = host("GET", "/v1/models/smart", b"");
    flow().on_request_headers(&mut h, true);
    assert_eq!(reply(&h).1["id"], "smart");
    for path in ["/v1/models/openai/gpt-4o", "/v1/models/openai%2Fgpt-4o"] {
        let mut h = host("GET", path, b"");
        flow().on_request_headers(&mut h, true);
        assert_eq!(reply(&h).1["id"], "openai/gpt-4o", "{path}");
    }
    let mut h = host("GET", "/v1/models/nope", b"");
    flow().on_request_headers(&mut h, true);
    assert_eq!(reply(&h).0, 404);
}

#[test]
fn one_model_id_is_percent_decoded() {
    let rt = Arc::new(
        Runtime::from_json(
            br#"{"providers":{"bedrock":{"kind":"bedrock","cluster":"bedrock","region":"us-east-1",
              "models":["anthropic.claude-3-haiku-20240307-v1:0"],
              "keys":[{"id":"b1","access_key_id":"AKID","value":"secret"}]}}}"#,
            &|_| None,
        )
        .unwrap(),
    );
    let want = "bedrock/anthropic.claude-3-haiku-20240307-v1:0";
    for path in [
        "/v1/models/bedrock/anthropic.claude-3-haiku-20240307-v1:0",
        "/v1/models/bedrock%2Fanthropic.claude-3-haiku-20240307-v1%3A0",
        "/v1/models/bedrock%2fanthropic%2Eclaude-3-haiku-20240307-v1%3a0",
    ] {
        let mut h = host("GET", path, b"");
        Flow::new(Arc::clone(&rt)).on_request_headers(&mut h, true);
        let (status, v) = reply(&h);
        assert_eq!((status, v["id"].as_str()), (200, Some(want)), "{path}");
    }
    // Not UTF-8 once decoded: an OpenAI 404, not a crash.
    let mut h = host("GET", "/v1/models/bedrock%2F%FF", b"");
    Flow::new(rt).on_request_headers(&mut h, true);
    let (status, v) = reply(&h);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );
}

#[test]
fn cooldown_after_429_and_401_is_shared_and_expires() {
    let mut h = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o"));
    h.random = vec![0]; // openai-1
    let (mut f, _) = request(&mut h, true);
    assert_eq!(
        h.req_header("authorization").as_deref(),
        Some("Bearer sk-one")
    );
    respond(
        &mut f,
        &mut h,
        429,
        "application/json",
        br#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
    );
    assert_eq!(h.resp_header(":status").as_deref(), Some("429"));
    assert_eq!(
        h.resp_header("x-ratelimit-remaining-requests"),
        None,
        "provider key limits are not the client's"
    );
    let e: Value = serde_json::from_slice(&h.resp_body).unwrap();
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    // The provider is named, never the key.
    assert_eq!(e["error"]["message"], "provider openai: Rate limit reached");
    assert!(h.posts.is_empty(), "no usage on errors");
    assert_eq!(
        h.metrics
            ["tollgate.tenant.demo.key.demo-key.provider.openai.model.gpt-4o.errors.rate_limited"],
        1
    );
    let shared = h.shared.clone();

    // Next requests (same shared data, any worker) skip openai-1.
    for r in 0..20 {
        let mut h2 = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o"));
        h2.shared = shared.clone();
        h2.now = 1_700_000_000_000 + 29_000;
        h2.random = vec![r];
        request(&mut h2, true);
        assert_eq!(
            h2.req_header("authorization").as_deref(),
            Some("Bearer sk-two")
        );
    }
    // After the cooldown it is used again.
    let mut h3 = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o"));
    h3.shared = shared.clone();
    h3.now = 1_700_000_000_000 + 30_001;
    h3.random = vec![0];
    request(&mut h3, true);
    assert_eq!(
        h3.req_header("authorization").as_deref(),
        Some("Bearer sk-one")
    );

    // 401 on the other key too: every key cooling → 503.
    let mut h4 = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o"));
    h4.shared = shared;
    h4.now = 1_700_000_000_000 + 1_000;
    let (mut f4, _) = request(&mut h4, true);
    respond(
        &mut f4,
        &mut h4,
        401,
        "application/json",
        br#"{"error":{"message":"Incorrect API key provided: sk-two"}}"#,
    );
    assert_eq!(h4.resp_header(":status").as_deref(), Some("502"));
    assert!(
        !String::from_utf8_lossy(&h4.resp_body).contains("sk-two"),
        "provider auth errors are not echoed"
    );
    let mut h5 = host("POST", "/v1/chat/completions", &chat("openai/gpt-4o"));
    h5.shared = h4.shared.clone();
    h5.now = 1_700_000_000_000 + 2_000;
    assert!(!request(&mut h5, true).1);
    assert_eq!(reply(&h5).0, 503);
    assert_eq!(reply(&h5).1["error"]["code"], "no_provider_key_available");
    for l in h4.logs.borrow().iter().chain(h.logs.borrow().iter()) {
        assert!(!l.contains("sk-"), "key value in log: {l}");
    }
}

#[test]
fn envoy_local_replies_pass_through_untouched() {
    let mut h = host("POST", "/v1/chat/completions", &chat("smart"));
    let (mut f, _) = request(&mut h, true);
    h.envoy_local_response = true;
    let body = br#"{"error":{"message":"Tollgate is at capacity","type":"server_error","code":"gateway_overloaded"}}"#;
    respond(&mut f, &mut h, 503, "application/json", body);
    assert_eq!(h.resp_body, body.to_vec());
    assert_eq!(h.resp_header(":status").as_deref(), Some("503"));
    assert!(
        h.shared.borrow().is_empty(),
        "no key cooldown for Envoy's own replies"
    );
    assert_eq!(
        h.metrics["tollgate.tenant.demo.key.demo-key.provider.anthropic.model.claude-sonnet-4-5.errors.gateway"],
        1
    );
}

#[test]
fn anthropic_529_becomes_503() {
    let mut h = host("POST", "/v1/chat/completions", &chat("smart"));
    let (mut f, _) = request(&mut h, true);
    respond(
        &mut f,
        &mut h,
        529,
        "application/json",
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    assert_eq!(h.resp_header(":status").as_deref(), Some("503"));
    let e: Value = serde_json::from_slice(&h.resp_body).unwrap();
    assert_eq!(e["error"]["message"], "provider anthropic: Overloaded");
    assert_eq!(
        h.metrics["tollgate.tenant.demo.key.demo-key.provider.anthropic.model.claude-sonnet-4-5.errors.upstream_5xx"],
        1
    );
}

#[test]
fn weighted_split_over_1000_requests() {
    let mut rng = XorShift::new(2024);
    let mut one = 0;
    for _ in 0..1000 {
        let mut h = host("POST", "/v1/chat/completions", &chat("fast"));
        h.random = vec![rng.next_u32()];
        request(&mut h, true);
        if h.req_header("authorization").as_deref() == Some("Bearer sk-one") {
            one += 1;
        }
    }
    // Weights 3:1 → 750 expected; wide bounds.
    assert!((650..850).contains(&one), "openai-1 got {one}/1000");
}

/// A header of a [`FakeHost`] call.
fn call_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn titan_runtime() -> Arc<Runtime> {
    Arc::new(
        Runtime::from_json(
            br#"{"providers":{"bedrock":{"kind":"bedrock","cluster":"bedrock","region":"us-east-1",
              "models":["amazon.titan-embed-text-v2:0"],
              "keys":[{"id":"b1","access_key_id":"AKID","value":"secret"}]}},
              "usage_flush_ms":0}"#,
            &|_| None,
        )
        .unwrap(),
    )
}

fn titan_answer(values: &[f64], tokens: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"embedding": values, "inputTextTokenCount": tokens})).unwrap()
}

/// Several inputs to Bedrock Titan (one input per call): one signed call
/// per input, answers merged in request order whatever order they arrive in.
#[test]
fn titan_embeddings_fan_out_and_merge_in_order() {
    let body = serde_json::to_vec(&json!({"model": "bedrock/amazon.titan-embed-text-v2:0",
        "input": ["alpha", "beta", "gamma"], "dimensions": 2}))
    .unwrap();
    let mut h = host("POST", "/v1/embeddings", &body);
    let mut f = Flow::new(titan_runtime());
    assert_eq!(f.on_request_headers(&mut h, false), Action::Pause);
    assert_eq!(f.on_request_body(&mut h, body.len(), true), Action::Pause);
    assert!(h.local_reply.is_none(), "nothing answered before the calls");
    assert_eq!(h.calls.len(), 3);
    assert_eq!(
        h.metrics
            .get("tollgate.tenant.demo.key.demo-key.provider.bedrock.model.amazon_titan-embed-text-v2_0.requests"),
        Some(&1),
        "one client request, however many calls"
    );
    for (i, (cluster, headers, call_body)) in h.calls.iter().enumerate() {
        assert_eq!(cluster, "bedrock");
        let get = |n: &str| call_header(headers, n);
        assert_eq!(get(":method"), Some("POST"));
        assert_eq!(
            get(":path"),
            Some("/model/amazon.titan-embed-text-v2%3A0/invoke")
        );
        assert_eq!(
            get(":authority"),
            Some("bedrock-runtime.us-east-1.amazonaws.com")
        );
        assert!(get("authorization")
            .unwrap()
            .starts_with("AWS4-HMAC-SHA256 Credential=AKID/"));
        let v: Value = serde_json::from_slice(call_body).unwrap();
        assert_eq!(
            v,
            json!({"inputText": (["alpha", "beta", "gamma"][i]), "dimensions": 2})
        );
    }
    let signatures: std::collections::HashSet<_> = h
        .calls
        .iter()
        .map(|(_, hs, _)| {
            hs.iter()
                .find(|(k, _)| k == "authorization")
                .unwrap()
                .1
                .clone()
        })
        .collect();
    assert_eq!(signatures.len(), 3, "each call is signed for its own body");
    // Answers arrive out of order; unknown tokens are ignored.
    f.on_call_response(&mut h, 3, 200, titan_answer(&[3.0, 3.5], 3));
    f.on_call_response(&mut h, 99, 200, titan_answer(&[9.0, 9.0], 9));
    f.on_call_response(&mut h, 1, 200, titan_answer(&[1.0, 1.5], 1));
    assert!(h.local_reply.is_none(), "one call still out");
    f.on_call_response(&mut h, 2, 200, titan_answer(&[2.0, 2.5], 2));
    let (status, headers, _) = h.local_reply.clone().unwrap();
    assert!(headers.contains(&("x-tollgate-provider".into(), "bedrock".into())));
    let (_, v) = reply(&h);
    assert_eq!(status, 200);
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i);
        assert_eq!(item["embedding"], json!([i as f64 + 1.0, i as f64 + 1.5]));
    }
    assert_eq!(v["usage"], json!({"prompt_tokens": 6, "total_tokens": 6}));
    // The reply passes back through the filter untouched; usage is reported.
    h.resp_headers = vec![(":status".into(), "200".into())];
    h.envoy_local_response = true;
    assert_eq!(f.on_response_headers(&mut h, false), Action::Continue);
    f.on_log(&mut h);
    let report: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
    assert_eq!(report["model"], "bedrock/amazon.titan-embed-text-v2:0");
    assert_eq!(report["prompt_tokens"], 6);
    assert!(
        h.metrics.keys().all(|k| !k.contains("errors.")),
        "{:?}",
        h.metrics
    );
}

#[test]
fn titan_fan_out_failure_is_the_first_in_order_and_cools_the_key() {
    let body = serde_json::to_vec(&json!({"model": "bedrock/amazon.titan-embed-text-v2:0",
        "input": ["a", "b"]}))
    .unwrap();
    let mut h = host("POST", "/v1/embeddings", &body);
    let mut f = Flow::new(titan_runtime());
    f.on_request_headers(&mut h, false);
    assert_eq!(f.on_request_body(&mut h, body.len(), true), Action::Pause);
    f.on_call_response(
        &mut h,
        2,
        429,
        br#"{"message":"Too many requests"}"#.to_vec(),
    );
    f.on_call_response(&mut h, 1, 200, titan_answer(&[1.0], 1));
    let (status, v) = reply(&h);
    assert_eq!(status, 429);
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(h.shared.borrow().contains_key("tollgate.cooldown.b1"));

    // No answer at all (timeout, connect failure): 502, not a hang.
    let mut h = host("POST", "/v1/embeddings", &body);
    let mut f = Flow::new(titan_runtime());
    f.on_request_headers(&mut h, false);
    f.on_request_body(&mut h, body.len(), true);
    f.on_call_response(&mut h, 1, 0, Vec::new());
    f.on_call_response(&mut h, 2, 200, titan_answer(&[1.0], 1));
    let (status, v) = reply(&h);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (502, Some("upstream_unavailable"))
    );

    // Too many inputs: refused before any call.
    let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    let body = serde_json::to_vec(
        &json!({"model": "bedrock/amazon.titan-embed-text-v2:0", "input": many}),
    )
    .unwrap();
    let mut h = host("POST", "/v1/embeddings", &body);
    let mut f = Flow::new(titan_runtime());
    f.on_request_headers(&mut h, false);
    f.on_request_body(&mut h, body.len(), true);
    let (status, v) = reply(&h);
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("input")));
    assert!(h.calls.is_empty());
}

#[test]
fn passthrough_body_is_edited_in_place() {
    // The model after a long message, a stream without include_usage: the
    // provider gets the client's bytes with only the model and the stream
    // option changed, and the tail after the model is never copied back.
    let text = "line with \"quotes\" and \\ backslashes\n".repeat(40);
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":{}}}],"stream":true,"model":"fast","temperature":0.5}}"#,
        serde_json::to_string(&text).unwrap()
    );
    let mut h = host("POST", "/v1/chat/completions", body.as_bytes());
    let (_, fwd) = request(&mut h, true);
    assert!(fwd);
    let sent = String::from_utf8(h.req_body.clone()).unwrap();
    assert_eq!(
        sent,
        body.replacen('{', r#"{"stream_options":{"include_usage":true},"#, 1)
            .replace(r#""model":"fast""#, r#""model":"gpt-4o-mini""#)
    );
    assert_eq!(h.req_header("content-length"), Some(sent.len().to_string()));
    // An existing stream_options keeps its other fields; null becomes one.
    for (given, want) in [
        (r#"{"x":1}"#, json!({"x": 1, "include_usage": true})),
        ("null", json!({"include_usage": true})),
        (r#"{"include_usage":false}"#, json!({"include_usage": true})),
    ] {
        let body = format!(
            r#"{{"model":"openai/gpt-4o","stream":true,"stream_options":{given},"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        let mut h = host("POST", "/v1/chat/completions", body.as_bytes());
        assert!(request(&mut h, true).1);
        let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
        assert_eq!(sent["stream_options"], want, "{given}");
        assert_eq!(sent["model"], "gpt-4o");
    }
}

#[test]
fn malformed_passthrough_bodies_get_an_openai_400() {
    for body in [
        &br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"a"}]"#[..],
        br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"a	b"}]}"#,
        br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"\x"}]}"#,
        br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"a"}],}"#,
        br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"a"}]} {}"#,
        br#"{"model":"openai/gpt-4o","model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"a"}]}"#,
        br#"{"messages":[{"role":"user","content":"a"}],"model":"openai/gpt-4o","n":01}"#,
    ] {
        let mut h = host("POST", "/v1/chat/completions", body);
        let (_, fwd) = request(&mut h, true);
        assert!(!fwd, "{}", String::from_utf8_lossy(body));
        let (status, e) = reply(&h);
        assert_eq!(status, 400);
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert_eq!(e["error"]["code"], "invalid_json", "{e}");
        assert_eq!(h.req_body, body.to_vec(), "nothing was rewritten");
    }
    let mut h = host(
        "POST",
        "/v1/chat/completions",
        br#"{"messages":[{"role":"user"},{"content":"x"}],"model":"openai/gpt-4o"}"#,
    );
    request(&mut h, true);
    let (status, e) = reply(&h);
    assert_eq!(
        (status, e["error"]["param"].as_str()),
        (400, Some("messages[1].role"))
    );
}

const ANTHROPIC_ANSWER: &[u8] = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":2}}"#;
const OPENAI_STREAM: &[u8] = b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n";

/// Host calls of one request on a main path: (request side, response side
/// with the log), each a call across the Wasm boundary in Envoy. A
/// regression guard: a new call per request must be a deliberate change
/// here.
fn host_calls(model: &str, stream: bool, ctype: &str, answer: &[u8]) -> (u32, u32) {
    let body = serde_json::to_vec(&json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]}))
    .unwrap();
    // The worker's state (metric ids, usage batch) is warm after its first
    // request: the second one is measured.
    let rt = Arc::new(common::runtime());
    let (metrics, batch) = (Rc::default(), Rc::default());
    let mut last = (0, 0);
    for _ in 0..2 {
        let mut h = host("POST", "/v1/chat/completions", &body);
        h.req_headers
            .push(("user-agent".into(), "OpenAI/Python".into()));
        h.req_headers.push(("x-request-id".into(), "r-1".into()));
        h.resp_headers = vec![("x-request-id".into(), "p-1".into())];
        let f = Flow::new(Arc::clone(&rt))
            .with_metrics(Rc::clone(&metrics))
            .with_usage_batch(Rc::clone(&batch));
        let (mut f, fwd) = request_with(f, &mut h, true);
        assert!(fwd);
        let request_side = h.host_call_count();
        respond(&mut f, &mut h, 200, ctype, answer);
        assert!(h.local_reply.is_none());
        eprintln!("{model} stream={stream}: {:?}", h.host_calls.borrow());
        last = (request_side, h.host_call_count() - request_side);
    }
    last
}

#[test]
fn host_calls_per_request() {
    let calls = [
        host_calls("fast", false, "application/json", OPENAI_ANSWER),
        host_calls("fast", true, "text/event-stream", OPENAI_STREAM),
        host_calls("smart", false, "application/json", ANTHROPIC_ANSWER),
    ];
    // OpenAI passthrough, OpenAI stream, OpenAI→Anthropic.
    assert_eq!(calls, [(13, 14), (13, 17), (13, 16)]);
}

/// `resilient`: openai first, then anthropic.
fn fallback_flow() -> Flow {
    let config = common::CONFIG.replace(
        r#""aliases": {"#,
        r#""aliases": {"resilient": ["openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5"], "#,
    );
    Flow::new(Arc::new(
        Runtime::from_json(config.as_bytes(), &common::env).unwrap(),
    ))
}

/// A failed final answer on the first target: held, and the request sent
/// to the next target with a call, translated for it.
fn fail_first_target(stream: bool) -> (Flow, FakeHost) {
    let body = serde_json::to_vec(&json!({"model": "resilient", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]}))
    .unwrap();
    let mut h = host("POST", "/v1/chat/completions", &body);
    let (mut f, fwd) = request_with(fallback_flow(), &mut h, true);
    assert!(fwd);
    assert_eq!(
        h.req_header("x-tollgate-cluster").as_deref(),
        Some("openai")
    );
    h.resp_headers = vec![
        (":status".into(), "503".into()),
        ("content-type".into(), "application/json".into()),
    ];
    h.resp_body = br#"{"error":{"message":"down"}}"#.to_vec();
    assert_eq!(f.on_response_headers(&mut h, false), Action::Pause);
    assert_eq!(f.on_response_body(&mut h, 27, true), Action::Pause);
    assert!(h.local_reply.is_none());
    assert_eq!(h.calls.len(), 1);
    let (cluster, headers, call_body) = &h.calls[0];
    assert_eq!(cluster, "anthropic");
    let header = |n: &str| call_header(headers, n);
    assert_eq!(header(":path"), Some("/v1/messages"));
    assert_eq!(header(":method"), Some("POST"));
    assert_eq!(header("x-api-key"), Some("ak-one"));
    assert_eq!(header("authorization"), None, "the client's key stays");
    assert_eq!(header("x-tollgate-cluster"), None);
    assert_eq!(header("x-envoy-max-retries"), None);
    assert_eq!(header("x-tollgate-tenant"), None);
    let sent: Value = serde_json::from_slice(call_body).unwrap();
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    assert_eq!(
        header("content-length"),
        Some(call_body.len().to_string().as_str())
    );
    (f, h)
}

#[test]
fn a_failed_first_target_is_answered_by_the_fallback_within_the_request() {
    let (mut f, mut h) = fail_first_target(false);
    f.on_call_response(&mut h, 1, 200, ANTHROPIC_ANSWER.to_vec());
    let (status, headers, _) = h.local_reply.clone().unwrap();
    assert_eq!(status, 200);
    assert!(headers.contains(&("x-tollgate-provider".into(), "anthropic".into())));
    let (_, body) = reply(&h);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello");
    // A failed answer's body that still arrives is not passed on.
    assert_eq!(f.on_response_body(&mut h, 0, true), Action::Continue);
    f.on_log(&mut h);
    // The fallback's usage and model are reported.
    let (_, _, report) = h.posts.last().expect("usage report");
    let report: Value = serde_json::from_slice(report).unwrap();
    let report = if report.is_array() {
        report[0].clone()
    } else {
        report
    };
    assert_eq!(report["model"], "anthropic/claude-sonnet-4-5", "{report}");
    assert_eq!(report["prompt_tokens"], 7);
    assert_eq!(report["completion_tokens"], 2);
    assert_eq!(
        h.metrics
            .get("tollgate.tenant.demo.key.demo-key.provider.anthropic.model.claude-sonnet-4-5.fallbacks")
            .copied(),
        Some(1),
        "{:?}",
        h.metrics
    );
}

#[test]
fn a_stream_served_by_the_fallback_comes_whole_and_translated() {
    let (mut f, mut h) = fail_first_target(true);
    let events = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":7,\"output_tokens\":0}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    f.on_call_response(&mut h, 1, 200, events.to_vec());
    let (status, headers, body) = h.local_reply.clone().unwrap();
    assert_eq!(status, 200);
    assert!(headers.contains(&("content-type".into(), "text/event-stream".into())));
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains(r#""content":"Hi""#), "{text}");
    assert!(text.contains(r#""model":"claude-sonnet-4-5""#), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
}

#[test]
fn every_target_failing_is_the_last_ones_error() {
    let (mut f, mut h) = fail_first_target(false);
    f.on_call_response(
        &mut h,
        1,
        529,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.to_vec(),
    );
    let (status, body) = reply(&h);
    assert_eq!(status, 503);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("provider anthropic:"), "{body}");
    assert!(!body.to_string().contains("ak-one") && !body.to_string().contains("sk-"));
    // No answer at all (connect failure, timeout): a 502 naming it too.
    let (mut f, mut h) = fail_first_target(false);
    f.on_call_response(&mut h, 1, 0, Vec::new());
    let (status, body) = reply(&h);
    assert_eq!(status, 502);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("provider anthropic:"));
}

#[test]
fn a_model_without_fallbacks_keeps_a_failed_answer() {
    let mut h = host("POST", "/v1/chat/completions", &chat("fast"));
    let (mut f, fwd) = request(&mut h, true);
    assert!(fwd);
    respond(
        &mut f,
        &mut h,
        503,
        "application/json",
        br#"{"error":{"message":"down"}}"#,
    );
    assert!(h.calls.is_empty() && h.local_reply.is_none());
    assert_eq!(h.resp_header(":status").as_deref(), Some("503"));
}

#[test]
fn a_model_with_fallbacks_costs_no_host_call_more_when_it_succeeds() {
    let count = |mut f: Flow, model: &str| {
        let mut h = host("POST", "/v1/chat/completions", &chat(model));
        f = request_with(f, &mut h, true).0;
        respond(&mut f, &mut h, 200, "application/json", OPENAI_ANSWER);
        assert!(h.local_reply.is_none() && h.calls.is_empty());
        h.host_call_count()
    };
    // `fast` and `resilient` both serve openai/gpt-4o-mini.
    assert_eq!(count(fallback_flow(), "resilient"), count(flow(), "fast"));
}

/// A flow whose config also names `gpt-4o-mini` as itself (nothing to edit)
/// and takes bodies up to 1 MiB.
fn roomy_flow() -> Flow {
    let config = common::CONFIG
        .replace(
            r#""aliases": {"#,
            r#""aliases": {"gpt-4o-mini": "openai/gpt-4o-mini", "#,
        )
        .replace(r#""max_body_bytes": 4096"#, r#""max_body_bytes": 1048576"#);
    Flow::new(Arc::new(
        Runtime::from_json(config.as_bytes(), &common::env).unwrap(),
    ))
}

/// A small passthrough body is written back whole, so that Envoy holds it
/// in a slice of its own size rather than in the 16 KiB it was read into
/// (kept for retries while the answer is awaited); a body past
/// `COMPACT_BODY_MAX` has only its start edited, its tail never copied.
#[test]
fn small_bodies_are_written_whole_and_large_ones_edited_at_their_start() {
    use tollgate_core::flow::COMPACT_BODY_MAX;
    // The model first, as the OpenAI SDKs send it.
    let chat = |model: &str, filler: usize| {
        let content = "x".repeat(filler);
        format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"{content}"}}]}}"#)
            .into_bytes()
    };
    let cases = [
        // (model, filler, expected upstream model)
        ("openai/gpt-4o-mini", 10, "gpt-4o-mini"),
        ("gpt-4o-mini", 10, "gpt-4o-mini"),
        ("openai/gpt-4o-mini", COMPACT_BODY_MAX - 100, "gpt-4o-mini"),
        ("openai/gpt-4o-mini", COMPACT_BODY_MAX + 1, "gpt-4o-mini"),
        ("gpt-4o-mini", COMPACT_BODY_MAX + 1, "gpt-4o-mini"),
    ];
    for (model, filler, upstream) in cases {
        let body = chat(model, filler);
        let mut h = host("POST", "/v1/chat/completions", &body);
        let (_f, fwd) = request_with(roomy_flow(), &mut h, true);
        assert!(fwd, "{model} {filler}");
        let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
        assert_eq!(sent["model"], upstream);
        assert_eq!(
            sent["messages"][0]["content"].as_str().unwrap().len(),
            filler
        );
        // Envoy reads a body into 16 KiB slices.
        let expected = if body.len() <= 16 * 1024 {
            vec![(body.len(), h.req_body.len())]
        } else if model.contains('/') {
            let prefix = format!(r#"{{"model":"{model}""#).len();
            vec![(prefix, prefix - "openai/".len())]
        } else {
            vec![]
        };
        assert_eq!(h.req_body_writes, expected, "{model}, {} bytes", body.len());
    }
}

/// A large translated body reaches Envoy as the plan's upstream body,
/// written in slices of 16 KiB (`WRITE_MAX`) and the rest: the first write
/// replaces the client's body, the others go at its end.
#[test]
fn a_large_translated_body_is_written_in_slices() {
    use tollgate_core::plan::{plan, RequestFacts, WRITE_MAX};
    use tollgate_core::translate::{Endpoint, Front};
    let long = r#"fn main() {\n    println!(\"hi\"); // a\/b caf\u00e9\n}\n"#.repeat(1200);
    let short = r#"tool \"output\"\n"#.repeat(100);
    // Lifted (long), and lifted (short), or not (tiny) but joined with the rest.
    for (first, tiny) in [(&short, "ok"), (&long, r"\u0000")] {
        let body = format!(
            r#"{{"model":"anthropic/claude-sonnet-4-5","max_tokens":64,"messages":[{{"role":"system","content":"{first}"}},{{"role":"user","content":"{long}"}},{{"role":"assistant","content":"{tiny}"}},{{"role":"user","content":"{short}"}}]}}"#
        )
        .into_bytes();
        let facts = RequestFacts {
            endpoint: Endpoint::Chat,
            front: Front::OpenAi,
            body: &body,
            header_names: None,
            allowed: "*",
            declared_model: None,
            now_ms: 1,
            random: 0,
            tenant: "",
            session_header: None,
            cache_breakpoints: false,
        };
        let rt = common::runtime();
        let expected = plan(&rt, &facts, &|_| 0).unwrap().upstream_body(&body);

        let mut h = host("POST", "/v1/chat/completions", &body);
        let (_f, fwd) = request_with(roomy_flow(), &mut h, true);
        assert!(fwd);
        assert_eq!(h.req_body, expected);
        let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
        assert_eq!(sent["model"], "claude-sonnet-4-5");
        let text: Value = serde_json::from_str(&format!(r#""{long}""#)).unwrap();
        assert_eq!(sent["messages"][0]["content"][0]["text"], text);
        let slices = expected.len().div_ceil(WRITE_MAX);
        assert_eq!(h.req_body_writes, vec![(body.len(), WRITE_MAX)]);
        assert_eq!(h.req_body_appends.len(), slices - 1);
        assert!(h.req_body_appends[..slices - 2]
            .iter()
            .all(|&n| n == WRITE_MAX));
    }
}

/// Writing an unedited small body back only saves memory: a host that
/// refuses it does not fail the request; a refused edit still does.
#[test]
fn a_refused_write_fails_only_an_edited_body() {
    let body = br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
    let mut h = host("POST", "/v1/chat/completions", body);
    h.refuse_body_writes = true;
    let (_f, fwd) = request_with(roomy_flow(), &mut h, true);
    assert!(fwd);
    assert_eq!(h.req_body_writes, vec![(body.len(), body.len())]);
    assert_eq!(h.req_body, body.to_vec());

    let body = br#"{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
    let mut h = host("POST", "/v1/chat/completions", body);
    h.refuse_body_writes = true;
    let (_f, fwd) = request_with(roomy_flow(), &mut h, true);
    assert!(!fwd);
    assert_eq!(h.local_reply.as_ref().map(|r| r.0), Some(500));
}
