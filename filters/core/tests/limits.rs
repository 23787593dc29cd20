//! Reservations that fit the request and concurrency slots, against the
//! in-memory host: a request whose output limit needs more than its Check
//! reserved is topped up before it goes on (or refused in its API's shape);
//! a request the gateway answers itself refunds its reservation; a slot is
//! renewed while its request runs and released by the request's report,
//! which goes at once.

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_core::config::Runtime;
use tollgate_core::flow::{Action, Flow};
use tollgate_core::host::fake::FakeHost;
use tollgate_core::slots::SlotBook;
use tollgate_core::usage::UsageBatch;

const ANSWER: &[u8] = br#"{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}"#;

fn host(path: &str, body: &Value, extra: &[(&str, &str)]) -> FakeHost {
    let body = serde_json::to_vec(body).unwrap();
    let mut h = FakeHost {
        now: 1_700_000_000_000,
        ..FakeHost::default()
    };
    h.req_headers = vec![
        (":method".into(), "POST".into()),
        (":path".into(), path.into()),
        ("x-tollgate-tenant".into(), "demo".into()),
        ("x-tollgate-key-id".into(), "demo-key".into()),
        ("x-tollgate-models".into(), "*".into()),
        ("content-length".into(), body.len().to_string()),
    ];
    for (k, v) in extra {
        h.req_headers.push((k.to_string(), v.to_string()));
    }
    h.req_body = body;
    h
}

fn chat(max_tokens: Option<u64>) -> Value {
    let mut b =
        json!({"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    if let Some(n) = max_tokens {
        b["max_tokens"] = json!(n);
    }
    b
}

/// The request side: headers, then the whole body. The body callback's
/// answer.
fn send(f: &mut Flow, h: &mut FakeHost) -> Action {
    assert_eq!(f.on_request_headers(h, false), Action::Pause);
    let n = h.req_body.len();
    f.on_request_body(h, n, true)
}

fn answer(f: &mut Flow, h: &mut FakeHost) {
    h.resp_headers = vec![
        (":status".into(), "200".into()),
        ("content-type".into(), "application/json".into()),
    ];
    h.resp_body = ANSWER.to_vec();
    f.on_response_headers(h, false);
    let n = h.resp_body.len();
    f.on_response_body(h, n, true);
    f.on_log(h);
}

fn posted(h: &FakeHost, i: usize) -> (String, Value) {
    let (_, path, body) = &h.posts[i];
    (path.clone(), serde_json::from_slice(body).unwrap())
}

const RESERVED: (&str, &str) = ("x-tollgate-reserved", "40@28333333;o=16;u=256");

#[test]
fn a_request_within_its_reservation_goes_on_at_once() {
    let mut h = host("/v1/chat/completions", &chat(Some(16)), &[RESERVED]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    assert_eq!(send(&mut f, &mut h), Action::Continue);
    assert!(h.calls.is_empty(), "no top-up");
    answer(&mut f, &mut h);
    let (path, report) = posted(&h, 0);
    assert_eq!(path, "/v1/usage");
    assert_eq!(
        (&report["reserved"], &report["output_limit"]),
        (&json!(40), &json!(16)),
        "the need is reported: authz-service learns it"
    );
}

#[test]
fn a_request_needing_more_is_topped_up_before_it_goes_on() {
    let mut h = host("/v1/chat/completions", &chat(Some(1000)), &[RESERVED]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    assert_eq!(send(&mut f, &mut h), Action::Pause, "waits for the top-up");
    assert_eq!(h.calls.len(), 1);
    let (cluster, headers, body) = &h.calls[0];
    assert_eq!(cluster, "tollgate_authz_http");
    assert!(headers.contains(&(":path".into(), "/v1/reserve".into())));
    let asked: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        asked,
        json!({"tenant": "demo", "key_id": "demo-key", "reserved": 40, "output": 16, "need": 1000})
    );
    // Already rewritten for the provider: only resumed.
    assert_eq!(
        h.req_header("x-tollgate-cluster").as_deref(),
        Some("openai")
    );
    assert_eq!(h.resumed, 0);
    f.on_call_response(&mut h, 1, 200, br#"{"reserved":1024}"#.to_vec());
    assert_eq!(h.resumed, 1);
    assert!(h.local_reply.is_none());
    answer(&mut f, &mut h);
    let (_, report) = posted(&h, 0);
    assert_eq!(
        (
            &report["reserved"],
            &report["reserved_at"],
            &report["output_limit"]
        ),
        (&json!(1024), &json!(28333333), &json!(1000)),
        "settled against the whole reservation"
    );
}

#[test]
fn a_request_declaring_no_limit_needs_the_tenants_default() {
    let mut h = host("/v1/chat/completions", &chat(None), &[RESERVED]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    assert_eq!(send(&mut f, &mut h), Action::Pause);
    let asked: Value = serde_json::from_slice(&h.calls[0].2).unwrap();
    assert_eq!(asked["need"], 256);
    // Covered by the default: never topped up.
    let mut h = host(
        "/v1/chat/completions",
        &chat(None),
        &[("x-tollgate-reserved", "280;o=256;u=256")],
    );
    let mut f = Flow::new(Arc::new(common::runtime()));
    assert_eq!(send(&mut f, &mut h), Action::Continue);
}

#[test]
fn the_need_is_the_limit_after_the_gateway_lowered_it() {
    let cfg = common::CONFIG.replace(
        r#""models": ["gpt-4o-mini", "gpt-4o", "text-embedding-3-small"]"#,
        r#""models": {"gpt-4o-mini": {"max_output_tokens": 300}}"#,
    );
    let rt = Runtime::from_json(cfg.as_bytes(), &common::env).unwrap();
    let mut h = host("/v1/chat/completions", &chat(Some(32_000)), &[RESERVED]);
    let mut f = Flow::new(Arc::new(rt));
    assert_eq!(send(&mut f, &mut h), Action::Pause);
    let asked: Value = serde_json::from_slice(&h.calls[0].2).unwrap();
    assert_eq!(asked["need"], 300);
}

#[test]
fn a_refused_top_up_answers_in_the_apis_shape_and_refunds() {
    let refused = br#"{"reserved":40,"refused":{"status":429,"message":"Rate limit reached for key demo-key on tokens per minute: limit 2000, remaining 30. Please try again in 29s.","type":"tokens","code":"rate_limit_exceeded","retry_after":29}}"#;
    for (path, body) in [
        ("/v1/chat/completions", chat(Some(1000))),
        (
            "/v1/messages",
            json!({"model": "openai/gpt-4o-mini", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}),
        ),
    ] {
        let mut h = host(path, &body, &[RESERVED]);
        let mut f = Flow::new(Arc::new(common::runtime()));
        assert_eq!(send(&mut f, &mut h), Action::Pause);
        f.on_call_response(&mut h, 1, 200, refused.to_vec());
        assert_eq!(h.resumed, 0);
        let (status, headers, body) = h.local_reply.clone().expect("a reply");
        assert_eq!(status, 429);
        assert!(headers.contains(&("retry-after".into(), "29".into())));
        let body: Value = serde_json::from_slice(&body).unwrap();
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "rate_limit_error");
        } else {
            assert_eq!(body["error"]["code"], "rate_limit_exceeded");
            assert_eq!(body["error"]["type"], "tokens");
        }
        assert!(body.to_string().contains("tokens per minute"), "{body}");
        // Posted with the reply (the next Check finds the refund), once.
        assert_eq!(h.posts.len(), 1);
        f.on_log(&mut h);
        assert_eq!(h.posts.len(), 1);
        let (_, report) = posted(&h, 0);
        assert_eq!(
            report,
            json!({"tenant": "demo", "key_id": "demo-key", "prompt_tokens": 0, "completion_tokens": 0,
                   "reserved": 40, "reserved_at": 28333333}),
            "never forwarded: the whole reservation comes back"
        );
    }
}

#[test]
fn no_answer_to_a_top_up_is_a_503() {
    let mut h = host("/v1/chat/completions", &chat(Some(1000)), &[RESERVED]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    send(&mut f, &mut h);
    f.on_call_response(&mut h, 1, 0, Vec::new());
    let (status, headers, _) = h.local_reply.clone().unwrap();
    assert_eq!(status, 503);
    assert!(headers.contains(&("retry-after".into(), "1".into())));
}

#[test]
fn a_client_gone_before_the_top_up_answered_is_refunded() {
    let mut h = host("/v1/chat/completions", &chat(Some(1000)), &[RESERVED]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    send(&mut f, &mut h);
    f.on_log(&mut h);
    let (_, report) = posted(&h, 0);
    assert_eq!(report["reserved"], 40);
    // A late answer changes nothing.
    f.on_call_response(&mut h, 1, 200, br#"{"reserved":1024}"#.to_vec());
    assert_eq!(h.resumed, 0);
}

#[test]
fn an_error_the_gateway_answers_refunds_the_reservation() {
    let mut h = host(
        "/v1/chat/completions",
        &json!({"model": "nope/nothing", "messages": []}),
        &[RESERVED],
    );
    let mut f = Flow::new(Arc::new(common::runtime()));
    send(&mut f, &mut h);
    assert_eq!(h.local_reply.as_ref().map(|r| r.0), Some(404));
    assert_eq!(h.posts.len(), 1, "posted with the reply");
    f.on_log(&mut h);
    assert_eq!(h.posts.len(), 1);
    let (_, report) = posted(&h, 0);
    assert_eq!(
        (&report["reserved"], &report["completion_tokens"]),
        (&json!(40), &json!(0))
    );
}

#[test]
fn a_report_the_check_asked_for_goes_at_once() {
    let batch = Rc::new(RefCell::new(UsageBatch::default()));
    for (reserved, at_once) in [("40;o=16;u=256", false), ("40;o=16;u=256;now", true)] {
        let mut h = host(
            "/v1/chat/completions",
            &chat(Some(16)),
            &[("x-tollgate-reserved", reserved)],
        );
        let mut f = Flow::new(Arc::new(common::runtime())).with_usage_batch(Rc::clone(&batch));
        assert_eq!(send(&mut f, &mut h), Action::Continue);
        answer(&mut f, &mut h);
        assert_eq!(h.posts.len(), usize::from(at_once), "{reserved}");
    }
    assert_eq!(batch.borrow().len(), 1, "the other one waits for the tick");
}

#[test]
fn a_slot_is_renewed_while_its_request_runs_and_released_by_its_report() {
    let book = Rc::new(RefCell::new(SlotBook::default()));
    let batch = Rc::new(RefCell::new(UsageBatch::default()));
    let mut h = host(
        "/v1/chat/completions",
        &chat(Some(16)),
        &[RESERVED, ("x-tollgate-slot", "ab12;ttl=3000")],
    );
    let mut f = Flow::new(Arc::new(common::runtime()))
        .with_usage_batch(Rc::clone(&batch))
        .with_slot_book(Rc::clone(&book));
    assert_eq!(send(&mut f, &mut h), Action::Continue);
    assert_eq!(h.req_header("x-tollgate-slot"), None, "not sent upstream");
    assert_eq!(book.borrow().len(), 1);
    let renewal: Value =
        serde_json::from_slice(&book.borrow_mut().due(h.now + 1000).unwrap()).unwrap();
    assert_eq!(
        renewal,
        json!([{"tenant": "demo", "key_id": "demo-key", "slot": "ab12"}])
    );
    answer(&mut f, &mut h);
    assert!(book.borrow().is_empty());
    // The release goes at once and alone; the usage waits for the batch.
    assert_eq!(h.posts.len(), 1);
    let (path, report) = posted(&h, 0);
    assert_eq!(path, "/v1/usage");
    assert_eq!(
        report,
        json!({"tenant": "demo", "key_id": "demo-key", "prompt_tokens": 0, "completion_tokens": 0, "slot": "ab12"})
    );
    let batched: Value = serde_json::from_slice(&batch.borrow_mut().take_body().unwrap()).unwrap();
    assert_eq!(batched[0]["completion_tokens"], json!(2));
    assert_eq!(batched[0].get("slot"), None);
    // A request with nothing to settle: only the release.
    let mut h = host(
        "/v1/models",
        &json!({}),
        &[
            ("x-tollgate-reserved", "0"),
            ("x-tollgate-slot", "cd34;ttl=3000"),
        ],
    );
    h.req_headers[0].1 = "GET".into();
    let mut f = Flow::new(Arc::new(common::runtime()))
        .with_usage_batch(Rc::clone(&batch))
        .with_slot_book(Rc::clone(&book));
    f.on_request_headers(&mut h, true);
    f.on_log(&mut h);
    assert_eq!(h.posts.len(), 1);
    assert_eq!(posted(&h, 0).1["slot"], "cd34");
    assert!(batch.borrow().is_empty(), "nothing batched");
}

#[test]
fn every_end_releases_the_slot() {
    let slot = ("x-tollgate-slot", "cd34;ttl=30000");
    // A local error before any provider call: refund and release.
    let mut h = host(
        "/v1/chat/completions",
        &json!({"model": 3}),
        &[RESERVED, slot],
    );
    let mut f = Flow::new(Arc::new(common::runtime()));
    send(&mut f, &mut h);
    assert_eq!(h.local_reply.as_ref().map(|r| r.0), Some(400));
    f.on_log(&mut h);
    let (_, report) = posted(&h, 0);
    assert_eq!(
        (&report["slot"], &report["reserved"]),
        (&json!("cd34"), &json!(40))
    );
    // GET /v1/models, answered by the gateway, with nothing reserved.
    let mut h = host(
        "/v1/models",
        &json!({}),
        &[("x-tollgate-reserved", "0"), slot],
    );
    h.req_headers[0].1 = "GET".into();
    let mut f = Flow::new(Arc::new(common::runtime()));
    f.on_request_headers(&mut h, true);
    f.on_log(&mut h);
    let (_, report) = posted(&h, 0);
    assert_eq!(
        report,
        json!({"tenant": "demo", "key_id": "demo-key", "prompt_tokens": 0, "completion_tokens": 0, "slot": "cd34"})
    );
    // A stream the client left: the usage seen, the reservation kept, the
    // slot released.
    let mut body = chat(Some(16));
    body["stream"] = json!(true);
    let mut h = host("/v1/chat/completions", &body, &[RESERVED, slot]);
    let mut f = Flow::new(Arc::new(common::runtime()));
    assert_eq!(send(&mut f, &mut h), Action::Continue);
    h.resp_headers = vec![
        (":status".into(), "200".into()),
        ("content-type".into(), "text/event-stream".into()),
    ];
    f.on_response_headers(&mut h, false);
    h.resp_body = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n".to_vec();
    let n = h.resp_body.len();
    f.on_response_body(&mut h, n, false);
    f.on_log(&mut h);
    let (_, report) = posted(&h, 0);
    assert_eq!(report["slot"], "cd34");
    assert_eq!(
        report.get("reserved"),
        None,
        "the reservation stays charged"
    );
    // ext_authz refused (no account headers reach the filter): nothing.
    let mut h = host("/v1/chat/completions", &chat(Some(16)), &[]);
    h.req_headers.retain(|(k, _)| !k.starts_with("x-tollgate-"));
    let mut f = Flow::new(Arc::new(common::runtime()));
    f.on_log(&mut h);
    assert!(h.posts.is_empty());
}

#[test]
fn the_report_goes_when_the_answer_ends_before_the_stream_is_logged() {
    // Whole answers and streams: posted in the last body callback (before
    // Envoy passes the last bytes on), not again when the stream is logged.
    let now = ("x-tollgate-reserved", "40;o=16;u=256;now");
    let slot = ("x-tollgate-slot", "ef56;ttl=30000");
    for stream in [false, true] {
        let mut body = chat(Some(16));
        body["stream"] = json!(stream);
        body["stream_options"] = json!({"include_usage": true});
        let mut h = host("/v1/chat/completions", &body, &[now, slot]);
        let book = Rc::new(RefCell::new(SlotBook::default()));
        let mut f = Flow::new(Arc::new(common::runtime())).with_slot_book(Rc::clone(&book));
        assert_eq!(send(&mut f, &mut h), Action::Continue);
        let (ctype, answer) = if stream {
            (
                "text/event-stream",
                b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\ndata: [DONE]\n\n".to_vec(),
            )
        } else {
            ("application/json", ANSWER.to_vec())
        };
        h.resp_headers = vec![
            (":status".into(), "200".into()),
            ("content-type".into(), ctype.into()),
        ];
        f.on_response_headers(&mut h, false);
        h.resp_body = answer;
        let n = h.resp_body.len();
        assert_eq!(f.on_response_body(&mut h, n, true), Action::Continue);
        assert_eq!(h.posts.len(), 1, "stream {stream}");
        assert!(book.borrow().is_empty(), "the slot is released");
        let (_, report) = posted(&h, 0);
        assert_eq!(
            (
                &report["reserved"],
                &report["completion_tokens"],
                &report["slot"]
            ),
            (&json!(40), &json!(2), &json!("ef56")),
            "stream {stream}"
        );
        f.on_log(&mut h);
        assert_eq!(h.posts.len(), 1, "nothing more when logged");
    }
}
