#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! Chat Completions, one row per rule: the request, the status and the
//! `param`, `code` and words of OpenAI's answer. Rules: openai-python's
//! `types/chat` and the errors in notes/openai.md §7.

use crate::common::*;
use serde_json::{json, Value};

fn req(extra: Value) -> Value {
    let mut v = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn messages(list: Value) -> Value {
    req(json!({"messages": list}))
}

/// A tool call and its answer, the call carrying `extra` members.
fn call_with(extra: Value) -> Value {
    let mut c =
        json!({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}});
    for (k, x) in extra.as_object().unwrap() {
        c[k] = x.clone();
    }
    messages(json!([{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [c]},
        {"role": "tool", "tool_call_id": "call_1", "content": "r"}]))
}

/// (rule, path, request, status, param, code, words)
type Row = (
    &'static str,
    &'static str,
    Value,
    u16,
    Value,
    Value,
    &'static str,
);

fn rows() -> Vec<Row> {
    let unknown = |p: &str| (json!(p), json!("unknown_parameter"));
    let mut v: Vec<Row> = Vec::new();
    let mut add = |rule, path, body, status, pc: (Value, Value), says| {
        v.push((rule, path, body, status, pc.0, pc.1, says))
    };
    let c = "/v1/chat/completions";
    add(
        "unknown top-level argument",
        c,
        req(json!({"top_k": 5})),
        400,
        (Value::Null, Value::Null),
        "Unrecognized request argument supplied: top_k",
    );
    add(
        "Anthropic's thinking sent to OpenAI",
        c,
        req(json!({"thinking": {"type": "adaptive"}})),
        400,
        (Value::Null, Value::Null),
        "Unrecognized request argument supplied: thinking",
    );
    add(
        "cache_control in a content part",
        c,
        messages(
            json!([{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]),
        ),
        400,
        unknown("messages[0].content[0].cache_control"),
        "Unknown parameter: 'messages[0].content[0].cache_control'.",
    );
    add(
        "a message id",
        c,
        messages(json!([{"role": "user", "content": "hi", "id": "m1"}])),
        400,
        unknown("messages[0].id"),
        "Unknown parameter: 'messages[0].id'.",
    );
    add(
        "a stream's tool call index replayed",
        c,
        call_with(json!({"index": 0})),
        400,
        unknown("messages[1].tool_calls[0].index"),
        "Unknown parameter: 'messages[1].tool_calls[0].index'.",
    );
    add(
        "reasoning text replayed on an assistant message",
        c,
        messages(json!([{"role": "user", "content": "a"},
            {"role": "assistant", "content": "b", "reasoning_content": "r"}, {"role": "user", "content": "c"}])),
        400,
        unknown("messages[1].reasoning_content"),
        "Unknown parameter: 'messages[1].reasoning_content'.",
    );
    add(
        "a file part's data",
        c,
        messages(
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "file", "file": {"data": "AA"}}]}]),
        ),
        400,
        unknown("messages[0].content[1].file.data"),
        "Unknown parameter: 'messages[0].content[1].file.data'.",
    );
    add(
        "an image part on a system message",
        c,
        messages(
            json!([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}, {"role": "user", "content": "hi"}]),
        ),
        400,
        (json!("messages[0].content[0].type"), json!("invalid_value")),
        "Invalid value: 'image_url'. Supported values are: 'text'.",
    );
    add(
        "image detail enum",
        c,
        messages(
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "original"}}]}]),
        ),
        400,
        (
            json!("messages[0].content[0].image_url.detail"),
            json!("invalid_value"),
        ),
        "Invalid value: 'original'. Supported values are: 'auto', 'low', 'high'.",
    );
    add(
        "unknown function member",
        c,
        req(
            json!({"tools": [{"type": "function", "function": {"name": "f", "input_schema": {}}}]}),
        ),
        400,
        unknown("tools[0].function.input_schema"),
        "Unknown parameter: 'tools[0].function.input_schema'.",
    );
    add(
        "cache_control on a tool",
        c,
        req(
            json!({"tools": [{"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral"}}]}),
        ),
        400,
        unknown("tools[0].cache_control"),
        "Unknown parameter: 'tools[0].cache_control'.",
    );
    add(
        "a Responses-shaped tool",
        c,
        req(json!({"tools": [{"type": "function", "name": "f", "parameters": {}}]})),
        400,
        unknown("tools[0].name"),
        "Unknown parameter: 'tools[0].name'.",
    );
    add(
        "response_format.strict",
        c,
        req(
            json!({"response_format": {"type": "json_schema", "strict": true, "json_schema": {"name": "s", "schema": {}}}}),
        ),
        400,
        unknown("response_format.strict"),
        "Unknown parameter: 'response_format.strict'.",
    );
    add(
        "unknown stream_options member",
        c,
        req(json!({"stream": true, "stream_options": {"include_usage": true, "chunk": 1}})),
        400,
        unknown("stream_options.chunk"),
        "Unknown parameter: 'stream_options.chunk'.",
    );
    add("max_tokens above gpt-4o-mini's limit", c, req(json!({"max_tokens": 32000})),
        400, (json!("max_tokens"), json!("invalid_value")), "max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you provided 32000.");
    // Accepted.
    add(
        "the SDK's message and part types",
        c,
        messages(json!([
            {"role": "developer", "content": [{"type": "text", "text": "d"}], "name": "dev"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,AA", "filename": "a.pdf"}}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}]},
            {"role": "user", "content": "again"}])),
        200,
        (Value::Null, Value::Null),
        "",
    );
    add(
        "the SDK's newer parameters",
        c,
        req(
            json!({"prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
            "verbosity": "low", "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": true}}}),
        ),
        200,
        (Value::Null, Value::Null),
        "",
    );
    add(
        "OpenAI-compatible servers keep their own extensions",
        "/mistral/v1/chat/completions",
        json!({"model": "mistral-small-latest", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}),
        200,
        (Value::Null, Value::Null),
        "",
    );
    v
}

#[tokio::test]
async fn each_rule_answers_as_openai_does() {
    let app = app();
    for (rule, path, body, status, param, code, says) in rows() {
        let key = if path.starts_with("/mistral") {
            ("authorization", "Bearer mock-mistral-key-1")
        } else {
            OA
        };
        let r = call(&app, "POST", path, &[key], &body.to_string()).await;
        assert_eq!(r.status, status, "{rule}: {}", r.text());
        if status == 200 {
            continue;
        }
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{rule}: {e}");
        assert_eq!(e["code"], code, "{rule}: {e}");
        assert!(e["message"].as_str().unwrap().contains(says), "{rule}: {e}");
    }
}
