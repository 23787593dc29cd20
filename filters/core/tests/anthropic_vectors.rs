//! Table-driven request and response vectors for OpenAI → Anthropic.

use crate::common;

use serde_json::{json, Value};
use tollgate_core::translate::{for_kind, Endpoint, RequestCtx, ResponseCtx};

fn translate(model: &str, body: Value) -> Result<Value, (u16, Option<String>, Option<String>)> {
    let rt = common::runtime();
    let r = rt.resolve(model).unwrap();
    let p = rt.provider(r.provider).unwrap();
    let ctx = RequestCtx {
        provider: p,
        model: &r.model,
        model_cfg: &p.models[&r.model],
        endpoint: Endpoint::Chat,
        cache_breakpoints: false,
    };
    match for_kind(p.kind()).request(&ctx, &body) {
        Ok(up) => {
            assert_eq!(up.path, "/v1/messages");
            Ok(serde_json::from_slice(&up.body).unwrap())
        }
        Err(e) => Err((e.status, e.param, e.code)),
    }
}

fn user(s: &str) -> Value {
    json!({"role": "user", "content": s})
}

#[test]
fn request_vectors() {
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "minimal: default max_tokens from the model, string content as a text block",
            json!({"model": "smart", "messages": [user("hi")]}),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8192,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        ),
        (
            "provider-level default max_tokens; max_completion_tokens wins over max_tokens",
            json!({"model": "anthropic/claude-haiku-4-5", "messages": [user("hi")], "max_tokens": 5, "max_completion_tokens": 7}),
            json!({"model": "claude-haiku-4-5", "max_tokens": 7,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        ),
        (
            "system and developer lifted, same-role merged, sampling params (temperature kept, top_p dropped: Claude 4.5+ takes one), stop string, user, seed dropped",
            json!({"model": "smart", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
                user("a"), user("b"),
                {"role": "assistant", "content": "c"}],
                "temperature": 0.5, "top_p": 0.9, "stop": "END", "user": "u-1", "seed": 3, "stream": true,
                "stream_options": {"include_usage": true}, "n": 1, "response_format": {"type": "text"}}),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8192, "system": "Be brief.\n\nUse French.",
                   "messages": [
                     {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                     {"role": "assistant", "content": [{"type": "text", "text": "c"}]}],
                   "temperature": 0.5, "stop_sequences": ["END"],
                   "metadata": {"user_id": "u-1"}, "stream": true}),
        ),
        (
            "tools, tool_choice required, parallel off, assistant tool_calls, tool results grouped before text",
            json!({"model": "smart", "messages": [
                user("weather?"),
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "t", "arguments": ""}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
                user("thanks")],
                "tools": [{"type": "function", "function": {"name": "w", "description": "weather",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                          {"type": "function", "function": {"name": "t"}}],
                "tool_choice": "required", "parallel_tool_calls": false, "stop": ["x", "y"]}),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8192, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "w", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "t", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "noon"},
                    {"type": "text", "text": "thanks"}]}],
                "tools": [{"name": "w", "description": "weather",
                           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                          {"name": "t", "input_schema": {"type": "object", "properties": {}}}],
                "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
                "stop_sequences": ["x", "y"]}),
        ),
        (
            "named tool_choice; tool_choice none",
            json!({"model": "smart", "messages": [user("q")],
                   "tools": [{"type": "function", "function": {"name": "w"}}],
                   "tool_choice": {"type": "function", "function": {"name": "w"}}}),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8192,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
                   "tools": [{"name": "w", "input_schema": {"type": "object", "properties": {}}}],
                   "tool_choice": {"type": "tool", "name": "w"}}),
        ),
        (
            "images: data URL → base64 block, https URL → url block",
            json!({"model": "smart", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}}]}]}),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8192, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}]}]}),
        ),
    ];
    for (name, input, expected) in cases {
        let got = translate(input["model"].as_str().unwrap(), input.clone());
        assert_eq!(got, Ok(expected), "{name}");
    }
}

#[test]
fn json_mode_is_a_forced_tool() {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
    let got = translate("smart", json!({"model": "smart", "messages": [user("q")],
        "response_format": {"type": "json_schema", "json_schema": {"name": "A", "schema": schema, "strict": true}}})).unwrap();
    assert_eq!(
        got["tools"],
        json!([{"name": "json_response", "description": "Give the answer as JSON matching this schema.", "input_schema": schema}])
    );
    assert_eq!(
        got["tool_choice"],
        json!({"type": "tool", "name": "json_response"})
    );
    let got = translate("smart", json!({"model": "smart", "messages": [user("q")], "response_format": {"type": "json_object"}})).unwrap();
    assert_eq!(got["tools"][0]["input_schema"], json!({"type": "object"}));

    let refused: Vec<(Value, &str, &str)> = vec![
        (
            json!({"type": "json_object"}),
            "response_format",
            "unsupported_parameter",
        ), // with tools, below
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}}),
            "response_format.json_schema.schema",
            "unsupported_parameter",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
            "response_format.json_schema.schema",
            "invalid_value",
        ),
        (
            json!({"type": "xml"}),
            "response_format.type",
            "invalid_value",
        ),
    ];
    for (i, (rf, param, code)) in refused.into_iter().enumerate() {
        let mut body = json!({"model": "smart", "messages": [user("q")], "response_format": rf});
        if i == 0 {
            body["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
        }
        assert_eq!(
            translate("smart", body.clone()),
            Err((400, Some(param.to_string()), Some(code.to_string()))),
            "{body}"
        );
    }

    // Response: the forced tool's input is the content, finish_reason stop.
    let ctx = ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: false,
        include_usage: false,
        created: 1,
        json_mode: true,
        prompt_estimate: 0,
        embed_base64: false,
        model: String::new(),
    };
    let body = json!({"id": "m", "model": "c", "content": [{"type": "tool_use", "id": "t", "name": "json_response", "input": {"answer": "42"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}});
    let t = for_kind(tollgate_core::config::Kind::Anthropic)
        .response(&ctx, &serde_json::to_vec(&body).unwrap())
        .unwrap();
    let v: Value = serde_json::from_slice(&t.body.unwrap()).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "{\"answer\":\"42\"}");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // Stream: input_json_delta of the forced tool → content deltas, at every split.
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"json_response\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"answer\\\": \"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"42\\\"}\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":5}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let sctx = ResponseCtx {
        stream: true,
        ..ctx
    };
    let run = |parts: &[&[u8]]| {
        let mut t = for_kind(tollgate_core::config::Kind::Anthropic).stream(&sctx);
        let mut out = Vec::new();
        for p in parts {
            t.feed(p, &mut out);
        }
        t.finish(&mut out);
        String::from_utf8(out).unwrap()
    };
    let whole = run(&[stream.as_bytes()]);
    let mut content = String::new();
    for ev in whole.split("\n\n").filter(|e| e.starts_with("data: {")) {
        let c: Value = serde_json::from_str(&ev[6..]).unwrap();
        assert!(c["choices"][0]["delta"].get("tool_calls").is_none());
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            content.push_str(t);
        }
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            assert_eq!(f, "stop");
        }
    }
    assert_eq!(
        serde_json::from_str::<Value>(&content).unwrap(),
        json!({"answer": "42"})
    );
    for i in 0..=stream.len() {
        let (a, b) = stream.as_bytes().split_at(i);
        assert_eq!(run(&[a, b]), whole, "split {i}");
    }
}

#[test]
fn openai_parameters_claude_lacks_are_dropped_and_named_not_refused() {
    let rt = common::runtime();
    let r = rt.resolve("smart").unwrap();
    let p = rt.provider(r.provider).unwrap();
    let ctx = RequestCtx {
        provider: p,
        model: &r.model,
        model_cfg: &p.models[&r.model],
        endpoint: Endpoint::Chat,
        cache_breakpoints: false,
    };
    let body = json!({"model": "smart", "messages": [user("q")], "n": 2, "presence_penalty": 0.5,
                      "frequency_penalty": 0, "logprobs": true, "logit_bias": {"1": 2}, "seed": 7,
                      "reasoning_effort": "high", "prompt_cache_key": "k", "verbosity": "low",
                      "temperature": 1, "top_p": 0.5});
    let up = for_kind(p.kind()).request(&ctx, &body).unwrap();
    assert_eq!(
        up.dropped,
        vec![
            "logit_bias",
            "logprobs",
            "prompt_cache_key",
            "reasoning_effort",
            "verbosity",
            "n",
            "presence_penalty",
            "seed",
            "top_p"
        ]
    );
    let sent: Value = serde_json::from_slice(&up.body).unwrap();
    assert_eq!(sent["temperature"], 1);
    assert!(sent.get("top_p").is_none());
}

#[test]
fn request_errors_name_the_parameter() {
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!({"model": "smart", "messages": [user("q")], "frobnicate": 1}),
            400,
            "frobnicate",
            "unsupported_parameter",
        ),
        (
            json!({"model": "smart", "messages": []}),
            400,
            "messages",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": "hi"}),
            400,
            "messages",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "system", "content": "only system"}]}),
            400,
            "messages",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "wizard", "content": "x"}]}),
            400,
            "messages[0].role",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"content": "x"}]}),
            400,
            "messages[0].role",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "user", "content": 5}]}),
            400,
            "messages[0].content",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
            400,
            "messages[0].content[0].type",
            "unsupported_parameter",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]}),
            400,
            "messages[0].content[0].image_url.url",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}]}]}),
            400,
            "messages[0].content[0].image_url.url",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [{"role": "tool", "content": "x"}]}),
            400,
            "messages[0].tool_call_id",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q"), {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{nope"}}]}]}),
            400,
            "messages[1].tool_calls[0].function.arguments",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "max_tokens": 0}),
            400,
            "max_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "max_tokens": "9"}),
            400,
            "max_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "temperature": "hot"}),
            400,
            "temperature",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "stop": 5}),
            400,
            "stop",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "stream": "yes"}),
            400,
            "stream",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "tools": [{"type": "code_interpreter"}]}),
            400,
            "tools[0].type",
            "unsupported_parameter",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "tool_choice": "sometimes", "tools": [{"type": "function", "function": {"name": "f"}}]}),
            400,
            "tool_choice",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "tool_choice": "auto"}),
            400,
            "tool_choice",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q"), {"role": "tool", "tool_call_id": "nope", "content": "x"}]}),
            400,
            "messages[1].tool_call_id",
            "invalid_value",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "array"}}}}),
            400,
            "response_format.json_schema.schema",
            "unsupported_parameter",
        ),
        (
            json!({"model": "smart", "messages": [user("q")], "response_format": {"type": "json_object"}, "tools": [{"type": "function", "function": {"name": "f"}}]}),
            400,
            "response_format",
            "unsupported_parameter",
        ),
    ];
    for (input, status, param, code) in cases {
        let got = translate("smart", input.clone());
        assert_eq!(
            got,
            Err((status, Some(param.to_string()), Some(code.to_string()))),
            "{input}"
        );
    }
}

fn respond(body: Value) -> Value {
    let ctx = ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: false,
        include_usage: false,
        created: 42,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: String::new(),
    };
    let t = for_kind(tollgate_core::config::Kind::Anthropic)
        .response(&ctx, &serde_json::to_vec(&body).unwrap())
        .unwrap();
    serde_json::from_slice(&t.body.unwrap()).unwrap()
}

#[test]
fn response_vectors() {
    let got = respond(
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 5}}),
    );
    assert_eq!(
        got,
        json!({"id": "msg_1", "object": "chat.completion", "created": 42, "model": "claude-sonnet-4-5",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there", "refusal": null},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20,
                  "prompt_tokens_details": {"cached_tokens": 5}}})
    );

    let got = respond(json!({"id": "msg_2", "model": "m", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Paris"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}}));
    assert_eq!(got["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(got["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        got["choices"][0]["message"]["tool_calls"],
        json!([{"id": "toolu_1", "type": "function",
        "function": {"name": "w", "arguments": "{\"city\":\"Paris\"}"}}])
    );

    for (stop, finish) in [
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("end_turn", "stop"),
        ("tool_use", "tool_calls"),
    ] {
        let got = respond(
            json!({"id": "m", "model": "m", "content": [{"type": "text", "text": "x"}], "stop_reason": stop, "usage": {}}),
        );
        assert_eq!(got["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

#[test]
fn error_vectors() {
    let t = for_kind(tollgate_core::config::Kind::Anthropic);
    let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}"#;
    let e = t.error(400, body);
    assert_eq!(
        (e.status, e.message.as_str(), e.code.as_deref()),
        (400, "max_tokens: too big", Some("invalid_request"))
    );
    let e = t.error(
        529,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    assert_eq!((e.status, e.kind), (503, "server_error"));
    let e = t.error(
        429,
        br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
    );
    assert_eq!(
        (e.status, e.code.as_deref(), e.kind),
        (429, Some("rate_limit_exceeded"), "rate_limit_error")
    );
    let e = t.error(401, br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#);
    assert_eq!(e.status, 502);
    assert!(!e.message.contains("x-api-key"));
    let e = t.error(500, b"<html>oops</html>");
    assert_eq!(e.status, 502);
}

#[test]
fn embeddings_refused_for_anthropic() {
    let rt = common::runtime();
    let r = rt.resolve("smart").unwrap();
    let p = rt.provider(r.provider).unwrap();
    let ctx = RequestCtx {
        provider: p,
        model: &r.model,
        model_cfg: &p.models[&r.model],
        endpoint: Endpoint::Embeddings,
        cache_breakpoints: false,
    };
    let e = for_kind(p.kind())
        .request(&ctx, &json!({"model": "smart", "input": "x"}))
        .unwrap_err();
    assert_eq!(
        (e.status, e.code.as_deref()),
        (400, Some("unsupported_endpoint"))
    );
}
