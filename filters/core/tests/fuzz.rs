//! Bounded randomized fuzzing (cargo-fuzz needs a nightly toolchain; this
//! runs on stable inside `cargo test`). Seeds are valid requests, responses,
//! streams and configs; each iteration mutates one (JSON-aware type swaps and
//! deletions, byte flips, truncation, splicing) and runs it through parsing,
//! both translators and the stream translators at random splits. Any panic
//! fails the test. Iterations: TG_FUZZ_ITERS (default 4000), seed:
//! TG_FUZZ_SEED (default fixed, so failures reproduce).

#![allow(clippy::manual_is_multiple_of)]

use crate::common;

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tollgate_core::config::{Kind, Runtime};
use tollgate_core::flow::Flow;
use tollgate_core::host::fake::FakeHost;
use tollgate_core::keys::XorShift;
use tollgate_core::translate::{
    for_kind, messages, parse_client_body, Endpoint, Front, RequestCtx, ResponseCtx,
    StreamTranslator, Translator,
};

fn seeds_requests() -> Vec<Value> {
    vec![
        json!({"model": "smart", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.2, "stop": ["x"], "max_tokens": 10}),
        json!({"model": "smart", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false, "user": "u"}),
        json!({"model": "fast", "messages": [{"role": "user", "content": "hi"}], "stream": true}),
        json!({"model": "smart", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}}),
        json!({"model": "openai/text-embedding-3-small", "input": ["a", "b"]}),
    ]
}

fn random_value(r: &mut XorShift, depth: u32) -> Value {
    match r.next_u32() % if depth > 2 { 5 } else { 7 } {
        0 => Value::Null,
        1 => Value::Bool(r.next_u32() % 2 == 0),
        2 => json!(r.next_u32() as i64 - (1 << 31)),
        3 => json!(
            [
                "",
                "x",
                "user",
                "assistant",
                "tool",
                "function",
                "text",
                "image_url",
                "data:",
                "data:image/png;base64,",
                "{",
                "{}",
                "\u{0}",
                "ü"
            ][r.next_u32() as usize % 14]
        ),
        4 => json!(f64::from(r.next_u32()) / 7.0),
        5 => Value::Array(
            (0..r.next_u32() % 3)
                .map(|_| random_value(r, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = Map::new();
            for k in [
                "type",
                "role",
                "content",
                "text",
                "function",
                "name",
                "arguments",
                "url",
            ]
            .iter()
            .take((r.next_u32() % 4) as usize)
            {
                m.insert(k.to_string(), random_value(r, depth + 1));
            }
            Value::Object(m)
        }
    }
}

/// Replace or delete one random node.
fn mutate_json(v: &mut Value, r: &mut XorShift) {
    let depth = r.next_u32() % 6;
    mutate_at(v, r, depth);
}

fn mutate_at(node: &mut Value, r: &mut XorShift, depth: u32) {
    if depth > 0 {
        match node {
            Value::Object(m) if !m.is_empty() => {
                let k = m
                    .keys()
                    .nth(r.next_u32() as usize % m.len())
                    .cloned()
                    .unwrap_or_default();
                if r.next_u32() % 8 == 0 {
                    m.remove(&k);
                    return;
                }
                if let Some(child) = m.get_mut(&k) {
                    return mutate_at(child, r, depth - 1);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let i = r.next_u32() as usize % a.len();
                return mutate_at(&mut a[i], r, depth - 1);
            }
            _ => {}
        }
    }
    *node = random_value(r, 0);
}

fn mutate_bytes(b: &mut Vec<u8>, r: &mut XorShift) {
    match r.next_u32() % 4 {
        0 if !b.is_empty() => {
            let i = r.next_u32() as usize % b.len();
            b[i] ^= 1 << (r.next_u32() % 8);
        }
        1 => {
            let n = r.next_u32() as usize % (b.len() + 1);
            b.truncate(n);
        }
        2 => {
            let i = r.next_u32() as usize % (b.len() + 1);
            let junk: &[u8] = [
                &b"\n\n"[..],
                b"data: ",
                b"\r",
                b"{\"",
                b"\xff",
                b"event: x\n",
                b"[DONE]",
            ][r.next_u32() as usize % 7];
            b.splice(i..i, junk.iter().copied());
        }
        _ if b.len() > 2 => {
            let i = r.next_u32() as usize % b.len();
            let j = r.next_u32() as usize % b.len();
            let (i, j) = (i.min(j), i.max(j));
            let dup = b[i..j].to_vec();
            b.extend_from_slice(&dup);
        }
        _ => {}
    }
}

fn iters() -> u64 {
    std::env::var("TG_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000)
}

fn seed() -> u64 {
    std::env::var("TG_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7011_6a7e)
}

#[test]
fn fuzz_requests_never_panic() {
    let rt = Arc::new(common::runtime());
    let mut r = XorShift::new(seed());
    let seeds = seeds_requests();
    for _ in 0..iters() {
        let (_, bytes) = mutated_request(&seeds, &mut r);
        // Straight translation with both translators.
        if let Ok((body, model)) = parse_client_body(&bytes) {
            if let Some(res) = rt.resolve(&model) {
                let p = rt.provider(res.provider).unwrap();
                for ep in [Endpoint::Chat, Endpoint::Embeddings] {
                    for kind in [
                        Kind::Openai,
                        Kind::Anthropic,
                        Kind::Azure,
                        Kind::Gemini,
                        Kind::Bedrock,
                    ] {
                        let ctx = RequestCtx {
                            provider: p,
                            model: &res.model,
                            model_cfg: &p.models[&res.model],
                            endpoint: ep,
                            cache_breakpoints: false,
                        };
                        let _ = for_kind(kind).request(&ctx, &body);
                    }
                }
            }
        }
        // And the whole flow.
        for path in ["/v1/chat/completions", "/v1/embeddings", "/v1/responses"] {
            if let Some((status, e)) = through_flow(&rt, path, &bytes) {
                assert!(
                    (200..500).contains(&status) || status == 503,
                    "status {status} for {}",
                    String::from_utf8_lossy(&bytes)
                );
                assert!(e.get("error").is_some() || e.get("object").is_some());
            }
        }
    }
}

/// A seed request mutated as JSON, and its bytes, sometimes mutated too.
fn mutated_request(seeds: &[Value], r: &mut XorShift) -> (Value, Vec<u8>) {
    let mut v = seeds[r.next_u32() as usize % seeds.len()].clone();
    for _ in 0..=(r.next_u32() % 3) {
        mutate_json(&mut v, r);
    }
    let mut bytes = serde_json::to_vec(&v).unwrap_or_default();
    if r.next_u32() % 4 == 0 {
        mutate_bytes(&mut bytes, r);
    }
    (v, bytes)
}

/// A POST of `bytes` to `path` through the filter's request side (any model
/// allowed): the filter's own reply, if it answered, checked to be no 5xx
/// other than 503, with its JSON body.
fn through_flow(rt: &Arc<Runtime>, path: &str, bytes: &[u8]) -> Option<(u16, Value)> {
    let mut h = FakeHost {
        req_headers: vec![
            (":method".into(), "POST".into()),
            (":path".into(), path.into()),
            ("x-tollgate-models".into(), "*".into()),
            ("anthropic-version".into(), "2023-06-01".into()),
        ],
        req_body: bytes.to_vec(),
        ..FakeHost::default()
    };
    let mut f = Flow::new(Arc::clone(rt));
    f.on_request_headers(&mut h, false);
    f.on_request_body(&mut h, bytes.len(), true);
    let (status, _, body) = h.local_reply?;
    assert!(
        (200..500).contains(&status) || status == 503,
        "status {status} for {}",
        String::from_utf8_lossy(bytes)
    );
    Some((status, serde_json::from_slice(&body).unwrap()))
}

/// Mutates a provider stream in place and feeds it to a fresh stream
/// translator at random splits: → (output, the finished translator).
fn mutated_stream(
    t: &dyn Translator,
    ctx: &ResponseCtx,
    s: &mut Vec<u8>,
    r: &mut XorShift,
) -> (Vec<u8>, Box<dyn StreamTranslator>) {
    for _ in 0..=(r.next_u32() % 4) {
        mutate_bytes(s, r);
    }
    let mut st = t.stream(ctx);
    let mut out = Vec::new();
    let mut rest: &[u8] = s;
    while !rest.is_empty() {
        let n = 1 + r.next_u32() as usize % 64;
        let (a, b) = rest.split_at(n.min(rest.len()));
        st.feed(a, &mut out);
        rest = b;
    }
    st.finish(&mut out);
    (out, st)
}

const ANTHROPIC_STREAM: &str = include_str!("fixtures/anthropic_tool_stream.sse");

#[test]
fn fuzz_responses_and_streams_never_panic() {
    let mut r = XorShift::new(seed() ^ 0xabcdef);
    let response = serde_json::to_vec(&json!({"id": "m", "model": "c", "content": [{"type": "text", "text": "x"},
        {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1, 2]}}], "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3}})).unwrap();
    let gemini_response = serde_json::to_vec(&json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"},
        {"functionCall": {"name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2}, "responseId": "r", "modelVersion": "g"})).unwrap();
    let gemini_embed =
        serde_json::to_vec(&json!({"embeddings": [{"values": [0.1, 0.2]}, {"values": [0.3]}]}))
            .unwrap();
    let bedrock_response = serde_json::to_vec(&json!({"output": {"message": {"role": "assistant", "content": [{"text": "x"},
        {"toolUse": {"toolUseId": "t", "name": "f", "input": {"a": 1}}}]}}, "stopReason": "tool_use",
        "usage": {"inputTokens": 1, "outputTokens": 2}})).unwrap();
    let bedrock_embed =
        serde_json::to_vec(&json!({"embedding": [0.1, 0.2], "inputTextTokenCount": 2})).unwrap();
    let mut gemini_stream = Vec::new();
    for line in [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}], "responseId": "r"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2}}),
    ] {
        gemini_stream.extend_from_slice(format!("data: {line}\r\n\r\n").as_bytes());
    }
    let mut bedrock_stream = Vec::new();
    for (t, p) in [
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ),
        (
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t","name":"f"}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":1}"}}}"#,
        ),
        ("messageStop", r#"{"stopReason":"tool_use"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":1,"outputTokens":2}}"#,
        ),
    ] {
        bedrock_stream.extend(tollgate_core::codec::eventstream::event(t, p.as_bytes()));
    }
    let openai_stream = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n".to_vec();
    for _ in 0..iters() {
        let kind = [
            Kind::Anthropic,
            Kind::Openai,
            Kind::Azure,
            Kind::Gemini,
            Kind::Bedrock,
        ][r.next_u32() as usize % 5];
        let t = for_kind(kind);
        let embeddings = matches!(kind, Kind::Gemini | Kind::Bedrock) && r.next_u32() % 4 == 0;
        let ctx = ResponseCtx {
            endpoint: if embeddings {
                Endpoint::Embeddings
            } else {
                Endpoint::Chat
            },
            stream: true,
            include_usage: r.next_u32() % 2 == 0,
            created: 1,
            json_mode: r.next_u32() % 2 == 0,
            prompt_estimate: 0,
            embed_base64: r.next_u32() % 2 == 0,
            model: String::new(),
        };
        // Non-streaming bodies: JSON-aware mutation then bytes.
        let seed_body = match (kind, embeddings) {
            (Kind::Gemini, false) => &gemini_response,
            (Kind::Gemini, true) => &gemini_embed,
            (Kind::Bedrock, false) => &bedrock_response,
            (Kind::Bedrock, true) => &bedrock_embed,
            _ => &response,
        };
        let mut v: Value = serde_json::from_slice(seed_body).unwrap();
        mutate_json(&mut v, &mut r);
        let mut body = serde_json::to_vec(&v).unwrap();
        if r.next_u32() % 3 == 0 {
            mutate_bytes(&mut body, &mut r);
        }
        let _ = t.response(&ctx, &body);
        let _ = t.error(400 + (r.next_u32() % 200) as u16, &body);
        let front = if r.next_u32() % 2 == 0 {
            Front::Messages
        } else {
            Front::CountTokens
        };
        let _ = messages::translator(kind, front).response(&ctx, &body);
        // Streams: mutate and feed at random splits.
        let mut s = match kind {
            Kind::Anthropic => ANTHROPIC_STREAM.as_bytes().to_vec(),
            Kind::Gemini => gemini_stream.clone(),
            Kind::Bedrock => bedrock_stream.clone(),
            _ => openai_stream.clone(),
        };
        let (out, st) = mutated_stream(t, &ctx, &mut s, &mut r);
        let _ = st.usage();
        assert!(
            std::str::from_utf8(&out).is_ok(),
            "translated stream must stay UTF-8"
        );
        // The same bytes through the Messages front door's stream.
        let mut st = messages::translator(kind, Front::Messages).stream(&ctx);
        let mut out = Vec::new();
        for part in s.chunks(1 + r.next_u32() as usize % 64) {
            st.feed(part, &mut out);
        }
        st.finish(&mut out);
        let _ = (st.usage(), st.first_token_seen());
        if kind != Kind::Anthropic {
            // Translated (the passthrough sends the provider's bytes as
            // they are).
            assert!(
                std::str::from_utf8(&out).is_ok(),
                "Messages stream must stay UTF-8"
            );
        }
    }
}

#[test]
fn fuzz_event_stream_decoder_never_panics() {
    use tollgate_core::codec::eventstream::{event, Decoder};
    let mut r = XorShift::new(seed() ^ 0xe5e5);
    let mut good = event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"x"}}"#,
    );
    good.extend(event("messageStop", br#"{"stopReason":"end_turn"}"#));
    for _ in 0..iters() {
        let mut s = good.clone();
        for _ in 0..=(r.next_u32() % 4) {
            mutate_bytes(&mut s, &mut r);
        }
        if r.next_u32() % 8 == 0 {
            s = (0..r.next_u32() % 64).map(|_| r.next_u32() as u8).collect();
        }
        let mut d = Decoder::default();
        let mut n = 0;
        let mut rest: &[u8] = &s;
        while !rest.is_empty() {
            let k = 1 + r.next_u32() as usize % 32;
            let (a, b) = rest.split_at(k.min(rest.len()));
            let _ = d.feed(a, &mut |_| n += 1);
            rest = b;
        }
        let _ = d.finish();
        assert!(n <= 2 + s.len() / 16);
    }
}

#[test]
fn fuzz_configs_never_panic() {
    let mut r = XorShift::new(seed() ^ 0x5eed);
    let base: Value = serde_json::from_str(common::CONFIG).unwrap();
    for _ in 0..iters() {
        let mut v = base.clone();
        for _ in 0..=(r.next_u32() % 3) {
            mutate_json(&mut v, &mut r);
        }
        let mut bytes = serde_json::to_vec(&v).unwrap();
        if r.next_u32() % 4 == 0 {
            mutate_bytes(&mut bytes, &mut r);
        }
        let _ = Runtime::from_json(&bytes, &common::env);
    }
}

fn seeds_responses_requests() -> Vec<Value> {
    vec![
        json!({"model": "smart", "input": "hi", "instructions": "be brief", "stream": true, "max_output_tokens": 50}),
        json!({"model": "fast", "input": [{"role": "user", "content": "hi"}], "store": false, "stream": true,
               "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "low"}}),
        json!({"model": "smart", "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
            {"type": "reasoning", "id": "rs", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"}],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false}),
        json!({"model": "smart", "input": "x", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}),
    ]
}

/// The Responses front door: mutated requests through the whole flow (both
/// the passthrough to OpenAI and the translation to Anthropic), and
/// mutated provider streams through the Responses event writer.
#[test]
fn fuzz_responses_front_door_never_panics() {
    use tollgate_core::translate::responses::{to_chat, translator};
    let rt = Arc::new(common::runtime());
    let mut r = XorShift::new(seed() ^ 0x5e5);
    let seeds = seeds_responses_requests();
    let anthropic = (0..)
        .map_while(|i| rt.provider(i))
        .find(|p| p.kind() == Kind::Anthropic)
        .unwrap();
    let t = translator(anthropic, Endpoint::Responses);
    for _ in 0..iters() {
        let (v, bytes) = mutated_request(&seeds, &mut r);
        for kind in [Kind::Openai, Kind::Anthropic, Kind::Gemini, Kind::Bedrock] {
            let _ = to_chat(&v, "p", kind);
        }
        if let Some((status, e)) = through_flow(&rt, "/v1/responses", &bytes) {
            assert!((400..500).contains(&status), "status {status}");
            assert!(e["error"]["message"].is_string());
        }
        // A mutated Anthropic stream, fed at random splits.
        let mut s = ANTHROPIC_STREAM.as_bytes().to_vec();
        let ctx = ResponseCtx {
            endpoint: Endpoint::Responses,
            stream: true,
            include_usage: true,
            created: 1,
            json_mode: false,
            prompt_estimate: 0,
            embed_base64: false,
            model: String::new(),
        };
        let (out, _) = mutated_stream(t, &ctx, &mut s, &mut r);
        // Whatever came, the stream ends with a final lifecycle event.
        let text = std::str::from_utf8(&out).expect("UTF-8 events");
        let last = text.trim_end().rsplit("\n\n").next().unwrap_or("");
        assert!(
            last.starts_with("event: response.completed")
                || last.starts_with("event: response.incomplete")
                || last.starts_with("event: response.failed"),
            "{last}"
        );
        let _ = t.response(&ctx, &s);
    }
}

fn seeds_messages() -> Vec<Value> {
    vec![
        json!({"model": "claude-haiku-4-5", "max_tokens": 50, "stream": true,
               "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}]}),
        json!({"model": "openai/gpt-4o-mini", "max_tokens": 50, "stop_sequences": ["x"], "temperature": 0.5,
               "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
               "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true},
               "thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u"},
               "messages": [
                 {"role": "user", "content": [{"type": "text", "text": "a"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                   {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                   "content": [{"type": "text", "text": "r"}]}]}]}),
        json!({"model": "fast", "max_tokens": 5, "output_format": {"type": "json_schema", "schema": {"type": "object"}},
               "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}),
    ]
}

#[test]
fn fuzz_messages_requests_never_panic() {
    let rt = Arc::new(common::runtime());
    let mut r = XorShift::new(seed() ^ 0x3e55);
    let seeds = seeds_messages();
    for _ in 0..iters() {
        let (v, bytes) = mutated_request(&seeds, &mut r);
        let _ = messages::to_chat(&v, "p");
        let _ = messages::estimate_input_tokens(&v, "p");
        for path in ["/v1/messages", "/v1/messages/count_tokens"] {
            if let Some((status, e)) = through_flow(&rt, path, &bytes) {
                if status == 200 {
                    assert!(e["input_tokens"].as_u64().is_some_and(|n| n > 0), "{e}");
                } else {
                    assert_eq!(e["type"], "error", "{e}");
                    assert!(e["error"]["message"].is_string(), "{e}");
                }
            }
        }
    }
}

/// Bytes that stress the scanner: escapes, control characters, numbers,
/// literals, nesting, a second key.
fn mutate_json_text(b: &mut Vec<u8>, r: &mut XorShift) {
    let i = r.next_u32() as usize % (b.len() + 1);
    let junk: &[u8] = [
        &b"\\"[..],
        b"\\u00",
        b"\\ud800",
        b"\"",
        b"\x01",
        b"\t",
        b"-0.5e+3",
        b"01",
        b"1.",
        b"tru",
        b"null",
        b",",
        b":",
        b"[[[[",
        b"}",
        b"\"model\":\"x\",",
        b"\"messages\":[],",
        b"\xc3\xa9",
    ][r.next_u32() as usize % 18];
    b.splice(i..i, junk.iter().copied());
}

/// The scanner against serde_json as the oracle: it accepts exactly the
/// JSON objects serde_json accepts (less those giving a top-level key
/// twice), and every top-level value it locates is the one serde_json reads.
/// Through the planner, an OpenAI passthrough body edited in place is the
/// client's body with only the model (and the stream's usage option)
/// changed.
#[test]
fn fuzz_scanner_agrees_with_serde_json() {
    use tollgate_core::plan::{plan, RequestFacts};
    use tollgate_core::scan::{Messages, TopLevel};
    let rt = common::runtime();
    let mut r = XorShift::new(seed() ^ 0x5ca9);
    let seeds = seeds_requests();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..iters() {
        let mut v = seeds[r.next_u32() as usize % seeds.len()].clone();
        if r.next_u32() % 2 == 0 {
            mutate_json(&mut v, &mut r);
        }
        let mut bytes = if r.next_u32() % 2 == 0 {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        };
        match r.next_u32() % 4 {
            0 => mutate_bytes(&mut bytes, &mut r),
            1 => mutate_json_text(&mut bytes, &mut r),
            _ => {}
        }
        let oracle = serde_json::from_slice::<Value>(&bytes);
        let scanned = TopLevel::parse(&bytes);
        let shown = String::from_utf8_lossy(&bytes);
        match (&oracle, &scanned) {
            (Ok(Value::Object(map)), Ok(top)) => {
                accepted += 1;
                for (k, want) in map {
                    if k == "messages" {
                        continue;
                    }
                    let raw = top.get(k).unwrap_or_else(|| panic!("{k} in {shown}"));
                    let got: Value = serde_json::from_str(raw).unwrap();
                    assert_eq!(&got, want, "{k} in {shown}");
                }
                let shape = match map.get("messages") {
                    None => Messages::Absent,
                    Some(Value::Null) => Messages::Null,
                    Some(Value::Array(a)) if a.is_empty() => Messages::Empty,
                    Some(Value::Array(a)) => a
                        .iter()
                        .position(|m| !m.get("role").is_some_and(Value::is_string))
                        .map_or(Messages::Ok, Messages::BadRole),
                    Some(_) => Messages::NotArray,
                };
                assert_eq!(top.messages(), shape, "{shown}");
            }
            (Ok(_), Err(e)) => {
                refused += 1;
                // Refused beyond serde_json: only a key given twice, a
                // lone surrogate is accepted by both.
                assert!(
                    e.message.contains("given twice") || e.message.contains("JSON object"),
                    "{} for {shown}",
                    e.message
                );
            }
            (Err(_), Ok(_)) => {
                // serde_json refuses lone surrogates; the scanner leaves
                // them to the provider (valid JSON text).
                assert!(shown.contains("\\ud8"), "accepted {shown}");
            }
            (Err(_), Err(e)) => {
                refused += 1;
                assert_eq!(e.code.as_deref(), Some("invalid_json"));
            }
            (Ok(_), Ok(_)) => panic!("a body that is no object accepted: {shown}"),
        }
        // The passthrough through the planner: same document, new model.
        let Ok(Value::Object(mut map)) = oracle else {
            continue;
        };
        if !matches!(map.get("model"), Some(Value::String(s)) if rt.resolve(s).is_some_and(|m| m.canonical.starts_with("openai/")))
        {
            continue;
        }
        let facts = RequestFacts {
            endpoint: Endpoint::Chat,
            front: Front::OpenAi,
            body: &bytes,
            header_names: None,
            allowed: "*",
            declared_model: None,
            now_ms: 1,
            random: 0,
            tenant: "",
            session_header: None,
            cache_breakpoints: false,
        };
        let Ok(p) = plan(&rt, &facts, &|_| 0) else {
            continue;
        };
        let sent: Value = serde_json::from_slice(&p.upstream_body(&bytes))
            .unwrap_or_else(|e| panic!("{e} for {shown}"));
        map.insert("model".into(), json!(p.route.upstream_model));
        if p.route.stream && !p.route.include_usage {
            let so = map.entry("stream_options").or_insert(json!({}));
            if so.is_null() {
                *so = json!({});
            }
            so["include_usage"] = json!(true);
        }
        assert_eq!(sent, Value::Object(map), "{shown}");
    }
    assert!(
        accepted > iters() / 10 && refused > iters() / 10,
        "{accepted} / {refused}"
    );
}
