#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use mock_llm::app::App;
use serde_json::{json, Value};

const HELLO: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hello there world"}]}"#;

#[tokio::test]
async fn non_stream_shape_and_usage() {
    let app = app();
    let r = anthropic(&app, HELLO, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(
        v["content"],
        json!([{"type":"text","text":"mock response to: hello there world"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["input_tokens"], 5);
    assert_eq!(v["usage"]["output_tokens"], 9);
    assert!(r.header("request-id").unwrap().starts_with("req_"));
}

#[tokio::test]
async fn stream_event_sequence() {
    let app = app();
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"system":"be brief","messages":[{"role":"user","content":"hello there world"}]}"#;
    let r = anthropic(&app, body, &[]).await;
    assert_eq!(r.status, 200);
    let ev = r.sse_events();
    assert_eq!(&ev[..3], &["message_start", "content_block_start", "ping"]);
    let n = ev.len();
    assert_eq!(
        &ev[n - 4..],
        &[
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(ev[3..n - 3].iter().all(|e| e == "content_block_delta"));
    let data = r.sse_data();
    // Every data payload's type equals its event name.
    for (e, d) in ev.iter().zip(&data) {
        assert_eq!(d["type"], e.as_str());
    }
    let text: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, "mock response to: hello there world");
    let delta = &data[n - 2];
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 9);
    // "be brief" + "hello there world" = 25 chars -> 7 tokens.
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 7);
}

#[tokio::test]
async fn tool_use_stream_and_round_trip() {
    let app = app();
    let tools = r#""tools":[{"name":"get_weather","description":"w","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}]"#;
    let body = format!(
        r#"{{"model":"claude-haiku-4-5","max_tokens":50,"stream":true,"messages":[{{"role":"user","content":"weather?"}}],{tools},"tool_choice":{{"type":"tool","name":"get_weather"}}}}"#
    );
    let r = anthropic(&app, &body, &[]).await;
    let data = r.sse_data();
    assert_eq!(data[1]["content_block"]["type"], "tool_use");
    assert_eq!(data[1]["content_block"]["input"], json!({}));
    let id = data[1]["content_block"]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("toolu_"));
    let partial: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({"city":"mock","days":1})
    );
    assert_eq!(data[data.len() - 2]["delta"]["stop_reason"], "tool_use");

    // The tool result that answers it is accepted.
    let follow = format!(
        r#"{{"model":"claude-haiku-4-5","max_tokens":50,"messages":[{{"role":"user","content":"weather?"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"get_weather","input":{{"city":"mock"}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":"sunny"}}]}}],{tools}}}"#
    );
    let r = anthropic(&app, &follow, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = anthropic(&app, &follow, &[("x-mock-tool-call", "get_weather")]).await;
    assert_eq!(r.json()["content"][0]["type"], "tool_use");
}

fn check_error(r: &Resp, status: u16, ty: &str, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], ty, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(needle),
        "{v}"
    );
    assert!(v["request_id"].as_str().unwrap().starts_with("req_"));
}

/// POST `HELLO` to /v1/messages with exactly these headers.
async fn hello_with(app: &App, headers: &[(&str, &str)]) -> Resp {
    call(app, "POST", "/v1/messages", headers, HELLO).await
}

#[tokio::test]
async fn headers_are_required() {
    let app = app();
    let r = hello_with(&app, &[AV]).await;
    check_error(&r, 401, "authentication_error", "x-api-key");
    let r = hello_with(&app, &[("x-api-key", "bad"), AV]).await;
    check_error(&r, 401, "authentication_error", "invalid x-api-key");
    // The same API key as a Bearer token is accepted (official SDK 2.x).
    let r = hello_with(
        &app,
        &[("authorization", "Bearer mock-anthropic-key-1"), AV],
    )
    .await;
    assert_eq!(r.status, 200);
    let r = hello_with(&app, &[("authorization", "Bearer mock-openai-key-1"), AV]).await;
    check_error(&r, 401, "authentication_error", "invalid x-api-key");
    let r = hello_with(&app, &[AK]).await;
    check_error(&r, 400, "invalid_request_error", "anthropic-version");
    let r = hello_with(&app, &[AK, ("anthropic-version", "latest")]).await;
    check_error(&r, 400, "invalid_request_error", "anthropic-version");
    let r = hello_with(&app, &[AK, ("anthropic-version", "2022-13-01")]).await;
    check_error(&r, 400, "invalid_request_error", "anthropic-version");
    let r = hello_with(&app, &[AK, ("anthropic-version", "2026-10-21")]).await;
    assert_eq!(r.status, 200);
    let r = hello_with(&app, &[("x-api-key", "mock-anthropic-key-401"), AV]).await;
    check_error(&r, 401, "authentication_error", "");
    let r = hello_with(&app, &[("x-api-key", "mock-anthropic-key-429"), AV]).await;
    check_error(&r, 429, "rate_limit_error", "");
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        hello_with(&app, &[("x-api-key", "mock-anthropic-key-2"), AV])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn request_rules() {
    let app = app();
    let tu = r#"{"type":"tool_use","id":"toolu_1","name":"f","input":{}}"#;
    let cases: Vec<(String, u16, &str, &str)> = vec![
        ("{bad json".into(), 400, "invalid_request_error", "parsing the body"),
        (r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "max_tokens: Field required"),
        (r#"{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "model: Field required"),
        (r#"{"model":"claude-9","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#.into(), 404, "not_found_error", "model: claude-9"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5}"#.into(), 400, "invalid_request_error", "messages: Field required"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "Unexpected role \"system\""),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "first message must use the \"user\" role"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "roles must alternate"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"assistant","content":"c"}]}"#.into(), 400, "invalid_request_error", "multiple \"assistant\" roles"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"r"}]}]}"#.into(), 400, "invalid_request_error", "unexpected `tool_use_id`"),
        (format!(r#"{{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{{"role":"user","content":"a"}},{{"role":"assistant","content":[{tu}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_2","content":"r"}}]}}]}}"#), 400, "invalid_request_error", "unexpected `tool_use_id`"),
        (format!(r#"{{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{{"role":"user","content":"a"}},{{"role":"assistant","content":[{tu}]}},{{"role":"user","content":"no result"}}]}}"#), 400, "invalid_request_error", "without `tool_result`"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"bogus"}]}]}"#.into(), 400, "invalid_request_error", "does not match"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "input_schema"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"n":1,"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "n: Extra inputs are not permitted"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"response_format":{"type":"json_object"},"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "response_format: Extra inputs"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":64001,"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "64001 > 64000"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "temperature: Input should be less than or equal to 1"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"stop_sequences":"END","messages":[{"role":"user","content":"x"}]}"#.into(), 400, "invalid_request_error", "stop_sequences"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AA=="}}]}]}"#.into(), 400, "invalid_request_error", "media_type"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url"}}]}]}"#.into(), 400, "invalid_request_error", "source.url"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]}"#.into(), 400, "invalid_request_error", "image.source: Field required"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":""},{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}"#.into(), 400, "invalid_request_error", "text content blocks must be non-empty"),
        (r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}"#.into(), 400, "invalid_request_error", "text content blocks must be non-empty"),
    ];
    for (body, status, ty, needle) in &cases {
        let r = anthropic(&app, body, &[]).await;
        check_error(&r, *status, ty, needle);
    }
    // The valid forms of the same fields are accepted (Claude 4.5 takes
    // temperature or top_p, not both).
    let ok = r#"{"model":"claude-sonnet-4-5","max_tokens":64000,"temperature":1,"top_k":5,"stop_sequences":["END"],"metadata":{"user_id":"u"},"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}"#;
    assert_eq!(anthropic(&app, ok, &[]).await.status, 200);
}

#[tokio::test]
async fn faults_use_anthropic_shape() {
    let app = app();
    let r = anthropic(&app, HELLO, &[("x-mock-error", "529")]).await;
    check_error(&r, 529, "overloaded_error", "Overloaded");
    let r = anthropic(&app, HELLO, &[("x-mock-error", "500")]).await;
    check_error(&r, 500, "api_error", "");
    let s = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let r = anthropic(&app, s, &[("x-mock-error", "abort-mid-stream")]).await;
    assert!(r.aborted);
    assert!(!r.sse_events().contains(&"message_stop".to_string()));
    let r = anthropic(&app, HELLO, &[("x-mock-response-bytes", "10320")]).await;
    assert_eq!(
        r.json()["content"][0]["text"].as_str().unwrap().len(),
        400,
        "max_tokens 100 caps at 400 chars"
    );
    assert_eq!(r.json()["stop_reason"], "max_tokens");
}

async fn count(app: &mock_llm::app::App, body: &str) -> Resp {
    call(app, "POST", "/v1/messages/count_tokens", &[AK, AV], body).await
}

#[tokio::test]
async fn count_tokens_matches_message_usage() {
    let app = app();
    let msgs = r#""system":"be brief","messages":[{"role":"user","content":"hello there world"},{"role":"assistant","content":"hi"},{"role":"user","content":[{"type":"text","text":"and again, with more words"}]}]"#;
    let r = count(&app, &format!(r#"{{"model":"claude-opus-5-5",{msgs}}}"#)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let n = r.json()["input_tokens"].as_u64().unwrap();
    assert_eq!(r.json(), serde_json::json!({"input_tokens": n}));
    assert!(r.header("request-id").unwrap().starts_with("req_"));
    let full = anthropic(
        &app,
        &format!(r#"{{"model":"claude-opus-5-5","max_tokens":50,{msgs}}}"#),
        &[],
    )
    .await;
    assert_eq!(full.json()["usage"]["input_tokens"].as_u64(), Some(n));
    // "be brief" + "hello there world" + "hi" + "and again, with more words" = 53 chars.
    assert_eq!(n, 14);
}

#[tokio::test]
async fn count_tokens_is_checked_like_messages() {
    let app = app();
    for (body, status, msg) in [
        (
            r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "max_tokens: Extra inputs are not permitted",
        ),
        (
            r#"{"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "stream: Extra inputs are not permitted",
        ),
        (
            r#"{"model":"claude-sonnet-4-5"}"#,
            400,
            "messages: Field required",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}]}"#,
            400,
            "model: Field required",
        ),
        (
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"assistant","content":"x"}]}"#,
            400,
            "first message must use the \"user\" role",
        ),
        (
            r#"{"model":"claude-9","messages":[{"role":"user","content":"x"}]}"#,
            404,
            "model: claude-9",
        ),
    ] {
        let r = count(&app, body).await;
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.json()["type"], "error");
        let m = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(m.contains(msg), "{body}: {m}");
    }
    let r = call(&app, "POST", "/v1/messages/count_tokens", &[AV], "{}").await;
    assert_eq!(r.status, 401);
    let r = call(&app, "GET", "/v1/messages/count_tokens", &[AK, AV], "").await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn current_and_claude_code_model_ids_are_known() {
    let app = app();
    for m in [
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-opus-4-8",
        "claude-sonnet-4-6",
        "claude-haiku-4-5-20251001",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
    ] {
        let body = format!(
            r#"{{"model":"{m}","max_tokens":5,"messages":[{{"role":"user","content":"x"}}]}}"#
        );
        assert_eq!(anthropic(&app, &body, &[]).await.status, 200, "{m}");
    }
}
