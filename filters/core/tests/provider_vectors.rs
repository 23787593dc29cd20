//! Table-driven vectors for OpenAI → Azure OpenAI, Gemini and Bedrock:
//! request path and body, response bodies and usage, errors, and both
//! streams (Gemini SSE, Bedrock event-stream) fed at every byte split, plus
//! the event-stream translator on truncated and corrupted frames.

use crate::common;

use serde_json::{json, Value};
use tollgate_core::codec::eventstream::{encode, event};
use tollgate_core::config::{Key, Runtime};
use tollgate_core::translate::{for_kind, Endpoint, ResponseCtx, Usage};

const CONFIG: &str = r#"{"providers": {
  "azure": {"kind": "azure", "cluster": "azure", "api_version": "2024-10-21",
    "models": ["gpt-4o-mini", "text-embedding-3-small"], "deployments": {"gpt-4o-mini": "chat-prod"},
    "keys": [{"id": "az1", "value": "azk"}]},
  "gemini": {"kind": "gemini", "cluster": "gemini", "models": ["gemini-2.0-flash", "text-embedding-004"],
    "keys": [{"id": "g1", "value": "gk"}]},
  "bedrock": {"kind": "bedrock", "cluster": "bedrock", "region": "us-east-1",
    "models": ["anthropic.claude-3-haiku-20240307-v1:0", "amazon.titan-embed-text-v2:0"],
    "keys": [{"id": "b1", "access_key_id": "AKIDEXAMPLE", "value": "secret", "session_token": "sess-XYZ"}]}}}"#;

fn rt() -> Runtime {
    Runtime::from_json(CONFIG.as_bytes(), &|_| None).unwrap()
}

type Req = Result<(String, Value), (u16, Option<String>, Option<String>)>;

fn translate(model: &str, endpoint: Endpoint, body: Value) -> Req {
    common::with_ctx(&rt(), model, endpoint, |p, ctx| {
        match for_kind(p.kind()).request(ctx, &body) {
            Ok(up) => Ok((up.path, serde_json::from_slice(&up.body).unwrap())),
            Err(e) => Err((e.status, e.param, e.code)),
        }
    })
}

fn user(s: &str) -> Value {
    json!({"role": "user", "content": s})
}

const G: &str = "gemini/gemini-2.0-flash";
const B: &str = "bedrock/anthropic.claude-3-haiku-20240307-v1:0";

fn tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": false}}})
}

fn round_trip_messages() -> Value {
    json!([
        {"role": "system", "content": "sys"},
        user("weather?"),
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        user("thanks")
    ])
}

#[test]
fn azure_requests() {
    let (path, body) = translate(
        "azure/gpt-4o-mini",
        Endpoint::Chat,
        json!({"model": "azure/gpt-4o-mini", "messages": [user("hi")], "stream": true}),
    )
    .unwrap();
    assert_eq!(
        path,
        "/openai/deployments/chat-prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    let (path, _) = translate(
        "azure/text-embedding-3-small",
        Endpoint::Embeddings,
        json!({"model": "x", "input": "a"}),
    )
    .unwrap();
    assert_eq!(
        path,
        "/openai/deployments/text-embedding-3-small/embeddings?api-version=2024-10-21"
    );
}

#[test]
fn gemini_request_vectors() {
    let cases: Vec<(&str, Value, &str, Value)> = vec![
        (
            "minimal",
            json!({"model": G, "messages": [user("hi")]}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        ),
        (
            "system, merged turns, generationConfig, stream path",
            json!({"model": G, "messages": [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"},
                user("x"), user("y"), {"role": "assistant", "content": "z"}],
                "temperature": 0.3, "top_p": 0.8, "max_completion_tokens": 9, "stop": "END", "n": 2, "seed": 7,
                "presence_penalty": 0.5, "frequency_penalty": 0.1, "stream": true}),
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
            json!({"contents": [{"role": "user", "parts": [{"text": "x"}, {"text": "y"}]}, {"role": "model", "parts": [{"text": "z"}]}],
                   "systemInstruction": {"parts": [{"text": "a\n\nb"}]},
                   "generationConfig": {"temperature": 0.3, "topP": 0.8, "maxOutputTokens": 9, "stopSequences": ["END"],
                       "candidateCount": 2, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.1}}),
        ),
        (
            "image as inlineData",
            json!({"model": G, "messages": [{"role": "user", "content": [{"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}]}]}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}]}]}),
        ),
        (
            "tools, named tool_choice, tool results named after the call (object and text), the schema whole in parametersJsonSchema",
            json!({"model": G, "messages": round_trip_messages(), "tools": [tool()],
                   "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [
                {"role": "user", "parts": [{"text": "weather?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"temp": 21}}},
                    {"functionResponse": {"name": "get_weather", "response": {"content": "sunny"}}},
                    {"text": "thanks"}]}],
              "systemInstruction": {"parts": [{"text": "sys"}]},
              "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather",
                  "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                                           "additionalProperties": false}}]}],
              "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}}),
        ),
        (
            "tool_choice none / required, tool without parameters",
            json!({"model": G, "messages": [user("q")], "tool_choice": "required",
                   "tools": [{"type": "function", "function": {"name": "now"}}]}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}],
                   "tools": [{"functionDeclarations": [{"name": "now"}]}],
                   "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}),
        ),
        (
            "response_format json_schema",
            json!({"model": G, "messages": [user("q")], "response_format": {"type": "json_schema",
                "json_schema": {"name": "r", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}}}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}],
                   "generationConfig": {"responseMimeType": "application/json",
                       "responseJsonSchema": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}}),
        ),
        (
            "response_format json_object",
            json!({"model": G, "messages": [user("q")], "response_format": {"type": "json_object"}}),
            "/v1beta/models/gemini-2.0-flash:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}],
                   "generationConfig": {"responseMimeType": "application/json"}}),
        ),
    ];
    for (name, input, path, want) in cases {
        let (p, got) =
            translate(G, Endpoint::Chat, input).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(p, path, "{name}");
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn bedrock_request_vectors() {
    let m = "/model/anthropic.claude-3-haiku-20240307-v1%3A0";
    let cases: Vec<(&str, Value, String, Value)> = vec![
        (
            "minimal",
            json!({"model": B, "messages": [user("hi")], "seed": 1, "user": "u"}),
            format!("{m}/converse"),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
        ),
        (
            "system blocks, inferenceConfig (Claude takes temperature or top_p: top_p dropped; no empty stop), stream path",
            json!({"model": B, "messages": [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, user("x")],
                   "max_tokens": 5, "temperature": 0.2, "top_p": 0.9, "stop": ["s1", "", "s2"], "stream": true}),
            format!("{m}/converse-stream"),
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}], "system": [{"text": "a"}, {"text": "b"}],
                   "inferenceConfig": {"maxTokens": 5, "temperature": 0.2, "stopSequences": ["s1", "s2"]}}),
        ),
        (
            "image bytes",
            json!({"model": B, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklG"}}]}]}),
            format!("{m}/converse"),
            json!({"messages": [{"role": "user", "content": [{"image": {"format": "webp", "source": {"bytes": "UklG"}}}]}]}),
        ),
        (
            "toolUse / toolResult (json and text), toolSpec, toolChoice tool",
            json!({"model": B, "messages": round_trip_messages(), "tools": [tool()],
                   "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
            format!("{m}/converse"),
            json!({"messages": [
                {"role": "user", "content": [{"text": "weather?"}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "call_1", "content": [{"json": {"temp": 21}}]}},
                    {"toolResult": {"toolUseId": "call_1", "content": [{"text": "sunny"}]}},
                    {"text": "thanks"}]}],
              "system": [{"text": "sys"}],
              "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather",
                  "inputSchema": {"json": tool()["function"]["parameters"]}}}],
                  "toolChoice": {"tool": {"name": "get_weather"}}}}),
        ),
        (
            "tool_choice none (Converse has none: the model chooses), a schema without type, an empty description",
            json!({"model": B, "messages": [user("q")], "tool_choice": "none",
                   "tools": [{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]}),
            format!("{m}/converse"),
            json!({"messages": [{"role": "user", "content": [{"text": "q"}]}],
                   "toolConfig": {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}]}}),
        ),
        (
            "toolChoice auto / any",
            json!({"model": B, "messages": [user("q")], "tools": [tool()], "tool_choice": "required"}),
            format!("{m}/converse"),
            json!({"messages": [{"role": "user", "content": [{"text": "q"}]}],
                   "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather",
                       "inputSchema": {"json": tool()["function"]["parameters"]}}}], "toolChoice": {"any": {}}}}),
        ),
    ];
    for (name, input, path, want) in cases {
        let (p, got) =
            translate(B, Endpoint::Chat, input).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(p, path, "{name}");
        assert_eq!(got, want, "{name}");
    }
    let (p, got) = translate(
        "bedrock/amazon.titan-embed-text-v2:0",
        Endpoint::Embeddings,
        json!({"model": "x", "input": ["hello"], "dimensions": 256}),
    )
    .unwrap();
    assert_eq!(p, "/model/amazon.titan-embed-text-v2%3A0/invoke");
    assert_eq!(got, json!({"inputText": "hello", "dimensions": 256}));
}

#[test]
fn refusals_name_the_parameter() {
    let cases: Vec<(&str, Endpoint, Value, &str, &str)> = vec![
        (
            B,
            Endpoint::Chat,
            json!({"model": B, "messages": [user("q")], "tools": [tool()], "response_format": {"type": "json_object"}}),
            "response_format",
            "unsupported_parameter",
        ),
        (
            B,
            Endpoint::Chat,
            json!({"model": B, "messages": [user("q")], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "array"}}}}),
            "response_format.json_schema.schema",
            "unsupported_parameter",
        ),
        (
            G,
            Endpoint::Chat,
            json!({"model": G, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
            "messages[0].content[0].image_url.url",
            "unsupported_parameter",
        ),
        (
            G,
            Endpoint::Chat,
            json!({"model": G, "messages": [user("q"), {"role": "tool", "tool_call_id": "nope", "content": "r"}]}),
            "messages[1].tool_call_id",
            "invalid_value",
        ),
        (
            G,
            Endpoint::Chat,
            json!({"model": G, "messages": [user("q")], "tool_choice": "auto"}),
            "tool_choice",
            "invalid_value",
        ),
        (
            G,
            Endpoint::Chat,
            json!({"model": G, "messages": [user("q")], "tools": [tool()], "tool_choice": {"type": "function", "function": {"name": "other"}}}),
            "tool_choice",
            "invalid_value",
        ),
        (
            "gemini/text-embedding-004",
            Endpoint::Embeddings,
            json!({"model": "x", "input": [1, 2]}),
            "input",
            "invalid_value",
        ),
        (
            "gemini/text-embedding-004",
            Endpoint::Embeddings,
            json!({"model": "x", "input": "a", "encoding_format": "int8"}),
            "encoding_format",
            "invalid_value",
        ),
        (
            // Several inputs are fanned out (one Titan call each), up to 64.
            "bedrock/amazon.titan-embed-text-v2:0",
            Endpoint::Embeddings,
            json!({"model": "x", "input": (0..65).map(|i| format!("t{i}")).collect::<Vec<_>>()}),
            "input",
            "invalid_value",
        ),
        (
            B,
            Endpoint::Embeddings,
            json!({"model": "x", "input": "a"}),
            "model",
            "unsupported_endpoint",
        ),
    ];
    for (model, ep, body, param, code) in cases {
        let e = translate(model, ep, body.clone()).unwrap_err();
        assert_eq!(e.0, 400, "{body}");
        assert_eq!(e.1.as_deref(), Some(param), "{body}");
        assert_eq!(e.2.as_deref(), Some(code), "{body}");
    }
}

fn rctx(endpoint: Endpoint, include_usage: bool, base64: bool) -> ResponseCtx {
    ResponseCtx {
        endpoint,
        stream: false,
        include_usage,
        created: 1700000000,
        json_mode: false,
        prompt_estimate: 12,
        embed_base64: base64,
        model: "m-1".into(),
    }
}

fn respond(
    kind_model: &str,
    endpoint: Endpoint,
    body: Value,
    base64: bool,
) -> (Value, Option<Usage>) {
    let rt = rt();
    let r = rt.resolve(kind_model).unwrap();
    let p = rt.provider(r.provider).unwrap();
    let t = for_kind(p.kind())
        .response(
            &rctx(endpoint, false, base64),
            &serde_json::to_vec(&body).unwrap(),
        )
        .unwrap();
    (serde_json::from_slice(&t.body.unwrap()).unwrap(), t.usage)
}

#[test]
fn gemini_response_vectors() {
    let finish = [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("OTHER", "stop"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
    ];
    for (g, o) in finish {
        let (v, _) = respond(
            G,
            Endpoint::Chat,
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "a"}]}, "finishReason": g}]}),
            false,
        );
        assert_eq!(v["choices"][0]["finish_reason"], o, "{g}");
    }
    let (v, u) = respond(
        G,
        Endpoint::Chat,
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking", "thought": true}, {"text": "Hi "}, {"text": "there"},
            {"functionCall": {"name": "f", "args": {"a": 1}}}, {"functionCall": {"name": "g", "args": {}, "id": "gid"}}]},
            "finishReason": "STOP", "index": 0}],
          "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4, "totalTokenCount": 17},
          "modelVersion": "gemini-2.0-flash-001", "responseId": "r1"}),
        false,
    );
    assert_eq!(v["id"], "chatcmpl-r1");
    assert_eq!(v["model"], "gemini-2.0-flash-001");
    assert_eq!(v["object"], "chat.completion");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], "Hi there");
    assert_eq!(
        msg["tool_calls"][0]["function"],
        json!({"name": "f", "arguments": "{\"a\":1}"})
    );
    assert_eq!(msg["tool_calls"][0]["id"], "call_gemini_0");
    assert_eq!(msg["tool_calls"][1]["id"], "gid");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        u,
        Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 7,
            cached_tokens: 4,
            cache_write_tokens: 0,
            web_searches: 0,
        })
    );
    assert_eq!(v["usage"]["total_tokens"], 17);
    // Blocked prompt: no candidates.
    let (v, _) = respond(
        G,
        Endpoint::Chat,
        json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}}),
        false,
    );
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(v["choices"][0]["message"]["content"], "");
    // Embeddings, floats and base64 (little-endian f32).
    let body = json!({"embeddings": [{"values": [0.5, -1.0]}, {"values": [0.25, 2.0]}]});
    let (v, u) = respond(
        "gemini/text-embedding-004",
        Endpoint::Embeddings,
        body.clone(),
        false,
    );
    assert_eq!(
        v,
        json!({"object": "list", "model": "m-1", "usage": {"prompt_tokens": 12, "total_tokens": 12},
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1.0]}, {"object": "embedding", "index": 1, "embedding": [0.25, 2.0]}]})
    );
    assert_eq!(u.unwrap().prompt_tokens, 12);
    let (v, _) = respond(
        "gemini/text-embedding-004",
        Endpoint::Embeddings,
        body,
        true,
    );
    // 0.5f32 = 00 00 00 3f, -1.0f32 = 00 00 80 bf
    assert_eq!(v["data"][0]["embedding"], "AAAAPwAAgL8=");
}

#[test]
fn bedrock_response_vectors() {
    for (r, o) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
    ] {
        let (v, _) = respond(
            B,
            Endpoint::Chat,
            json!({"output": {"message": {"role": "assistant", "content": [{"text": "a"}]}}, "stopReason": r, "usage": {"inputTokens": 1, "outputTokens": 1}}),
            false,
        );
        assert_eq!(v["choices"][0]["finish_reason"], o, "{r}");
    }
    let (v, u) = respond(
        B,
        Endpoint::Chat,
        json!({"output": {"message": {"role": "assistant", "content": [{"text": "Let me look."},
            {"toolUse": {"toolUseId": "tu1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
          "stopReason": "tool_use", "usage": {"inputTokens": 20, "outputTokens": 8, "totalTokens": 28, "cacheReadInputTokens": 5}, "metrics": {"latencyMs": 1}}),
        false,
    );
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], "Let me look.");
    assert_eq!(
        msg["tool_calls"][0],
        json!({"id": "tu1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
    );
    assert_eq!(
        u,
        Some(Usage {
            prompt_tokens: 25,
            completion_tokens: 8,
            cached_tokens: 5,
            cache_write_tokens: 0,
            web_searches: 0,
        })
    );
    assert_eq!(v["model"], "m-1");
    let (v, u) = respond(
        "bedrock/amazon.titan-embed-text-v2:0",
        Endpoint::Embeddings,
        json!({"embedding": [0.5, -1.0], "inputTextTokenCount": 3}),
        false,
    );
    assert_eq!(v["data"][0]["embedding"], json!([0.5, -1.0]));
    assert_eq!(u.unwrap().prompt_tokens, 3);
}

#[test]
fn bedrock_json_mode() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let (_, body) = translate(
        B,
        Endpoint::Chat,
        json!({"model": B, "messages": [user("q")], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
    )
    .unwrap();
    assert_eq!(
        body["toolConfig"],
        json!({"tools": [{"toolSpec": {"name": "json_response", "description": "Give the answer as JSON matching this schema.",
            "inputSchema": {"json": schema}}}], "toolChoice": {"tool": {"name": "json_response"}}})
    );
    let rt = rt();
    let p = rt.providers.iter().find(|p| p.name == "bedrock").unwrap();
    let mut ctx = rctx(Endpoint::Chat, true, false);
    ctx.json_mode = true;
    let t = for_kind(p.kind())
        .response(
            &ctx,
            &serde_json::to_vec(
                &json!({"output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "t", "name": "json_response", "input": {"a": "b"}}}]}},
                "stopReason": "tool_use", "usage": {"inputTokens": 1, "outputTokens": 2}}),
            )
            .unwrap(),
        )
        .unwrap();
    let v: Value = serde_json::from_slice(&t.body.unwrap()).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "{\"a\":\"b\"}");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Streamed: the forced tool's input fragments are content deltas.
    let mut s = Vec::new();
    s.extend(event("messageStart", br#"{"role":"assistant"}"#));
    s.extend(event(
        "contentBlockStart",
        br#"{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"t","name":"json_response"}}}"#,
    ));
    s.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"a\":"}}}"#,
    ));
    s.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":"\"b\"}"}}}"#,
    ));
    s.extend(event("messageStop", br#"{"stopReason":"tool_use"}"#));
    s.extend(event(
        "metadata",
        br#"{"usage":{"inputTokens":1,"outputTokens":2}}"#,
    ));
    ctx.stream = true;
    for i in 0..=s.len() {
        let mut st = for_kind(p.kind()).stream(&ctx);
        let mut out = Vec::new();
        st.feed(&s[..i], &mut out);
        st.feed(&s[i..], &mut out);
        st.finish(&mut out);
        let (text, calls, finish, usage, error) = summarize(&out);
        assert_eq!(
            (text.as_str(), calls.len(), finish.as_deref(), error),
            ("{\"a\":\"b\"}", 0, Some("stop"), None),
            "split {i}"
        );
        assert_eq!(usage.unwrap()["total_tokens"], 3);
    }
}

#[test]
fn errors() {
    let rt = rt();
    let tr = |name: &str| for_kind(rt.providers.iter().find(|p| p.name == name).unwrap().kind());
    let e = tr("gemini").error(400, br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}"#);
    assert_eq!(
        (e.status, e.code.as_deref()),
        (502, Some("provider_auth_failed"))
    );
    assert!(!e.message.contains("API key not valid"));
    let e = tr("gemini").error(400, br#"{"error":{"code":400,"message":"* GenerateContentRequest.contents: contents is not specified","status":"INVALID_ARGUMENT"}}"#);
    assert_eq!(e.status, 400);
    assert!(e.message.contains("contents is not specified"));
    let e = tr("gemini").error(
        429,
        br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#,
    );
    assert_eq!(
        (e.status, e.code.as_deref()),
        (429, Some("rate_limit_exceeded"))
    );
    let e = tr("bedrock").error(
        400,
        br#"{"message":"The provided model identifier is invalid."}"#,
    );
    assert_eq!(e.message, "The provided model identifier is invalid.");
    let e = tr("bedrock").error(
        403,
        br#"{"message":"The security token included in the request is invalid."}"#,
    );
    assert_eq!(
        (e.status, e.code.as_deref()),
        (502, Some("provider_auth_failed"))
    );
    let e = tr("azure").error(404, br#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist."}}"#);
    assert_eq!(e.status, 404);
}

#[test]
fn auth_headers() {
    let rt = rt();
    let key = |i: usize| -> &Key { &rt.providers[i].keys[0] };
    let by = |n: &str| rt.providers.iter().position(|p| p.name == n).unwrap();
    let up = translate(
        B,
        Endpoint::Chat,
        json!({"model": B, "messages": [user("hi")]}),
    )
    .unwrap();
    let req = tollgate_core::translate::UpstreamRequest {
        path: up.0,
        body: serde_json::to_vec(&up.1).unwrap(),
        stream: false,
        include_usage: false,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        fan_out: Vec::new(),
        ..Default::default()
    };
    let b = by("bedrock");
    let p = &rt.providers[b];
    assert_eq!(
        p.host.as_deref(),
        Some("bedrock-runtime.us-east-1.amazonaws.com")
    );
    let h = for_kind(p.kind())
        .auth_headers(p, key(b), &req, 1_763_812_800_000)
        .unwrap();
    let names: Vec<&str> = h.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        ["authorization", "x-amz-date", "x-amz-security-token"]
    );
    assert!(h[0].1.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20251122/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature="));
    let g = by("gemini");
    let h = for_kind(rt.providers[g].kind())
        .auth_headers(&rt.providers[g], key(g), &req, 0)
        .unwrap();
    assert_eq!(h, vec![("x-goog-api-key", "gk".to_string())]);
    let a = by("azure");
    let h = for_kind(rt.providers[a].kind())
        .auth_headers(&rt.providers[a], key(a), &req, 0)
        .unwrap();
    assert_eq!(h, vec![("api-key", "azk".to_string())]);
    // Secrets never in Debug.
    let dbg = format!("{:?}", key(b));
    assert!(
        !dbg.contains("secret") && !dbg.contains("sess-XYZ"),
        "{dbg}"
    );
}

// ---- streams

fn run_stream(model: &str, include_usage: bool, parts: &[&[u8]]) -> (Vec<u8>, Option<Usage>) {
    let rt = rt();
    let r = rt.resolve(model).unwrap();
    let p = rt.provider(r.provider).unwrap();
    let mut ctx = rctx(Endpoint::Chat, include_usage, false);
    ctx.stream = true;
    let mut t = for_kind(p.kind()).stream(&ctx);
    let mut out = Vec::new();
    for part in parts {
        t.feed(part, &mut out);
    }
    t.finish(&mut out);
    (out, t.usage())
}

/// (text, [(index, id, name, arguments)], finish, usage chunk, error)
type Summary = (
    String,
    Vec<(u64, String, String, String)>,
    Option<String>,
    Option<Value>,
    Option<Value>,
);

fn summarize(out: &[u8]) -> Summary {
    let s = std::str::from_utf8(out).unwrap();
    let mut text = String::new();
    let mut calls: Vec<(u64, String, String, String)> = Vec::new();
    let (mut finish, mut usage, mut error) = (None, None, None);
    let mut done = false;
    for ev in s.split("\n\n").filter(|e| !e.is_empty()) {
        let data = ev.strip_prefix("data: ").unwrap();
        assert!(!done, "event after [DONE]");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let c: Value = serde_json::from_str(data).unwrap();
        if let Some(e) = c.get("error") {
            error = Some(e.clone());
            continue;
        }
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(u) = c.get("usage") {
            assert_eq!(c["choices"], json!([]));
            usage = Some(u.clone());
            continue;
        }
        let ch = &c["choices"][0];
        if let Some(t) = ch["delta"]["content"].as_str() {
            text.push_str(t);
        }
        for tc in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap();
            if let Some(name) = tc["function"]["name"].as_str() {
                calls.push((
                    i,
                    tc["id"].as_str().unwrap().into(),
                    name.into(),
                    String::new(),
                ));
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                calls.iter_mut().find(|c| c.0 == i).unwrap().3.push_str(a);
            }
        }
        if let Some(f) = ch["finish_reason"].as_str() {
            assert!(finish.is_none(), "two finish chunks");
            finish = Some(f.to_string());
        }
    }
    assert!(done, "stream must end with [DONE]");
    (text, calls, finish, usage, error)
}

fn gemini_stream() -> Vec<u8> {
    let evs = [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Sun ☀️ "}]}, "index": 0}], "modelVersion": "gemini-2.0-flash", "responseId": "rid"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "is out."}]}, "index": 0}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]}, "index": 0}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 6, "totalTokenCount": 17}}),
    ];
    let mut s = Vec::new();
    for e in evs {
        s.extend_from_slice(format!("data: {e}\r\n\r\n").as_bytes());
    }
    s
}

fn bedrock_stream() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend(event("messageStart", br#"{"role":"assistant"}"#));
    s.extend(event(
        "contentBlockDelta",
        "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Sun ☀️ \"},\"p\":\"abc\"}".as_bytes(),
    ));
    s.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"is out."}}"#,
    ));
    s.extend(event("contentBlockStop", br#"{"contentBlockIndex":0}"#));
    s.extend(event(
        "contentBlockStart",
        br#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tu1","name":"get_weather"}}}"#,
    ));
    s.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\":"}}}"#,
    ));
    s.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"Paris\"}"}}}"#,
    ));
    s.extend(event("contentBlockStop", br#"{"contentBlockIndex":1}"#));
    s.extend(event("messageStop", br#"{"stopReason":"tool_use"}"#));
    s.extend(event("metadata", br#"{"usage":{"inputTokens":11,"outputTokens":6,"totalTokens":17},"metrics":{"latencyMs":5}}"#));
    s
}

fn check(out: &[u8], include_usage: bool, id: &str) {
    let (text, calls, finish, usage, error) = summarize(out);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, "Sun ☀️ is out.");
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].0, calls[0].2.as_str()), (0, "get_weather"));
    assert_eq!(calls[0].1, id);
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].3).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    if include_usage {
        let u = usage.unwrap();
        assert_eq!(
            (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
            (Some(11), Some(6))
        );
    } else {
        assert!(usage.is_none());
    }
}

fn every_split(model: &str, input: &[u8], id: &str) {
    for include_usage in [true, false] {
        let (whole, usage) = run_stream(model, include_usage, &[input]);
        check(&whole, include_usage, id);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 11,
                completion_tokens: 6,
                cached_tokens: 0,
                cache_write_tokens: 0,
                web_searches: 0,
            })
        );
        for i in 0..=input.len() {
            let (out, u) = run_stream(model, include_usage, &[&input[..i], &input[i..]]);
            assert_eq!(out, whole, "{model} split at {i}");
            assert_eq!(u, usage);
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(
            run_stream(model, include_usage, &bytes).0,
            whole,
            "{model} byte by byte"
        );
        // Pairs of split points on a grid.
        let step = (input.len() / 23).max(1);
        for i in (0..input.len()).step_by(step) {
            for j in (i..input.len()).step_by(step + 3) {
                let (out, _) = run_stream(
                    model,
                    include_usage,
                    &[&input[..i], &input[i..j], &input[j..]],
                );
                assert_eq!(out, whole, "{model} splits {i},{j}");
            }
        }
    }
}

#[test]
fn gemini_stream_every_split() {
    every_split(G, &gemini_stream(), "call_gemini_0");
}

#[test]
fn bedrock_stream_every_split() {
    every_split(B, &bedrock_stream(), "tu1");
}

#[test]
fn gemini_stream_error_and_early_end() {
    let mut s = gemini_stream();
    s.truncate(s.len() / 2);
    let cut = s.iter().rposition(|b| *b == b'\n').unwrap();
    let (out, _) = run_stream(G, false, &[&s[..=cut]]);
    let (_, _, finish, _, error) = summarize(&out);
    assert!(finish.is_none());
    assert_eq!(error.unwrap()["code"], "provider_error");
    let err = b"data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n";
    let (out, _) = run_stream(G, false, &[&gemini_stream()[..0], err]);
    let (_, _, _, _, error) = summarize(&out);
    let e = error.unwrap();
    assert_eq!(
        (e["code"].as_str(), e["message"].as_str()),
        (
            Some("provider_overloaded"),
            Some("The model is overloaded.")
        )
    );
}

#[test]
fn bedrock_stream_truncated_and_corrupted() {
    let input = bedrock_stream();
    // Cut anywhere before messageStop is complete: a clean error event then
    // [DONE], never a panic, never a finish. Cut between messageStop and
    // metadata: the answer is whole, it ends normally without usage.
    let metadata_len = event("metadata", br#"{"usage":{"inputTokens":11,"outputTokens":6,"totalTokens":17},"metrics":{"latencyMs":5}}"#).len();
    let (out, u) = run_stream(B, true, &[&input[..input.len() - metadata_len]]);
    let (_, _, finish, _, error) = summarize(&out);
    assert_eq!(
        (finish.as_deref(), error, u),
        (Some("tool_calls"), None, None)
    );
    for i in 0..input.len() - metadata_len {
        let (out, _) = run_stream(B, true, &[&input[..i]]);
        let (_, _, finish, _, error) = summarize(&out);
        assert!(finish.is_none(), "cut {i}");
        let e = error.unwrap_or_else(|| panic!("cut {i}: no error"));
        assert_eq!(e["code"], "provider_error");
    }
    // A flipped byte anywhere: an error (CRC) before any wrong content.
    for i in (0..input.len()).step_by(7) {
        let mut bad = input.clone();
        bad[i] ^= 0x20;
        let (out, _) = run_stream(B, false, &[&bad]);
        let (text, _, _, _, error) = summarize(&out);
        let e = error.unwrap_or_else(|| panic!("flip {i}: no error"));
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .starts_with("Malformed stream from the provider")
                || e["message"] == "The provider's stream ended early",
            "{e}"
        );
        assert!("Sun ☀️ is out.".starts_with(&text), "flip {i}: {text}");
    }
    // An exception message mid-stream.
    let mut s = bedrock_stream()[..0].to_vec();
    s.extend(event("messageStart", br#"{"role":"assistant"}"#));
    s.extend(encode(
        &[
            (":exception-type", "modelStreamErrorException"),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        br#"{"message":"The model stream failed."}"#,
    ));
    let (out, _) = run_stream(B, false, &[&s]);
    let (_, _, _, _, error) = summarize(&out);
    let e = error.unwrap();
    assert_eq!(
        (e["code"].as_str(), e["message"].as_str()),
        (
            Some("provider_overloaded"),
            Some("The model stream failed.")
        )
    );
}

// ---- through the flow (the in-memory host)

mod flow_level {
    use super::*;
    use std::sync::Arc;
    use tollgate_core::flow::{Action, Flow};
    use tollgate_core::host::fake::FakeHost;

    fn host(path: &str, body: Value) -> FakeHost {
        let body = serde_json::to_vec(&body).unwrap();
        FakeHost {
            now: 1_763_812_800_000,
            req_headers: vec![
                (":method".into(), "POST".into()),
                (":path".into(), path.into()),
                (":authority".into(), "gateway.local".into()),
                ("x-tollgate-tenant".into(), "demo".into()),
                ("x-tollgate-key-id".into(), "demo-key".into()),
                ("x-tollgate-models".into(), "*".into()),
                ("authorization".into(), "Bearer tg-demo-key".into()),
                ("content-length".into(), body.len().to_string()),
            ],
            req_body: body,
            ..FakeHost::default()
        }
    }

    fn forward(h: &mut FakeHost) -> Flow {
        let mut f = Flow::new(Arc::new(rt()));
        common::send_request(&mut f, h);
        f
    }

    #[test]
    fn bedrock_request_is_signed_for_the_bedrock_host() {
        let mut h = host(
            "/v1/chat/completions",
            json!({"model": B, "messages": [user("hi")]}),
        );
        forward(&mut h);
        assert_eq!(
            h.req_header(":authority").as_deref(),
            Some("bedrock-runtime.us-east-1.amazonaws.com")
        );
        assert_eq!(
            h.req_header(":path").as_deref(),
            Some("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse")
        );
        assert_eq!(
            h.req_header("x-tollgate-cluster").as_deref(),
            Some("bedrock")
        );
        assert_eq!(
            h.req_header("x-amz-date").as_deref(),
            Some("20251122T120000Z")
        );
        assert_eq!(
            h.req_header("x-amz-security-token").as_deref(),
            Some("sess-XYZ")
        );
        assert_eq!(
            h.req_header("content-type").as_deref(),
            Some("application/json")
        );
        let auth = h.req_header("authorization").unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20251122/us-east-1/bedrock/aws4_request"
            ),
            "{auth}"
        );
        // The signature covers the body that is actually sent.
        let sent = tollgate_core::credentials::sigv4::sign(
            &tollgate_core::credentials::sigv4::SignInput {
                method: "POST",
                path: "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
                host: "bedrock-runtime.us-east-1.amazonaws.com",
                content_type: "application/json",
                body: &h.req_body,
                access_key_id: "AKIDEXAMPLE",
                secret: "secret",
                session_token: Some("sess-XYZ"),
                region: "us-east-1",
                service: "bedrock",
                now_ms: h.now,
            },
        );
        assert_eq!(sent[0].1, auth);
    }

    #[test]
    fn gemini_and_azure_auth_replace_the_virtual_key() {
        let mut h = host(
            "/v1/chat/completions",
            json!({"model": G, "messages": [user("hi")], "stream": true}),
        );
        forward(&mut h);
        assert_eq!(h.req_header("authorization"), None);
        assert_eq!(h.req_header("x-goog-api-key").as_deref(), Some("gk"));
        assert_eq!(
            h.req_header(":path").as_deref(),
            Some("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse")
        );
        let mut h = host(
            "/v1/embeddings",
            json!({"model": "azure/text-embedding-3-small", "input": "hi"}),
        );
        forward(&mut h);
        assert_eq!(h.req_header("authorization"), None);
        assert_eq!(h.req_header("api-key").as_deref(), Some("azk"));
    }

    #[test]
    fn bedrock_stream_through_the_flow_reports_usage() {
        let mut h = host(
            "/v1/chat/completions",
            json!({"model": B, "messages": [user("hi")], "stream": true}),
        );
        let mut f = forward(&mut h);
        let body = bedrock_stream();
        h.resp_headers = vec![
            (":status".into(), "200".into()),
            (
                "content-type".into(),
                "application/vnd.amazon.eventstream".into(),
            ),
        ];
        assert_eq!(f.on_response_headers(&mut h, false), Action::Continue);
        assert_eq!(
            h.resp_header("content-type").as_deref(),
            Some("text/event-stream")
        );
        let mut out = Vec::new();
        for (i, part) in body.chunks(97).enumerate() {
            h.resp_body = part.to_vec();
            let last = (i + 1) * 97 >= body.len();
            f.on_response_body(&mut h, part.len(), last);
            out.extend_from_slice(&h.resp_body);
        }
        check(&out, false, "tu1");
        f.on_log(&mut h);
        let (_, _, report) = h.posts.last().unwrap();
        let r: Value = serde_json::from_slice(report).unwrap();
        assert_eq!(
            (
                r["model"].as_str(),
                r["prompt_tokens"].as_u64(),
                r["completion_tokens"].as_u64()
            ),
            (
                Some("bedrock/anthropic.claude-3-haiku-20240307-v1:0"),
                Some(11),
                Some(6)
            )
        );
    }

    fn upstream_error(model: &str, status: u16, body: &[u8]) -> (FakeHost, Value) {
        let mut h = host(
            "/v1/chat/completions",
            json!({"model": model, "messages": [user("hi")]}),
        );
        let mut f = forward(&mut h);
        h.resp_headers = vec![
            (":status".into(), status.to_string()),
            ("content-type".into(), "application/json".into()),
        ];
        assert_eq!(f.on_response_headers(&mut h, false), Action::Pause);
        h.resp_body = body.to_vec();
        f.on_response_body(&mut h, body.len(), true);
        let v = serde_json::from_slice(&h.resp_body).unwrap();
        (h, v)
    }

    #[test]
    fn credential_refusals_cool_the_key_whatever_the_status() {
        let (h, v) = upstream_error(G, 400, br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#);
        assert_eq!(h.resp_header(":status").as_deref(), Some("502"));
        assert_eq!(v["error"]["code"], "provider_auth_failed");
        assert!(h.shared.borrow().contains_key("tollgate.cooldown.g1"));
        let (h, v) = upstream_error(
            B,
            403,
            br#"{"message":"The security token included in the request is invalid."}"#,
        );
        assert_eq!(h.resp_header(":status").as_deref(), Some("502"));
        assert_eq!(v["error"]["code"], "provider_auth_failed");
        assert!(h.shared.borrow().contains_key("tollgate.cooldown.b1"));
        // An ordinary 400 keeps its status and the key.
        let (h, v) = upstream_error(
            G,
            400,
            br#"{"error":{"code":400,"message":"* contents: bad","status":"INVALID_ARGUMENT"}}"#,
        );
        assert_eq!(h.resp_header(":status").as_deref(), Some("400"));
        assert_eq!(v["error"]["message"], "provider gemini: * contents: bad");
        assert!(h.shared.borrow().is_empty());
    }
}
