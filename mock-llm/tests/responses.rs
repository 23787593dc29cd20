#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! OpenAI Responses API: validation, the `response` object, the stream's
//! event sequence, Azure's paths.

use crate::common::*;
use serde_json::{json, Value};

async fn responses(body: &Value, extra: &[(&str, &str)]) -> Resp {
    let mut h = vec![OA];
    h.extend_from_slice(extra);
    call(&app(), "POST", "/v1/responses", &h, &body.to_string()).await
}

fn events(r: &Resp) -> Vec<(String, Value)> {
    r.sse_events().into_iter().zip(r.sse_data()).collect()
}

#[tokio::test]
async fn text_answer_and_usage() {
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": [
            {"role": "developer", "content": "be brief"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "hello there world"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}]}]}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["role"], "assistant");
    assert_eq!(
        v["output"][0]["content"][0],
        json!({"type": "output_text", "text": "mock response to: hello there world", "annotations": [], "logprobs": []})
    );
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 16})
    );
    assert_eq!(r.header("x-request-id"), Some("000000000000000000000001"));
}

#[tokio::test]
async fn stream_event_sequence() {
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "hello there world", "stream": true,
                "reasoning": {"effort": "low"}}),
        &[],
    )
    .await;
    assert_eq!(
        r.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let ev = events(&r);
    let kinds: Vec<&str> = ev.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (k, v)) in ev.iter().enumerate() {
        assert_eq!(v["type"], *k);
        assert_eq!(v["sequence_number"], i);
    }
    assert_eq!(ev[2].1["item"]["type"], "reasoning");
    assert_eq!(ev[4].1["output_index"], 1);
    assert_eq!(ev[4].1["item"]["status"], "in_progress");
    let text: String = ev
        .iter()
        .filter(|(k, _)| k == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "mock response to: hello there world");
    assert_eq!(ev[9].1["text"], text);
    let done = &ev[12].1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][1]["content"][0]["text"], text);
    assert_eq!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"],
        16
    );
    assert_eq!(ev[0].1["response"]["usage"], Value::Null);
}

#[tokio::test]
async fn function_call_stream_and_pairing() {
    let tools = json!([{"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}]);
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "weather?", "stream": true, "tools": tools,
                "tool_choice": {"type": "function", "name": "get_weather"}}),
        &[],
    )
    .await;
    let ev = events(&r);
    let args: String = ev
        .iter()
        .filter(|(k, _)| k == "response.function_call_arguments.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "mock", "days": 1})
    );
    let done = ev
        .iter()
        .find(|(k, _)| k == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(done.1["arguments"], args);
    let call = &ev.last().unwrap().1["response"]["output"][0];
    assert_eq!(call["type"], "function_call");
    let id = call["call_id"].as_str().unwrap();
    // The call answered: accepted. Left unanswered, or an output for an
    // unknown call: refused.
    let fc =
        json!({"type": "function_call", "call_id": id, "name": "get_weather", "arguments": args});
    let out = json!({"type": "function_call_output", "call_id": id, "output": "sunny"});
    let user = json!({"role": "user", "content": "weather?"});
    let ok = responses(
        &json!({"model": "gpt-4o-mini", "tools": tools, "input": [user, fc, out]}),
        &[],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let r = responses(&json!({"model": "gpt-4o-mini", "input": [user, fc]}), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("No tool output found for function call"));
    let r = responses(&json!({"model": "gpt-4o-mini", "input": [user, out]}), &[]).await;
    assert_eq!(r.status, 400);
    // Functions inside a namespace, and functions without parameters, can be
    // called; hosted tools are accepted and never called.
    let ns = json!([{"type": "web_search"}, {"type": "namespace", "name": "ns", "description": "d",
        "tools": [{"type": "function", "name": "ping"}]}]);
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "x", "tools": ns}),
        &[("x-mock-tool-call", "ping")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["output"][0]["name"], "ping");
    assert_eq!(r.json()["output"][0]["arguments"], "{}");
    // x-mock-tool-call names an undeclared tool: refused.
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "x"}),
        &[("x-mock-tool-call", "nope")],
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn bad_requests_get_openai_errors() {
    let cases = [
        (
            json!({"model": "gpt-4o-mini", "input": "x", "n": 2}),
            "n",
            "Unknown parameter: 'n'.",
        ),
        (
            json!({"input": "x"}),
            "model",
            "Missing required parameter: 'model'.",
        ),
        (
            json!({"model": "gpt-4o-mini"}),
            "input",
            "Missing required parameter: 'input'.",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": 3}),
            "input",
            "Invalid type for 'input'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "max_output_tokens": 15}),
            "max_output_tokens",
            "Expected a value >= 16",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "max_output_tokens": 20000}),
            "max_output_tokens",
            "too large",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "temperature": 3}),
            "temperature",
            "Expected a value within",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "reasoning": {"effort": "maximal"}}),
            "reasoning.effort",
            "Invalid value: 'maximal'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}}),
            "text.format.schema",
            "Missing required parameter",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "text": {"format": {"type": "yaml"}}}),
            "text.format.type",
            "Invalid value: 'yaml'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]}),
            "tools[0].parameters",
            "Invalid type",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "web_search"}]}]}),
            "tools[0].tools[0].type",
            "Invalid value: 'web_search'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "client": 1}),
            "client",
            "Unknown parameter",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "teleport"}]}),
            "tools[0].type",
            "Invalid value: 'teleport'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "tool_choice": {"type": "function", "name": "f"}}),
            "tool_choice",
            "not found in 'tools'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "stream_options": {}}),
            "stream_options",
            "only allowed when 'stream'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": [{"role": "tool", "content": "x"}]}),
            "input[0].role",
            "Invalid value: 'tool'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}),
            "input[0].content[0].type",
            "Invalid value: 'output_text'",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
            "input[0].content[0].text",
            "Missing required parameter",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": [{"type": "reasoning"}]}),
            "input[0].summary",
            "Missing required parameter",
        ),
        (
            json!({"model": "gpt-4o-mini", "input": "x", "store": 1}),
            "store",
            "expected a boolean",
        ),
        (
            json!({"model": "text-embedding-3-small", "input": "x"}),
            "model",
            "does not support the Responses API",
        ),
    ];
    for (body, param, msg) in cases {
        let r = responses(&body, &[]).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{body}");
        assert_eq!(e["param"], param, "{body}");
        assert!(e["message"].as_str().unwrap().contains(msg), "{body}: {e}");
    }
    let r = responses(&json!({"model": "gpt-9", "input": "x"}), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = call(&app(), "POST", "/v1/responses", &[OA], "{not json").await;
    assert_eq!(r.status, 400);
    let r = call(&app(), "POST", "/v1/responses", &[], "{}").await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn json_schema_and_truncation() {
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "x", "text": {"format": {"type": "json_schema", "name": "o",
            "schema": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}}}}),
        &[],
    )
    .await;
    let t = r.json()["output"][0]["content"][0]["text"].clone();
    assert_eq!(
        serde_json::from_str::<Value>(t.as_str().unwrap()).unwrap(),
        json!({"tags": ["mock"]})
    );
    let r = responses(
        &json!({"model": "gpt-4o-mini", "input": "x", "max_output_tokens": 16, "stream": true}),
        &[("x-mock-response-bytes", "500")],
    )
    .await;
    let ev = events(&r);
    let (k, last) = ev.last().unwrap();
    assert_eq!(k, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 16);
}

#[tokio::test]
async fn in_stream_error_event_and_abort() {
    let body = json!({"model": "gpt-4o-mini", "input": "hello there world", "stream": true});
    let r = responses(
        &body,
        &[
            ("x-mock-error", "error-event"),
            ("x-mock-response-bytes", "160"),
        ],
    )
    .await;
    let ev = events(&r);
    let (k, e) = ev.last().unwrap();
    assert_eq!(k, "error");
    assert_eq!(e["code"], "server_error");
    assert_eq!(e["sequence_number"], ev.len() - 1);
    assert!(!ev.iter().any(|(k, _)| k == "response.completed"));
    let r = responses(&body, &[("x-mock-error", "abort-mid-stream")]).await;
    assert!(r.aborted);
}

#[tokio::test]
async fn azure_paths() {
    let app = app();
    let body = r#"{"model":"gpt-4o-mini","input":"hello azure"}"#;
    let key = ("api-key", "mock-azure-key-1");
    let r = call(
        &app,
        "POST",
        "/openai/responses?api-version=2025-04-01-preview",
        &[key],
        body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["output"][0]["content"][0]["text"],
        "mock response to: hello azure"
    );
    let r = call(&app, "POST", "/openai/v1/responses", &[key], body).await;
    assert_eq!(r.status, 200);
    let r = call(&app, "POST", "/openai/responses", &[key], body).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["message"], "Resource not found");
    let r = call(
        &app,
        "POST",
        "/openai/v1/responses",
        &[key],
        r#"{"model":"nope","input":"x"}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "DeploymentNotFound");
    let r = call(&app, "POST", "/openai/v1/responses", &[OA], body).await;
    assert_eq!(r.status, 401);
}
