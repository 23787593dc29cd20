#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use serde_json::{json, Value};

const GK: (&str, &str) = ("x-goog-api-key", "mock-gemini-key-1");
const GEN: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
const HELLO: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello there world"}]}]}"#;

fn gstatus(r: &Resp) -> String {
    r.json()["error"]["status"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn gemini_rules() {
    let app = app();
    let r = call(&app, "POST", GEN, &[GK], HELLO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["candidates"][0]["content"]["parts"][0]["text"],
        "mock response to: hello there world"
    );
    let cases: &[(&str, &str, u16, &str)] = &[
        (GEN, "{}", 400, "contents is not specified"),
        (GEN, "[1]", 400, "Invalid JSON payload"),
        (
            GEN,
            r#"{"contents":[{"parts":[{"text":"x"}]}],"bogus":1}"#,
            400,
            "Unknown name \"bogus\"",
        ),
        (
            GEN,
            r#"{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}"#,
            400,
            "valid role",
        ),
        (
            GEN,
            r#"{"contents":[{"role":"user","parts":[]}]}"#,
            400,
            "must not be empty",
        ),
        (
            GEN,
            r#"{"contents":[{"role":"user","parts":[{"text":""}]}]}"#,
            400,
            "empty text parameter",
        ),
        (
            GEN,
            r#"{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}"#,
            400,
            "function response turn",
        ),
        (
            GEN,
            r#"{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]}]}"#,
            400,
            "function call turn",
        ),
        (
            "/v1beta/models/gemini-9:generateContent",
            HELLO,
            404,
            "models/gemini-9 is not found",
        ),
        (
            "/v1beta/models/text-embedding-004:generateContent",
            HELLO,
            404,
            "not supported for generateContent",
        ),
        (
            "/v1beta/models/gemini-2.0-flash:embedContent",
            r#"{"content":{"parts":[{"text":"x"}]}}"#,
            404,
            "not supported for embedContent",
        ),
    ];
    for (path, body, status, needle) in cases {
        let r = call(&app, "POST", path, &[GK], body).await;
        assert_eq!(r.status, *status, "{path} {body} -> {}", r.text());
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{}",
            r.text()
        );
        assert_eq!(r.json()["error"]["code"], *status);
    }
    let v1 = "/v1/models/gemini-2.0-flash:generateContent";
    assert_eq!(call(&app, "POST", v1, &[GK], HELLO).await.status, 200);
    let r = call(&app, "POST", GEN, &[], HELLO).await;
    assert_eq!(
        (r.status, gstatus(&r)),
        (403, "PERMISSION_DENIED".to_string())
    );
    let r = call(&app, "POST", &format!("{GEN}?key=nope"), &[], HELLO).await;
    assert_eq!(
        (r.status, gstatus(&r)),
        (400, "INVALID_ARGUMENT".to_string())
    );
    let r = call(
        &app,
        "POST",
        GEN,
        &[("x-goog-api-key", "mock-gemini-key-429")],
        HELLO,
    )
    .await;
    assert_eq!(
        (r.status, gstatus(&r)),
        (429, "RESOURCE_EXHAUSTED".to_string())
    );
    let hot = r#"{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"temperature":2.5}}"#;
    assert_eq!(call(&app, "POST", GEN, &[GK], hot).await.status, 400);
    // A thinking model (gemini-2.5-flash); protobuf's JSON mapping takes
    // an integer as a string.
    let thinker = "/v1beta/models/gemini-2.5-flash:generateContent";
    for (tc, status) in [
        (r#"{"thinkingBudget":2048}"#, 200),
        (r#"{"thinkingBudget":-1,"includeThoughts":false}"#, 200),
        (r#"{"thinkingBudget":40000}"#, 400),
        (r#"{"thinkingBudget":"2048"}"#, 200),
        (r#"{"thinkingBudget":"many"}"#, 400),
        (r#"{"budget":2048}"#, 400),
    ] {
        let body = format!(
            r#"{{"contents":[{{"parts":[{{"text":"x"}}]}}],"generationConfig":{{"thinkingConfig":{tc}}}}}"#
        );
        let r = call(&app, "POST", thinker, &[GK], &body).await;
        assert_eq!(r.status, status, "{tc} -> {}", r.text());
    }
    // max output tokens: MAX_TOKENS finish.
    let body =
        r#"{"contents":[{"parts":[{"text":"hello"}]}],"generationConfig":{"maxOutputTokens":2}}"#;
    let v = call(&app, "POST", GEN, &[GK], body).await.json();
    assert_eq!(v["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 2);
}

#[tokio::test]
async fn bedrock_converse_and_stream() {
    let app = app();
    let body = r#"{"messages":[{"role":"user","content":[{"text":"hello there world"}]}]}"#;
    let r = bedrock(&app, "converse", body, "mock-bedrock-secret-1").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["output"]["message"]["content"][0]["text"],
        "mock response to: hello there world"
    );
    let r = bedrock(&app, "converse", body, "wrong").await;
    assert_eq!(r.status, 403);
    assert!(r
        .header("x-amzn-errortype")
        .unwrap()
        .starts_with("InvalidSignatureException"));
    let r = call(&app, "POST", &format!("{PATH}/converse"), &[], body).await;
    assert_eq!(r.status, 403);
    assert!(r
        .header("x-amzn-errortype")
        .unwrap()
        .starts_with("MissingAuthenticationTokenException"));

    let r = bedrock(&app, "converse-stream", body, "mock-bedrock-secret-1").await;
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.amazon.eventstream")
    );
    let mut buf = &r.body[..];
    let mut kinds = Vec::new();
    let mut text = String::new();
    while !buf.is_empty() {
        let (h, payload, n) = decode(buf);
        let kind = h
            .iter()
            .find(|(k, _)| k == ":event-type")
            .unwrap()
            .1
            .clone();
        let v: Value = serde_json::from_slice(&payload).unwrap();
        if kind == "contentBlockDelta" {
            text.push_str(v["delta"]["text"].as_str().unwrap());
        }
        kinds.push(kind);
        buf = &buf[n..];
    }
    assert_eq!(kinds[0], "messageStart");
    assert_eq!(
        &kinds[kinds.len() - 3..],
        &["contentBlockStop", "messageStop", "metadata"]
    );
    assert_eq!(text, "mock response to: hello there world");
}

#[tokio::test]
async fn bedrock_rules() {
    let app = app();
    let tc = r#""toolConfig":{"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{"type":"object"}}}}]}"#;
    let cases: Vec<(String, &str)> = vec![
        ("{}".into(), "Member must not be null"),
        (r#"{"messages":[{"role":"assistant","content":[{"text":"a"}]}]}"#.into(), "start with a user message"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]},{"role":"user","content":[{"text":"b"}]}]}"#.into(), "alternate"),
        (r#"{"messages":[{"role":"user","content":[]}]}"#.into(), "content field in the Message object is empty"),
        (r#"{"messages":[{"role":"user","content":[{"text":" "}]}]}"#.into(), "is blank"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a","image":{}}]}]}"#.into(), "exactly one"),
        (r#"{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"t","content":[]}}]}]}"#.into(), "toolConfig field must be defined"),
        (format!(r#"{{"messages":[{{"role":"user","content":[{{"toolResult":{{"toolUseId":"t","content":[]}}}}]}}],{tc}}}"#), "does not match any toolUse"),
        (format!(r#"{{"messages":[{{"role":"user","content":[{{"text":"a"}}]}},{{"role":"assistant","content":[{{"toolUse":{{"toolUseId":"t1","name":"f","input":{{}}}}}}]}},{{"role":"user","content":[{{"text":"b"}}]}}],{tc}}}"#), "Expected toolResult blocks"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"inferenceConfig":{"maxTokens":0}}"#.into(), "maxTokens"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"inferenceConfig":{"temperature":1.5}}"#.into(), "inferenceConfig.temperature"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"},{"cachePoint":{"type":"hot"}}]}]}"#.into(), "cachePoint.type"),
        (r#"{"system":[{"text":"s"},{"cachePoint":{}}],"messages":[{"role":"user","content":[{"text":"a"}]}]}"#.into(), "system.2.member.cachePoint.type"),
        (r#"{"system":[{"text":"s","cachePoint":{"type":"default"}}],"messages":[{"role":"user","content":[{"text":"a"}]}]}"#.into(), "SystemContentBlock"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{}}}},{"cachePoint":{"type":"x"}}]}}"#.into(), "toolConfig.tools.2.member.cachePoint.type"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"toolConfig":{"tools":[{"bogus":{}}]}}"#.into(), "Unknown field 'bogus' at 'toolConfig.tools.1.member'"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"toolConfig":{"tools":[{}]}}"#.into(), "Tool at 'toolConfig.tools.1.member' must contain exactly one member"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"inferenceConfig":{"maxTokens":4000},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":512}}}"#.into(), "greater than or equal to 1024"),
        (r#"{"messages":[{"role":"user","content":[{"text":"a"}]}],"inferenceConfig":{"maxTokens":2000},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":2048}}}"#.into(), "must be greater than `thinking.budget_tokens`"),
    ];
    for (body, needle) in &cases {
        // Claude Sonnet 4.5: a model that thinks.
        let r = bedrock_on(&app, SONNET_PATH, "converse", body, "mock-bedrock-secret-1").await;
        assert_eq!(r.status, 400, "{body} -> {}", r.text());
        assert!(r
            .header("x-amzn-errortype")
            .unwrap()
            .starts_with("ValidationException"));
        assert!(
            r.json()["message"].as_str().unwrap().contains(needle),
            "{body} -> {}",
            r.text()
        );
    }
    let r = bedrock(&app, "converse", "{oops", "mock-bedrock-secret-1").await;
    assert!(r
        .header("x-amzn-errortype")
        .unwrap()
        .starts_with("SerializationException"));
    let r = bedrock(
        &app,
        "converse",
        &json!({"messages":[{"role":"user","content":[{"text":"x"}]}]}).to_string(),
        "mock-bedrock-secret-1",
    )
    .await;
    assert_eq!(r.status, 200);
    let cached = json!({
        "system": [{"text": "s"}, {"cachePoint": {"type": "default"}}],
        "messages": [{"role": "user", "content": [{"text": "a"}, {"cachePoint": {"type": "default"}}]}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}, {"cachePoint": {"type": "default"}}]},
        "inferenceConfig": {"maxTokens": 4000},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}}});
    let r = bedrock_on(
        &app,
        SONNET_PATH,
        "converse",
        &cached.to_string(),
        "mock-bedrock-secret-1",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The model id arrives percent-encoded in the path and is reported decoded.
    let st = call(&app, "GET", "/_mock/stats", &[], "").await.json();
    assert!(st["by_model"][MODEL].as_u64().unwrap() >= 1, "{st}");
}

#[tokio::test]
async fn error_event_ends_each_stream_with_the_native_error() {
    let app = app();
    let ee = ("x-mock-error", "error-event");
    // OpenAI: an error object as the last data, no [DONE].
    let s = r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there world"}]}"#;
    let r = openai(&app, s, &[ee, ("x-mock-response-bytes", "200")]).await;
    assert_eq!(r.status, 200);
    assert!(!r.aborted && !r.text().contains("[DONE]"));
    let data = r.sse_data();
    assert_eq!(data.last().unwrap()["error"]["type"], "server_error");
    assert!(data.len() > 3, "content came before the error");
    // Anthropic: `event: error` with overloaded_error, no message_stop.
    let s = r#"{"model":"claude-haiku-4-5","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
    let r = anthropic(&app, s, &[ee, ("x-mock-response-bytes", "200")]).await;
    let ev = r.sse_events();
    assert_eq!(ev.last().unwrap(), "error");
    assert!(
        ev.contains(&"content_block_delta".to_string())
            && !ev.contains(&"message_stop".to_string())
    );
    assert_eq!(
        r.sse_data().last().unwrap()["error"]["type"],
        "overloaded_error"
    );
    // Gemini SSE and JSON array.
    let p = "/v1beta/models/gemini-2.0-flash:streamGenerateContent";
    let r = call(
        &app,
        "POST",
        &format!("{p}?alt=sse"),
        &[GK, ee, ("x-mock-response-bytes", "200")],
        HELLO,
    )
    .await;
    let last: Value =
        serde_json::from_str(r.text().trim_end().rsplit("data: ").next().unwrap()).unwrap();
    assert_eq!(last["error"]["status"], "UNAVAILABLE");
    let r = call(&app, "POST", p, &[GK, ee], HELLO).await;
    let arr: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        arr.as_array().unwrap().last().unwrap()["error"]["code"],
        503
    );
    // Bedrock: an exception message ends the event stream.
    let body = r#"{"messages":[{"role":"user","content":[{"text":"hello there world"}]}]}"#;
    let path = format!("{PATH}/converse-stream");
    let mut h = signed(&path, body, "mock-bedrock-secret-1");
    h.push(("x-mock-error".into(), "error-event".into()));
    let hr: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = call(&app, "POST", &path, &hr, body).await;
    let mut buf = &r.body[..];
    let mut last = Vec::new();
    while !buf.is_empty() {
        let (hs, _, n) = decode(buf);
        last = hs;
        buf = &buf[n..];
    }
    assert!(last.contains(&(":message-type".to_string(), "exception".to_string())));
    assert!(last.contains(&(
        ":exception-type".to_string(),
        "modelStreamErrorException".to_string()
    )));
}

/// Odd bodies on every endpoint get a 4xx JSON error, never a panic or hang.
#[tokio::test]
async fn odd_input_gets_native_errors() {
    let app = app();
    let bodies: Vec<String> = vec![
        "".into(),
        "null".into(),
        "[]".into(),
        "\"x\"".into(),
        "\u{fffd}\u{0}".into(),
        "{".repeat(200) + &"}".repeat(200),
        r#"{"model":[],"messages":5,"contents":5,"content":5,"input":{},"requests":5}"#.into(),
        r#"{"model":"gpt-4o-mini","messages":[5,null,{"role":5}],"max_tokens":"many"}"#.into(),
        r#"{"model":"claude-haiku-4-5","max_tokens":-1,"messages":[{"role":"user","content":[{"type":5}]}]}"#.into(),
        r#"{"model":"claude-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":{"a":1}}],"tools":5,"tool_choice":"any"}"#.into(),
        r#"{"contents":[{"role":"user","parts":[{"functionCall":5}]}],"tools":[{"functionDeclarations":[{}]}]}"#.into(),
        r#"{"messages":[{"role":"user","content":[{"toolUse":5}]}],"toolConfig":{"tools":[5]}}"#.into(),
    ];
    let plain: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("/v1/chat/completions", vec![OA]),
        ("/v1/embeddings", vec![OA]),
        (
            "/mistral/v1/chat/completions",
            vec![("authorization", "Bearer mock-mistral-key-1")],
        ),
        ("/v1/messages", vec![AK, AV]),
        (
            "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21",
            vec![("api-key", "mock-azure-key-1")],
        ),
        (
            "/openai/deployments/text-embedding-3-small/embeddings?api-version=2024-10-21",
            vec![("api-key", "mock-azure-key-1")],
        ),
        (GEN, vec![GK]),
        (
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
            vec![GK],
        ),
        ("/v1beta/models/text-embedding-004:embedContent", vec![GK]),
        (
            "/v1beta/models/text-embedding-004:batchEmbedContents",
            vec![GK],
        ),
    ];
    for b in &bodies {
        for (path, h) in &plain {
            let r = call(&app, "POST", path, h, b).await;
            assert!(
                (400..500).contains(&r.status),
                "{path} {b:.40} -> {} {}",
                r.status,
                r.text()
            );
            let _ = r.json();
        }
        for op in ["converse", "converse-stream", "invoke"] {
            let r = bedrock(&app, op, b, "mock-bedrock-secret-1").await;
            assert!(
                (400..500).contains(&r.status),
                "{op} {b:.40} -> {} {}",
                r.status,
                r.text()
            );
            assert!(r.header("x-amzn-errortype").is_some());
            let _ = r.json();
        }
    }
    // A huge size override is capped instead of exhausting memory.
    let r = openai(
        &app,
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}"#,
        &[("x-mock-response-bytes", "99999999999999")],
    )
    .await;
    let len = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .len();
    assert_eq!(len, mock_llm::app::MAX_RESPONSE_BYTES);
}
