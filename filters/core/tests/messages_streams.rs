//! The Messages front door's stream translators (the Anthropic passthrough,
//! and the adapter around the OpenAI, Azure, Gemini and Bedrock
//! translators) fed one provider stream split at every byte boundary: the
//! output must not depend on the split, and must be a well-formed Anthropic
//! event stream carrying the text, the tool_use input, the stop reason and
//! the usage.

use serde_json::{json, Value};
use tollgate_core::codec::eventstream::event;
use tollgate_core::config::Kind;
use tollgate_core::translate::{messages, Endpoint, Front, ResponseCtx, Usage};

const ANTHROPIC_STREAM: &str = include_str!("fixtures/anthropic_tool_stream.sse");

fn ctx() -> ResponseCtx {
    ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: true,
        include_usage: false,
        created: 1_700_000_000,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: "up-model".into(),
    }
}

fn run(kind: Kind, parts: &[&[u8]]) -> (Vec<u8>, Option<Usage>) {
    let mut t = messages::translator(kind, Front::Messages).stream(&ctx());
    let mut out = Vec::new();
    for p in parts {
        t.feed(p, &mut out);
    }
    t.finish(&mut out);
    (out, t.usage())
}

fn openai_stream() -> Vec<u8> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let evs = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Looking "}), Value::Null),
        chunk(json!({"content": "it up ☀"}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                                   "function": {"name": "get_weather", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
               "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
                                        "prompt_tokens_details": {"cached_tokens": 5}}}),
    ];
    let mut s = Vec::new();
    for e in evs {
        s.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    s.extend_from_slice(b"data: [DONE]\n\n");
    s
}

fn gemini_stream() -> Vec<u8> {
    let evs = [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Looking "}]}, "index": 0}],
               "modelVersion": "gemini-2.0-flash", "responseId": "g1"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "it up ☀"}]}, "index": 0}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]}, "index": 0}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}}),
    ];
    let mut s = Vec::new();
    for e in evs {
        s.extend_from_slice(format!("data: {e}\r\n\r\n").as_bytes());
    }
    s
}

fn bedrock_stream() -> Vec<u8> {
    let mut s = Vec::new();
    for (name, body) in [
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Looking "}}"#,
        ),
        (
            "contentBlockDelta",
            "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"it up ☀\"}}",
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        (
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tu9","name":"get_weather"}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\":"}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"Paris\"}"}}}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":1}"#),
        ("messageStop", r#"{"stopReason":"tool_use"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":12,"outputTokens":7,"totalTokens":19}}"#,
        ),
    ] {
        s.extend(event(name, body.as_bytes()));
    }
    s
}

/// What an Anthropic event stream says, checked for well-formedness on the
/// way: message_start first, blocks started/stopped in order with matching
/// indexes, message_delta then message_stop last, nothing after.
#[derive(Debug, Default, PartialEq)]
struct Said {
    text: String,
    tools: Vec<(String, String, Value)>,
    stop: String,
    output_tokens: u64,
    error: Option<String>,
}

fn read_events(out: &[u8]) -> Said {
    let s = std::str::from_utf8(out).expect("utf8");
    let mut said = Said::default();
    let mut started = false;
    let mut stopped = false;
    let mut open: Option<(u64, String, String, String)> = None;
    let mut next = 0u64;
    for ev in s.split("\n\n").filter(|e| !e.is_empty()) {
        assert!(!stopped, "event after message_stop: {ev}");
        let (name, data) = ev
            .strip_prefix("event: ")
            .and_then(|r| r.split_once("\ndata: "))
            .expect("event and data lines");
        let v: Value = serde_json::from_str(data).expect("json");
        assert_eq!(v["type"], name);
        if name == "error" {
            said.error = Some(v["error"]["type"].as_str().unwrap().to_string());
            stopped = true;
            continue;
        }
        if name != "message_start" {
            assert!(started, "{name} before message_start");
        }
        match name {
            "message_start" => {
                assert!(!started);
                started = true;
                assert!(v["message"]["id"].as_str().unwrap().starts_with("msg_"));
            }
            "content_block_start" => {
                assert!(open.is_none(), "block opened inside a block");
                assert_eq!(v["index"], next);
                let b = &v["content_block"];
                open = Some((
                    next,
                    b["type"].as_str().unwrap().to_string(),
                    b["id"].as_str().unwrap_or("").to_string(),
                    b["name"].as_str().unwrap_or("").to_string(),
                ));
                if b["type"] == "tool_use" {
                    said.tools.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        Value::Null,
                    ));
                }
            }
            "content_block_delta" => {
                let (i, kind, ..) = open.as_ref().expect("delta outside a block");
                assert_eq!(v["index"], *i);
                match kind.as_str() {
                    "text" => said.text.push_str(v["delta"]["text"].as_str().unwrap()),
                    _ => {
                        let t = said.tools.last_mut().unwrap();
                        let mut acc = t.2.as_str().unwrap_or("").to_string();
                        acc.push_str(v["delta"]["partial_json"].as_str().unwrap());
                        t.2 = Value::String(acc);
                    }
                }
            }
            "content_block_stop" => {
                let (i, ..) = open.take().expect("stop without a block");
                assert_eq!(v["index"], i);
                next += 1;
            }
            "message_delta" => {
                assert!(open.is_none());
                said.stop = v["delta"]["stop_reason"].as_str().unwrap().to_string();
                said.output_tokens = v["usage"]["output_tokens"].as_u64().unwrap();
            }
            "message_stop" => stopped = true,
            "ping" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    for t in &mut said.tools {
        if let Value::String(s) = &t.2 {
            t.2 = serde_json::from_str(s).expect("tool input json");
        }
    }
    said
}

fn every_split(kind: Kind, input: &[u8]) -> (Vec<u8>, Option<Usage>) {
    let (whole, usage) = run(kind, &[input]);
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        let (out, u) = run(kind, &[a, b]);
        assert_eq!(out, whole, "{kind:?} split at {i}");
        assert_eq!(u, usage, "{kind:?} split at {i}");
    }
    (whole, usage)
}

#[test]
fn translated_streams_every_split() {
    for (kind, input) in [
        (Kind::Openai, openai_stream()),
        (Kind::Azure, openai_stream()),
        (Kind::Gemini, gemini_stream()),
        (Kind::Bedrock, bedrock_stream()),
    ] {
        let (out, usage) = every_split(kind, &input);
        let said = read_events(&out);
        assert_eq!(said.text, "Looking it up ☀", "{kind:?}");
        assert_eq!(said.tools.len(), 1, "{kind:?}");
        assert_eq!(said.tools[0].1, "get_weather");
        assert_eq!(said.tools[0].2, json!({"city": "Paris"}), "{kind:?}");
        assert!(!said.tools[0].0.is_empty());
        assert_eq!(said.stop, "tool_use", "{kind:?}");
        assert_eq!(said.output_tokens, 7, "{kind:?}");
        assert_eq!(said.error, None);
        let u = usage.expect("usage");
        assert_eq!((u.prompt_tokens, u.completion_tokens), (12, 7), "{kind:?}");
    }
}

#[test]
fn passthrough_stream_every_split_is_untouched_with_usage() {
    let input = ANTHROPIC_STREAM.as_bytes();
    let (out, usage) = every_split(Kind::Anthropic, input);
    assert_eq!(out, input);
    let u = usage.expect("usage");
    assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}");
    let said = read_events(&out);
    assert_eq!(said.stop, "tool_use");
}

#[test]
fn passthrough_counts_anthropic_web_searches() {
    // The final message_delta's usage is cumulative: its count stands.
    let input = ANTHROPIC_STREAM.replace(
        r#""usage":{"output_tokens""#,
        r#""usage":{"server_tool_use":{"web_search_requests":3},"output_tokens""#,
    );
    assert_ne!(input, ANTHROPIC_STREAM);
    let (_, usage) = every_split(Kind::Anthropic, input.as_bytes());
    assert_eq!(usage.map(|u| u.web_searches), Some(3));
}

#[test]
fn byte_by_byte_matches_whole() {
    for (kind, input) in [
        (Kind::Openai, openai_stream()),
        (Kind::Gemini, gemini_stream()),
        (Kind::Bedrock, bedrock_stream()),
        (Kind::Anthropic, ANTHROPIC_STREAM.as_bytes().to_vec()),
    ] {
        let parts: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(kind, &parts).0, run(kind, &[&input]).0, "{kind:?}");
    }
}

#[test]
fn cut_streams_end_with_an_anthropic_error_event() {
    for (kind, input) in [
        (Kind::Openai, openai_stream()),
        (Kind::Gemini, gemini_stream()),
        (Kind::Bedrock, bedrock_stream()),
        (Kind::Anthropic, ANTHROPIC_STREAM.as_bytes().to_vec()),
    ] {
        let cut = &input[..input.len() / 2];
        let (out, _) = run(kind, &[cut]);
        if kind == Kind::Anthropic {
            // The passthrough already sent the cut event's bytes: the error
            // is a whole event after it.
            let text = String::from_utf8(out).unwrap();
            let last = text.trim_end().rsplit("\n\n").next().unwrap().to_string();
            assert!(last.starts_with("event: error\ndata: "), "{last}");
            let v: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
            assert_eq!(v["error"]["type"], "api_error");
            continue;
        }
        let said = read_events(&out);
        assert_eq!(said.error.as_deref(), Some("api_error"), "{kind:?}");
    }
}

#[test]
fn provider_error_event_becomes_anthropic_error() {
    let input = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n\
data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":\"provider_overloaded\"}}\n\n";
    let (out, _) = run(Kind::Openai, &[input]);
    let said = read_events(&out);
    assert_eq!(said.text, "hi");
    assert!(said.error.is_some());
}

/// The last `message_delta` event's usage in an Anthropic event stream.
fn final_usage(out: &[u8]) -> Value {
    let text = String::from_utf8(out.to_vec()).unwrap();
    text.split("\n\n")
        .filter_map(|ev| ev.split_once("data: ").map(|(_, d)| d))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["type"] == "message_delta")
        .last()
        .expect("a message_delta event")["usage"]
        .clone()
}

#[test]
fn bedrock_cache_reads_and_writes_reach_the_final_usage_at_every_split() {
    let mut input = Vec::new();
    for (name, body) in [
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        ("messageStop", r#"{"stopReason":"end_turn"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":12,"outputTokens":7,"cacheReadInputTokens":100,"cacheWriteInputTokens":50,"totalTokens":169}}"#,
        ),
    ] {
        input.extend(event(name, body.as_bytes()));
    }
    let (out, usage) = every_split(Kind::Bedrock, &input);
    assert_eq!(
        final_usage(&out),
        json!({"input_tokens": 12, "output_tokens": 7,
               "cache_read_input_tokens": 100, "cache_creation_input_tokens": 50})
    );
    let u = usage.expect("usage");
    // The usage report (the budget debit) counts cache reads and writes as
    // prompt tokens, and names both.
    assert_eq!(
        (
            u.prompt_tokens,
            u.cached_tokens,
            u.cache_write_tokens,
            u.completion_tokens
        ),
        (162, 100, 50, 7)
    );
}
