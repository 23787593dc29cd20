//! Prompt-cache breakpoints for clients that send none (issue 39): with
//! `x-tollgate-cache-breakpoints: 1` (set by authz-service from the key's
//! or tenant's policy), Anthropic requests without any `cache_control` get
//! one on the system prompt, the last tool and the latest user turn; a
//! request with markers of its own, or without the opt-in, goes as written.

use crate::common;

use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_core::flow::Flow;
use tollgate_core::host::fake::FakeHost;
use tollgate_core::translate::{add_cache_breakpoints, MAX_BREAKPOINTS};

fn markers(v: &Value) -> usize {
    v.to_string().matches("\"cache_control\"").count()
}

/// The body sent upstream for `body` on `path`, with or without the opt-in.
fn upstream(path: &str, body: &Value, opt_in: bool) -> (Value, Vec<u8>) {
    let bytes = serde_json::to_vec(body).unwrap();
    let mut h = FakeHost {
        req_headers: vec![
            (":method".into(), "POST".into()),
            (":path".into(), path.into()),
            ("x-tollgate-tenant".into(), "demo".into()),
            ("x-tollgate-models".into(), "*".into()),
            (
                "x-tollgate-cache-breakpoints".into(),
                if opt_in { "1" } else { "0" }.into(),
            ),
            ("content-length".into(), bytes.len().to_string()),
        ],
        ..FakeHost::default()
    };
    h.req_body = bytes;
    let mut f = Flow::new(Arc::new(common::runtime()));
    common::send_request(&mut f, &mut h);
    (
        serde_json::from_slice(&h.req_body).unwrap(),
        h.req_body.clone(),
    )
}

fn claude_like() -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You are a coding agent.",
           "tools": [{"name": "Read", "input_schema": {"type": "object"}},
                     {"name": "Bash", "input_schema": {"type": "object"}}],
           "messages": [{"role": "user", "content": "read a.txt"},
                        {"role": "assistant", "content": "reading"},
                        {"role": "user", "content": [{"type": "text", "text": "now b.txt"}]}]})
}

#[test]
fn three_breakpoints_where_the_client_set_none() {
    let mut b = claude_like();
    assert!(add_cache_breakpoints(&mut b));
    assert_eq!(markers(&b), 3);
    assert!(markers(&b) <= MAX_BREAKPOINTS);
    assert_eq!(b["system"][0]["text"], "You are a coding agent.");
    assert_eq!(
        b["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(b["tools"][0].get("cache_control").is_none());
    assert_eq!(b["tools"][1]["cache_control"]["type"], "ephemeral");
    // The latest user turn, not the first.
    assert_eq!(b["messages"][0]["content"], "read a.txt");
    assert_eq!(
        b["messages"][2]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    // A client that set its own markers is left alone.
    let mut own = claude_like();
    own["tools"][0]["cache_control"] = json!({"type": "ephemeral"});
    let before = own.clone();
    assert!(!add_cache_breakpoints(&mut own));
    assert_eq!(own, before);
}

#[test]
fn the_anthropic_passthrough_adds_them_only_when_opted_in() {
    let body = claude_like();
    let (sent, _) = upstream("/v1/messages", &body, true);
    assert_eq!(markers(&sent), 3);
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    // Without the opt-in, the client's bytes go untouched.
    let (_, raw) = upstream("/v1/messages", &body, false);
    assert_eq!(raw, serde_json::to_vec(&body).unwrap());
    // With markers of its own, the bytes go untouched too.
    let mut own = claude_like();
    own["system"] = json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]);
    let (_, raw) = upstream("/v1/messages", &own, true);
    assert_eq!(raw, serde_json::to_vec(&own).unwrap());
}

#[test]
fn openai_requests_translated_to_anthropic_get_them_too() {
    let body = json!({"model": "anthropic/claude-sonnet-4-5", "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]});
    let (sent, _) = upstream("/v1/chat/completions", &body, true);
    assert_eq!(markers(&sent), 3, "{sent}");
    let (sent, _) = upstream("/v1/chat/completions", &body, false);
    assert_eq!(markers(&sent), 0);
}
