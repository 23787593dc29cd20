#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use mock_llm::app::App;
use serde_json::{json, Value};

const HELLO: &str =
    r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there world"}]}"#;

#[tokio::test]
async fn chat_non_stream_is_deterministic_with_usage() {
    let app = app();
    let r = openai(&app, HELLO, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "mock response to: hello there world"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // 17 prompt chars -> 5 tokens; 35 answer chars -> 9 tokens; nothing
    // cached (the prompt is under OpenAI's 1,024-token minimum).
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
}

/// The `delta.content` pieces of a streamed chat answer, joined.
fn streamed_text(r: &Resp) -> String {
    r.sse_data()
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test]
async fn chat_stream_ends_with_done_and_usage_chunk_only_when_asked() {
    let app = app();
    let body = r#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there world"}]}"#;
    let r = openai(&app, body, &[]).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(r.text().ends_with("data: [DONE]\n\n"));
    assert_eq!(streamed_text(&r), "mock response to: hello there world");
    let chunks = r.sse_data();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 14);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "stop"
    );

    let body =
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = openai(&app, body, &[]).await;
    assert!(r.sse_data().iter().all(|c| c.get("usage").is_none()));
    assert!(r.text().ends_with("data: [DONE]\n\n"));
}

/// POST `HELLO` to /v1/chat/completions with exactly these headers.
async fn hello_with(app: &App, headers: &[(&str, &str)]) -> Resp {
    call(app, "POST", "/v1/chat/completions", headers, HELLO).await
}

#[tokio::test]
async fn auth_is_required_and_checked() {
    let app = app();
    let r = hello_with(&app, &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = hello_with(&app, &[("authorization", "Bearer nope-nope-nope")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert!(
        !r.text().contains("nope-nope-nope"),
        "the key must be masked"
    );
    let r = hello_with(&app, &[("authorization", "Bearer mock-openai-key-401")]).await;
    assert_eq!(r.status, 401);
    let r = hello_with(&app, &[("authorization", "Bearer mock-openai-key-429")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    // A key of another provider is not accepted.
    let r = hello_with(&app, &[("authorization", "Bearer mock-mistral-key-1")]).await;
    assert_eq!(r.status, 401);
}

fn err_of(r: &Resp) -> Value {
    r.json()["error"].clone()
}

#[tokio::test]
async fn request_rules() {
    let app = app();
    let cases: &[(&str, u16, &str)] = &[
        ("{not json", 400, "parse the JSON"),
        (
            r#"{"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "you must provide a model parameter",
        ),
        (
            r#"{"model":"gpt-5-nope","messages":[{"role":"user","content":"x"}]}"#,
            404,
            "does not exist",
        ),
        (
            r#"{"model":"gpt-4o-mini"}"#,
            400,
            "Missing required parameter: 'messages'",
        ),
        (
            r#"{"model":"gpt-4o-mini","messages":[]}"#,
            400,
            "empty array",
        ),
        (
            r#"{"model":"gpt-4o-mini","messages":[{"role":"robot","content":"x"}]}"#,
            400,
            "Invalid value: 'robot'",
        ),
        (
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_1","content":"r"}]}"#,
            400,
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"y"}]}"#,
            400,
            "did not have response messages: call_1",
        ),
        (
            r#"{"model":"gpt-4o-mini","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "only allowed when 'stream' is enabled",
        ),
        (
            r#"{"model":"gpt-4o-mini","tool_choice":"required","messages":[{"role":"user","content":"x"}]}"#,
            400,
            "only allowed when 'tools' are specified",
        ),
        (
            r#"{"model":"gpt-4o-mini","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "max_tokens",
        ),
        (
            r#"{"model":"text-embedding-3-small","messages":[{"role":"user","content":"x"}]}"#,
            404,
            "not a chat model",
        ),
        (
            r#"{"model":"gpt-4o-mini","max_output_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "Unrecognized request argument supplied: max_output_tokens",
        ),
        (
            r#"{"model":"gpt-4o-mini","system":"s","messages":[{"role":"user","content":"x"}]}"#,
            400,
            "Unrecognized request argument supplied: system",
        ),
        (
            r#"{"model":"gpt-4o-mini","temperature":2.5,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "Invalid 'temperature'",
        ),
        (
            r#"{"model":"gpt-4o-mini","max_tokens":16385,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "max_tokens is too large",
        ),
    ];
    for (body, status, needle) in cases {
        let r = openai(&app, body, &[]).await;
        assert_eq!(r.status, *status, "{body} -> {}", r.text());
        let e = err_of(&r);
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{body} -> {e}"
        );
        assert!(e.get("type").is_some() && e.get("param").is_some() && e.get("code").is_some());
    }
    // A valid tool round trip is accepted.
    let ok = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"r"}]}"#;
    assert_eq!(openai(&app, ok, &[]).await.status, 200);
    let ok = r#"{"model":"gpt-4o-mini","temperature":2,"top_p":1,"n":1,"seed":3,"user":"u","max_completion_tokens":16384,"messages":[{"role":"developer","content":"d"},{"role":"user","content":"x"}]}"#;
    assert_eq!(openai(&app, ok, &[]).await.status, 200);
}

const TOOLS: &str = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}]"#;

#[tokio::test]
async fn tool_calls_forced_by_request_or_header() {
    let app = app();
    let body = format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"weather?"}}],{TOOLS},"tool_choice":{{"type":"function","function":{{"name":"get_weather"}}}}}}"#
    );
    let r = openai(&app, &body, &[]).await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city":"mock","unit":"c"}));
    assert!(call["id"].as_str().unwrap().starts_with("call_"));

    let auto = format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"weather?"}}],{TOOLS}}}"#
    );
    let r = openai(&app, &auto, &[]).await;
    assert_eq!(r.json()["choices"][0]["finish_reason"], "stop");
    let r = openai(&app, &auto, &[("x-mock-tool-call", "get_weather")]).await;
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls");
    let r = openai(&app, &auto, &[("x-mock-tool-call", "undeclared")]).await;
    assert_eq!(r.status, 400);

    // Streamed tool call: argument fragments concatenate to valid JSON.
    let s = format!(
        r#"{{"model":"gpt-4o","stream":true,"messages":[{{"role":"user","content":"weather?"}}],{TOOLS},"tool_choice":"required"}}"#
    );
    let r = openai(&app, &s, &[]).await;
    let args: String = r
        .sse_data()
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city":"mock","unit":"c"})
    );
}

#[tokio::test]
async fn size_and_token_limit_knobs() {
    let app = app();
    let r = openai(&app, HELLO, &[("x-mock-response-bytes", "1370")]).await;
    let v = r.json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(content.len(), 1370);
    assert_eq!(v["usage"]["completion_tokens"], 343); // ceil(1370/4)
    let body = r#"{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let v = openai(&app, body, &[]).await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "mock respons");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn fault_headers() {
    let app = app();
    for (h, s) in [("429", 429), ("500", 500), ("503", 503), ("529", 529)] {
        let r = openai(&app, HELLO, &[("x-mock-error", h)]).await;
        assert_eq!(r.status, s);
        assert!(r.json()["error"]["message"].is_string());
    }
    assert_eq!(
        openai(&app, HELLO, &[("x-mock-error", "reset")])
            .await
            .status,
        0
    );
    let r = openai(&app, HELLO, &[("x-mock-error", "abort-mid-stream")]).await;
    assert!(r.aborted);
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
    let s = r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let r = openai(&app, s, &[("x-mock-error", "abort-mid-stream")]).await;
    assert_eq!(r.status, 200);
    assert!(r.aborted);
    assert!(!r.text().contains("[DONE]"));
}

#[tokio::test]
async fn latency_and_stream_timing_headers() {
    let app = app();
    let t = std::time::Instant::now();
    openai(&app, HELLO, &[("x-mock-latency-ms", "120")]).await;
    assert!(t.elapsed().as_millis() >= 120);
    let s = r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let t = std::time::Instant::now();
    // 3 content chunks: ttft 50 + 2 * itl 30 + final chunk 30 = 140 ms at least.
    openai(
        &app,
        s,
        &[("x-mock-ttft-ms", "50"), ("x-mock-itl-ms", "30")],
    )
    .await;
    assert!(t.elapsed().as_millis() >= 140, "{:?}", t.elapsed());
}

/// POST `body` to /v1/embeddings with the OpenAI key.
async fn embed(app: &App, body: &str) -> Resp {
    call(app, "POST", "/v1/embeddings", &[OA], body).await
}

#[tokio::test]
async fn embeddings_float_and_base64() {
    let app = app();
    let r = embed(
        &app,
        r#"{"model":"text-embedding-3-small","input":["abcd","abcdefgh"],"dimensions":8}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let r = embed(&app, r#"{"model":"text-embedding-3-small","input":"abcd","dimensions":8,"encoding_format":"base64"}"#).await;
    let s = r.json()["data"][0]["embedding"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.len(), 44); // 32 bytes in base64
    let r = embed(&app, r#"{"model":"text-embedding-3-small"}"#).await;
    assert_eq!(r.status, 400);
    let r = embed(&app, r#"{"model":"gpt-4o","input":"x"}"#).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn models_and_compatible_prefix() {
    let app = app();
    let r = call(&app, "GET", "/v1/models", &[OA], "").await;
    let ids: Vec<String> = r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        ids.contains(&"gpt-4o-mini".to_string())
            && ids.contains(&"text-embedding-3-small".to_string())
    );
    let r = call(&app, "GET", "/v1/models/gpt-4o", &[OA], "").await;
    assert_eq!((r.status, r.json()["id"].clone()), (200, json!("gpt-4o")));
    let r = call(&app, "GET", "/v1/models/ft:gpt-9:acme::x1", &[OA], "").await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (404, json!("model_not_found"))
    );
    let mk = ("authorization", "Bearer mock-mistral-key-1");
    let body = r#"{"model":"mistral-small-latest","messages":[{"role":"user","content":"hi"}]}"#;
    let r = call(&app, "POST", "/mistral/v1/chat/completions", &[mk], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "mistral-small-latest");
    // Keys and models are per provider.
    assert_eq!(
        call(&app, "POST", "/mistral/v1/chat/completions", &[OA], body)
            .await
            .status,
        401
    );
    assert_eq!(
        call(&app, "POST", "/v1/chat/completions", &[mk], body)
            .await
            .status,
        401
    );
    assert_eq!(openai(&app, body, &[]).await.status, 404);
    let r = call(&app, "GET", "/mistral/v1/models", &[mk], "").await;
    assert_eq!(r.json()["data"][0]["id"], "mistral-small-latest");
    assert_eq!(
        call(&app, "POST", "/nope/v1/chat/completions", &[mk], body)
            .await
            .status,
        404
    );
    assert_eq!(
        call(&app, "GET", "/v1/chat/completions", &[OA], "")
            .await
            .status,
        405
    );
}

#[tokio::test]
async fn azure_rules() {
    let app = app();
    let k = ("api-key", "mock-azure-key-1");
    let body = r#"{"messages":[{"role":"user","content":"hello there world"}]}"#;
    let ok = "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21";
    let r = call(&app, "POST", ok, &[k], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "mock response to: hello there world"
    );
    let r = call(
        &app,
        "POST",
        "/openai/deployments/gpt-4o-mini/chat/completions",
        &[k],
        body,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["message"], "Resource not found");
    let r = call(
        &app,
        "POST",
        "/openai/deployments/nope/chat/completions?api-version=2024-10-21",
        &[k],
        body,
    )
    .await;
    assert_eq!(r.json()["error"]["code"], "DeploymentNotFound");
    let r = call(&app, "POST", ok, &[("api-key", "wrong")], body).await;
    assert_eq!(r.status, 401);
    let r = call(&app, "POST", ok, &[OA], body).await;
    assert_eq!(r.status, 401, "Bearer is not Azure's api-key");
    let r = call(&app, "POST", ok, &[("api-key", "mock-azure-key-429")], body).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    let r = call(
        &app,
        "POST",
        "/openai/deployments/text-embedding-3-small/embeddings?api-version=2024-10-21",
        &[k],
        r#"{"input":"hi","dimensions":4}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn streamed_pieces_are_escaped_like_the_whole_answer() {
    let app = app();
    let prompt = r#"say \"hi\"\n\tthen é→ü \\ done"#;
    let body =
        format!(r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let whole = openai(&app, &body, &[("x-mock-response-bytes", "300")])
        .await
        .json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(whole.contains("\"hi\"") && whole.contains("é→ü"), "{whole}");
    let sbody = body.replacen('{', r#"{"stream":true,"#, 1);
    for chunk_size in ["1370", "300"] {
        let r = openai(&app, &sbody, &[("x-mock-response-bytes", chunk_size)]).await;
        assert!(streamed_text(&r).starts_with(&whole[..40]));
    }
    let r = openai(&app, &sbody, &[("x-mock-response-bytes", "300")]).await;
    assert_eq!(streamed_text(&r), whole);
}

#[tokio::test]
async fn reasoning_effort_only_for_reasoning_models() {
    let app = app();
    let cases: &[(&str, u16, &str)] = &[
        (
            r#"{"model":"gpt-4o-mini","reasoning_effort":"low","messages":[{"role":"user","content":"x"}]}"#,
            400,
            "'reasoning_effort' is not supported with this model",
        ),
        (
            r#"{"model":"o4-mini","max_tokens":50,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "Use 'max_completion_tokens' instead",
        ),
        (
            r#"{"model":"o4-mini","reasoning_effort":"extreme","messages":[{"role":"user","content":"x"}]}"#,
            400,
            "Invalid value: 'extreme'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'.",
        ),
    ];
    for (body, status, needle) in cases {
        let r = openai(&app, body, &[]).await;
        assert_eq!(r.status, *status, "{body} -> {}", r.text());
        assert!(
            err_of(&r)["message"].as_str().unwrap().contains(needle),
            "{body} -> {}",
            r.text()
        );
    }
    let ok = r#"{"model":"o4-mini","reasoning_effort":"high","max_completion_tokens":50,"messages":[{"role":"user","content":"x"}]}"#;
    let r = openai(&app, ok, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
}
