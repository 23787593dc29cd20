//! Each provider's prompt cache, simulated per key: a conversation's next
//! turn on the same key reads its earlier turns back as cached tokens, in
//! the provider's own usage fields (streams report the same); another key,
//! another model, a prompt under the model's minimum, a request without
//! Anthropic breakpoints or Bedrock cache points, read nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use mock_llm::app::App;
use mock_llm::core::config::Config;
use serde_json::{json, Value};

/// `n` characters of text (4 characters a token), distinct per `tag`.
fn text(tag: &str, n: usize) -> String {
    let mut s = format!("{tag}: ");
    while s.len() < n {
        s.push_str("the quick brown fox jumps over the lazy dog. ");
    }
    s.truncate(n);
    s
}

/// A chat conversation: a long system prompt, then `turns` user/assistant
/// exchanges of 2,000 characters each, ending with a user turn.
fn chat_turns(turns: usize) -> Vec<Value> {
    let mut m = vec![json!({"role": "system", "content": text("system", 6000)})];
    for t in 0..turns {
        if t > 0 {
            m.push(json!({"role": "assistant", "content": text(&format!("answer {t}"), 2000)}));
        }
        m.push(json!({"role": "user", "content": text(&format!("question {t}"), 2000)}));
    }
    m
}

fn chat_body(turns: usize, extra: Value) -> String {
    let mut b = json!({"model": "gpt-4o-mini", "messages": chat_turns(turns)});
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b.to_string()
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn openai_chat_reads_earlier_turns_on_the_same_key_in_128_token_steps() {
    let app = app();
    let t1 = openai(&app, &chat_body(1, json!({})), &[]).await;
    assert_eq!(t1.status, 200, "{}", t1.text());
    assert_eq!(cached(&t1.json()), 0);
    assert_eq!(t1.header("x-mock-key-id"), Some("openai-1"));
    // Turn 2: turn 1's 8,000 characters (2,000 tokens) are read back, in
    // 128-token increments.
    let r = openai(&app, &chat_body(2, json!({})), &[]).await.json();
    assert_eq!(cached(&r), 1920);
    assert!(cached(&r) <= r["usage"]["prompt_tokens"].as_u64().unwrap());
    // The same turn on another key: that key never saw turn 1.
    let other = call(
        &app,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer mock-openai-key-2")],
        &chat_body(2, json!({})),
    )
    .await;
    assert_eq!(other.header("x-mock-key-id"), Some("openai-2"));
    assert_eq!(cached(&other.json()), 0);
    // Another model has its own cache; another prompt_cache_key routes to
    // another cache.
    let mut m = chat_body(2, json!({}));
    m = m.replace("gpt-4o-mini", "gpt-4o");
    assert_eq!(cached(&openai(&app, &m, &[]).await.json()), 0);
    let keyed = chat_body(2, json!({"prompt_cache_key": "session-a"}));
    assert_eq!(cached(&openai(&app, &keyed, &[]).await.json()), 0);
    assert_eq!(cached(&openai(&app, &keyed, &[]).await.json()), 2944);
    // A streamed turn reports the same usage in its usage chunk.
    let s = openai(
        &app,
        &chat_body(
            3,
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
        &[],
    )
    .await;
    let last = s.sse_data().pop().unwrap();
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"],
        2944
    );
    // Short prompts are never cached, however often they are sent.
    let hi = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
    openai(&app, hi, &[]).await;
    assert_eq!(cached(&openai(&app, hi, &[]).await.json()), 0);
    // The stats count the cache's entries; a reset empties it.
    let stats = call(&app, "GET", "/_mock/stats", &[], "").await.json();
    assert!(stats["prompt_cache_entries"].as_u64().unwrap() > 0);
    call(&app, "POST", "/_mock/reset", &[], "").await;
    let stats = call(&app, "GET", "/_mock/stats", &[], "").await.json();
    assert_eq!(stats["prompt_cache_entries"], 0);
    assert_eq!(
        cached(&openai(&app, &chat_body(2, json!({})), &[]).await.json()),
        0
    );
}

#[tokio::test]
async fn azure_reads_back_per_deployment_key() {
    let app = app();
    let path = "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21";
    let h = [("api-key", "mock-azure-key-1")];
    let body = |turns| json!({"messages": chat_turns(turns)}).to_string();
    let r = call(&app, "POST", path, &h, &body(1)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(cached(&r.json()), 0);
    assert_eq!(
        cached(&call(&app, "POST", path, &h, &body(2)).await.json()),
        1920
    );
}

fn responses_body(turns: usize, stream: bool) -> String {
    let mut input = Vec::new();
    for t in 0..turns {
        if t > 0 {
            input.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": text(&format!("answer {t}"), 2000), "annotations": []}]}));
        }
        input.push(json!({"role": "user", "content": [{"type": "input_text", "text": text(&format!("question {t}"), 2000)}]}));
    }
    json!({"model": "gpt-4o-mini", "instructions": text("instructions", 6000), "input": input,
           "prompt_cache_key": "codex-session-1", "stream": stream})
    .to_string()
}

#[tokio::test]
async fn responses_report_cached_input_tokens_streamed_or_not() {
    let app = app();
    let post = |b: String| {
        let app = &app;
        async move { call(app, "POST", "/v1/responses", &[OA], &b).await }
    };
    let r = post(responses_body(1, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["usage"]["input_tokens_details"]["cached_tokens"],
        0
    );
    let r = post(responses_body(2, false)).await.json();
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 1920);
    let s = post(responses_body(3, true)).await;
    let done = s
        .sse_data()
        .into_iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    assert_eq!(
        done["response"]["usage"]["input_tokens_details"]["cached_tokens"],
        2944
    );
}

/// A Claude Code-like turn: system blocks with a breakpoint on the last,
/// tools, and a breakpoint on the newest user turn's last block.
fn claude_turn(turns: usize, breakpoints: bool, stream: bool) -> String {
    let cc = |on: bool| {
        if on {
            json!({"type": "ephemeral"})
        } else {
            Value::Null
        }
    };
    let block = |t: String, on: bool| {
        let mut b = json!({"type": "text", "text": t});
        if on {
            b["cache_control"] = cc(true);
        }
        b
    };
    let mut messages = Vec::new();
    for t in 0..turns {
        if t > 0 {
            messages.push(json!({"role": "assistant", "content": [block(text(&format!("answer {t}"), 2000), false)]}));
        }
        let last = t + 1 == turns;
        messages.push(json!({"role": "user", "content": [block(text(&format!("question {t}"), 2000), last && breakpoints)]}));
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
           "system": [block(text("billing", 80), false), block(text("system", 6000), breakpoints)],
           "tools": [{"name": "Read", "description": "read a file", "input_schema": {"type": "object"}}],
           "messages": messages})
    .to_string()
}

fn anthropic_usage(r: &Resp) -> (u64, u64, u64) {
    let u = &r.json()["usage"];
    let n = |k: &str| u[k].as_u64().unwrap();
    (
        n("input_tokens"),
        n("cache_creation_input_tokens"),
        n("cache_read_input_tokens"),
    )
}

#[tokio::test]
async fn anthropic_caches_at_breakpoints_only_and_reads_through_the_lookback() {
    let app = app();
    // Without breakpoints nothing is cached, however often it is sent.
    anthropic(&app, &claude_turn(1, false, false), &[]).await;
    let r = anthropic(&app, &claude_turn(1, false, false), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anthropic_usage(&r), (2020, 0, 0));
    // Turn 1 writes the prefix up to its last breakpoint (the whole prompt).
    let r = anthropic(&app, &claude_turn(1, true, false), &[]).await;
    assert_eq!(anthropic_usage(&r), (0, 2020, 0));
    // Turn 2 moves the breakpoint to its newest user turn: the lookback finds
    // turn 1's entry; the two new blocks are written.
    let r = anthropic(&app, &claude_turn(2, true, false), &[]).await;
    assert_eq!(anthropic_usage(&r), (0, 1000, 2020));
    // Another key has its own cache: its first turn writes.
    let r = call(
        &app,
        "POST",
        "/v1/messages",
        &[("x-api-key", "mock-anthropic-key-2"), AV],
        &claude_turn(2, true, false),
    )
    .await;
    assert_eq!(r.header("x-mock-key-id"), Some("anthropic-2"));
    assert_eq!(anthropic_usage(&r), (0, 3020, 0));
    // A streamed turn reports the same usage in message_start.
    let s = anthropic(&app, &claude_turn(3, true, true), &[]).await;
    let start = s
        .sse_data()
        .into_iter()
        .find(|e| e["type"] == "message_start")
        .unwrap();
    let u = &start["message"]["usage"];
    assert_eq!(
        (
            u["input_tokens"].clone(),
            u["cache_creation_input_tokens"].clone(),
            u["cache_read_input_tokens"].clone()
        ),
        (json!(0), json!(1000), json!(3020))
    );
    // count_tokens counts the whole prompt, whatever the cache holds.
    let count = call(
        &app,
        "POST",
        "/v1/messages/count_tokens",
        &[AK, AV],
        &claude_turn(3, true, false)
            .replace(r#""max_tokens":64,"#, "")
            .replace(r#""stream":false,"#, ""),
    )
    .await;
    assert_eq!(count.json()["input_tokens"], 4020, "{}", count.text());
}

#[tokio::test]
async fn anthropic_top_level_cache_control_and_model_minimums() {
    let app = app();
    let body = |model: &str| {
        let mut v: Value = serde_json::from_str(&claude_turn(1, false, false)).unwrap();
        v["model"] = json!(model);
        v["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
        v.to_string()
    };
    // Automatic caching: the breakpoint goes on the last block.
    anthropic(&app, &body("claude-sonnet-4-5"), &[]).await;
    let r = anthropic(&app, &body("claude-sonnet-4-5"), &[]).await;
    assert_eq!(anthropic_usage(&r), (0, 0, 2020));
    // Haiku 4.5 caches from 4,096 tokens: this 2,020-token prompt never is.
    anthropic(&app, &body("claude-haiku-4-5"), &[]).await;
    let r = anthropic(&app, &body("claude-haiku-4-5"), &[]).await;
    assert_eq!(anthropic_usage(&r), (2020, 0, 0));
}

#[tokio::test]
async fn gemini_implicit_cache_on_2_5_models_only() {
    let app = app();
    let contents = |turns: usize| {
        let mut c = Vec::new();
        for t in 0..turns {
            if t > 0 {
                c.push(json!({"role": "model", "parts": [{"text": text(&format!("answer {t}"), 4000)}]}));
            }
            c.push(
                json!({"role": "user", "parts": [{"text": text(&format!("question {t}"), 4000)}]}),
            );
        }
        json!({"systemInstruction": {"parts": [{"text": text("system", 6000)}]}, "contents": c})
            .to_string()
    };
    let gk = [("x-goog-api-key", "mock-gemini-key-1")];
    let flash25 = "/v1beta/models/gemini-2.5-flash:generateContent";
    let r = call(&app, "POST", flash25, &gk, &contents(1)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["usageMetadata"]
        .get("cachedContentTokenCount")
        .is_none());
    let r = call(&app, "POST", flash25, &gk, &contents(2)).await.json();
    assert_eq!(r["usageMetadata"]["cachedContentTokenCount"], 2500);
    // Streamed: the last chunk's usage has it too.
    let s = call(
        &app,
        "POST",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        &gk,
        &contents(2),
    )
    .await;
    let last: Value =
        serde_json::from_str(s.text().trim_end().rsplit("data: ").next().unwrap()).unwrap();
    assert_eq!(last["usageMetadata"]["cachedContentTokenCount"], 4500);
    // gemini-2.0-flash has no implicit cache.
    let flash20 = "/v1beta/models/gemini-2.0-flash:generateContent";
    call(&app, "POST", flash20, &gk, &contents(2)).await;
    let r = call(&app, "POST", flash20, &gk, &contents(2)).await.json();
    assert!(r["usageMetadata"].get("cachedContentTokenCount").is_none());
}

fn converse(turns: usize, cache_points: bool) -> String {
    let cp = json!({"cachePoint": {"type": "default"}});
    let mut system = vec![json!({"text": text("system", 6000)})];
    if cache_points {
        system.push(cp.clone());
    }
    let mut messages = Vec::new();
    for t in 0..turns {
        if t > 0 {
            messages.push(json!({"role": "assistant", "content": [{"text": text(&format!("answer {t}"), 2000)}]}));
        }
        let mut content = vec![json!({"text": text(&format!("question {t}"), 2000)})];
        if cache_points && t + 1 == turns {
            content.push(cp.clone());
        }
        messages.push(json!({"role": "user", "content": content}));
    }
    json!({"system": system, "messages": messages, "inferenceConfig": {"maxTokens": 64}})
        .to_string()
}

#[tokio::test]
async fn bedrock_caches_at_cache_points() {
    let app = app();
    let s = "mock-bedrock-secret-1";
    let go = |body: String| {
        let app = &app;
        async move { bedrock_on(app, SONNET_PATH, "converse", &body, s).await }
    };
    // Without cache points: no cache fields at all.
    let r = go(converse(1, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["usage"].get("cacheReadInputTokens").is_none());
    let r = go(converse(1, true)).await.json();
    assert_eq!(
        r["usage"],
        json!({"inputTokens": 0, "outputTokens": r["usage"]["outputTokens"], "totalTokens": r["usage"]["totalTokens"],
               "cacheReadInputTokens": 0, "cacheWriteInputTokens": 2000})
    );
    let r = go(converse(2, true)).await.json();
    assert_eq!(r["usage"]["cacheReadInputTokens"], 2000);
    assert_eq!(r["usage"]["cacheWriteInputTokens"], 1000);
    assert_eq!(r["usage"]["inputTokens"], 0);
    // Streamed: the metadata event carries the same usage.
    let st = bedrock_on(&app, SONNET_PATH, "converse-stream", &converse(2, true), s).await;
    assert_eq!(st.status, 200);
    let mut buf = &st.body[..];
    let mut usage = Value::Null;
    while !buf.is_empty() {
        let (h, payload, n) = decode(buf);
        if h.iter().any(|(k, v)| k == ":event-type" && v == "metadata") {
            usage = serde_json::from_slice::<Value>(&payload).unwrap()["usage"].clone();
        }
        buf = &buf[n..];
    }
    assert_eq!(usage["cacheReadInputTokens"], 3000);
}

#[tokio::test]
async fn off_when_configured_off_and_bounded_when_on() {
    let base = std::fs::read_to_string(config_path()).unwrap();
    let off = base.replace(
        "prompt_cache:\n  enabled: true",
        "prompt_cache:\n  enabled: false",
    );
    assert_ne!(off, base);
    let app = App::new(&Config::from_yaml(&off).unwrap());
    openai(&app, &chat_body(1, json!({})), &[]).await;
    let r = openai(&app, &chat_body(2, json!({})), &[]).await.json();
    assert!(r["usage"].get("prompt_tokens_details").is_none());
    let stats = call(&app, "GET", "/_mock/stats", &[], "").await.json();
    assert_eq!(stats["prompt_cache_entries"], Value::Null);

    let small = base.replace("max_entries: 200000", "max_entries: 10");
    let app = App::new(&Config::from_yaml(&small).unwrap());
    for s in 0..20 {
        openai(
            &app,
            &chat_body(2, json!({"prompt_cache_key": format!("s{s}")})),
            &[],
        )
        .await;
        let stats = call(&app, "GET", "/_mock/stats", &[], "").await.json();
        assert!(stats["prompt_cache_entries"].as_u64().unwrap() <= 10);
    }
    for bad in ["ttl_s: 300", "max_entries: 200000"] {
        let zero = base.replace(
            bad,
            &bad.replace(|c: char| c.is_ascii_digit(), "")
                .replace(": ", ": 0"),
        );
        assert!(
            Config::from_yaml(&zero)
                .unwrap_err()
                .contains("prompt_cache"),
            "{bad}"
        );
    }
}
