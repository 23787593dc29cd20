//! A provider answer or stream event with a known field of the wrong type
//! (a number where a string is expected, a string where a count is) gets a
//! clear OpenAI error naming the field: never a panic, never silently lost
//! text or uncounted tokens. Unknown fields and event types stay ignored.

use serde_json::Value;
use tollgate_core::config::Kind;
use tollgate_core::translate::{for_kind, Endpoint, ResponseCtx, Usage};

fn ctx(stream: bool) -> ResponseCtx {
    ResponseCtx {
        endpoint: Endpoint::Chat,
        stream,
        include_usage: true,
        created: 1,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: "m".into(),
    }
}

/// The 502 a non-streaming answer gets: (code, message).
fn response_error(kind: Kind, body: &str) -> (u16, String, String) {
    let e = for_kind(kind)
        .response(&ctx(false), body.as_bytes())
        .expect_err("a field of the wrong type is an error");
    (e.status, e.code.unwrap_or_default(), e.message)
}

/// Feeds a stream at every split; returns the output (the same at every
/// split) and the usage.
fn stream(kind: Kind, input: &[u8]) -> (String, Option<Usage>) {
    let mut first: Option<(String, Option<Usage>)> = None;
    for i in 0..=input.len() {
        let mut t = for_kind(kind).stream(&ctx(true));
        let mut out = Vec::new();
        let (a, b) = input.split_at(i);
        t.feed(a, &mut out);
        t.feed(b, &mut out);
        t.finish(&mut out);
        let got = (String::from_utf8(out).unwrap(), t.usage());
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(f, &got, "split {i}"),
        }
    }
    first.unwrap()
}

/// The stream's last event before `[DONE]` is this OpenAI error.
fn stream_error(out: &str) -> (String, String) {
    let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"), "{out}");
    let e: Value = serde_json::from_str(
        events[events.len() - 2]
            .strip_prefix("data: ")
            .unwrap_or_default(),
    )
    .unwrap();
    (
        e["error"]["code"].as_str().unwrap_or_default().to_string(),
        e["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn contents(out: &str) -> String {
    out.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[test]
fn anthropic_answer() {
    let (status, code, message) = response_error(
        Kind::Anthropic,
        r#"{"id":"msg_1","model":"claude","content":[{"type":"text","text":5}],"stop_reason":"end_turn"}"#,
    );
    assert_eq!((status, code.as_str()), (502, "provider_error"));
    assert!(
        message.starts_with(
            "The provider returned a malformed response (invalid type: integer `5`, expected a string"
        ),
        "{message}"
    );
    let (_, _, message) = response_error(
        Kind::Anthropic,
        r#"{"id":"msg_1","content":[],"usage":{"input_tokens":"12","output_tokens":3}}"#,
    );
    assert!(
        message.contains("(invalid type: string \"12\", expected u64"),
        "{message}"
    );
    // Unknown fields, blocks and types of fields the translator does not read are fine.
    let ok = for_kind(Kind::Anthropic)
        .response(
            &ctx(false),
            br#"{"id":"msg_1","model":"c","content":[{"type":"thinking","thinking":"x","signature":7},{"type":"text","text":"Hi","citations":null}],"stop_reason":"end_turn","stop_sequence":3,"usage":{"input_tokens":2,"output_tokens":1,"cache_creation":{"ephemeral_5m_input_tokens":0},"service_tier":"standard"}}"#,
        )
        .unwrap();
    let v: Value = serde_json::from_slice(&ok.body.unwrap()).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hi");
}

const ANTHROPIC_START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n";

#[test]
fn anthropic_stream() {
    let input = format!(
        "{ANTHROPIC_START}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hi\"}}}}\n\n\
event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":[\"lost\"]}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    );
    let (out, _) = stream(Kind::Anthropic, input.as_bytes());
    assert_eq!(contents(&out), "Hi");
    let (code, message) = stream_error(&out);
    assert_eq!(code, "provider_error");
    assert!(
        message.starts_with(
            "Malformed stream from the provider (invalid type: sequence, expected a string"
        ),
        "{message}"
    );
    // An event type the translator does not read is skipped, whatever it holds.
    let input = format!(
        "{ANTHROPIC_START}event: ping\ndata: {{\"type\":\"ping\",\"index\":\"x\",\"delta\":7}}\n\n\
event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hi\"}}}}\n\n\
event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    );
    let (out, usage) = stream(Kind::Anthropic, input.as_bytes());
    assert_eq!(contents(&out), "Hi");
    assert!(!out.contains("\"error\""), "{out}");
    assert_eq!(
        usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((3, 2))
    );
    // A count of the wrong type is not free tokens.
    let input = format!(
        "{ANTHROPIC_START}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":-2}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    );
    let (out, _) = stream(Kind::Anthropic, input.as_bytes());
    let (_, message) = stream_error(&out);
    assert!(
        message.contains("(invalid value: integer `-2`, expected u64"),
        "{message}"
    );
}

#[test]
fn gemini_answer() {
    let (status, code, message) = response_error(
        Kind::Gemini,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"},{"functionCall":{"name":7,"args":{}}}]},"finishReason":"STOP"}]}"#,
    );
    assert_eq!((status, code.as_str()), (502, "provider_error"));
    assert!(
        message.starts_with(
            "The provider's answer could not be read (invalid type: integer `7`, expected a string"
        ),
        "{message}"
    );
    let (_, _, message) = response_error(
        Kind::Gemini,
        r#"{"candidates":[],"usageMetadata":{"promptTokenCount":1.5}}"#,
    );
    assert!(
        message.contains("(invalid type: floating point `1.5`, expected u64"),
        "{message}"
    );
    let embed = ResponseCtx {
        endpoint: Endpoint::Embeddings,
        ..ctx(false)
    };
    let e = for_kind(Kind::Gemini)
        .response(&embed, br#"{"embeddings":[{"values":[0.5,"x"]}]}"#)
        .unwrap_err();
    assert!(
        e.message
            .contains("(invalid type: string \"x\", expected f64"),
        "{}",
        e.message
    );
}

#[test]
fn gemini_stream() {
    let input = b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hi\"}]},\"index\":0}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"!\",\"thought\":\"no\"}]},\"index\":0}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"parts\":[]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":2}}\r\n\r\n";
    let (out, _) = stream(Kind::Gemini, input);
    assert_eq!(contents(&out), "Hi");
    let (code, message) = stream_error(&out);
    assert_eq!(code, "provider_error");
    assert!(
        message.starts_with(
            "Malformed stream from the provider (invalid type: string \"no\", expected a boolean"
        ),
        "{message}"
    );
}

#[test]
fn bedrock_answer() {
    let (status, code, message) = response_error(
        Kind::Bedrock,
        r#"{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":["t"],"name":"f","input":{}}}]}},"stopReason":"tool_use"}"#,
    );
    assert_eq!((status, code.as_str()), (502, "provider_error"));
    assert!(
        message.starts_with(
            "The provider's answer could not be read (invalid type: sequence, expected a string"
        ),
        "{message}"
    );
    let (_, _, message) = response_error(
        Kind::Bedrock,
        r#"{"output":{"message":{"content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":"2"}}"#,
    );
    assert!(
        message.contains("(invalid type: string \"2\", expected u64"),
        "{message}"
    );
    let embed = ResponseCtx {
        endpoint: Endpoint::Embeddings,
        ..ctx(false)
    };
    let e = for_kind(Kind::Bedrock)
        .response(&embed, br#"{"embedding":[0.5],"inputTextTokenCount":"3"}"#)
        .unwrap_err();
    assert!(
        e.message
            .contains("(invalid type: string \"3\", expected u64"),
        "{}",
        e.message
    );
}

#[test]
fn bedrock_stream() {
    use tollgate_core::codec::eventstream::event;
    let mut input = event("messageStart", br#"{"role":"assistant"}"#);
    input.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
    ));
    input.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":"0","delta":{"text":"!"}}"#,
    ));
    input.extend(event("messageStop", br#"{"stopReason":"end_turn"}"#));
    let (out, _) = stream(Kind::Bedrock, &input);
    assert_eq!(contents(&out), "Hi");
    let (code, message) = stream_error(&out);
    assert_eq!(code, "provider_error");
    assert!(
        message.starts_with(
            "Malformed stream from the provider (invalid type: string \"0\", expected u64"
        ),
        "{message}"
    );
    // An event type the translator does not read is skipped, whatever it holds.
    let mut input = event("messageStart", br#"{"role":"assistant"}"#);
    input.extend(event("somethingNew", br#"{"delta":7,"usage":[]}"#));
    input.extend(event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
    ));
    input.extend(event("messageStop", br#"{"stopReason":"end_turn"}"#));
    input.extend(event(
        "metadata",
        br#"{"usage":{"inputTokens":3,"outputTokens":2},"metrics":{"latencyMs":5}}"#,
    ));
    let (out, usage) = stream(Kind::Bedrock, &input);
    assert_eq!(contents(&out), "Hi");
    assert!(!out.contains("\"error\""), "{out}");
    assert_eq!(
        usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((3, 2))
    );
}

/// OpenAI-shaped answers pass through untouched: a usage of the wrong type
/// is read as no usage (as before), the answer is not replaced by an error.
#[test]
fn openai_usage() {
    for kind in [Kind::Openai, Kind::Azure] {
        let t = for_kind(kind)
            .response(
                &ctx(false),
                br#"{"id":"c","choices":[{"index":0,"message":{"content":"Hi"}}],"usage":{"prompt_tokens":"5","completion_tokens":2}}"#,
            )
            .unwrap();
        assert_eq!((t.body, t.usage), (None, None), "{kind:?}");
        let t = for_kind(kind)
            .response(
                &ctx(false),
                br#"{"id":"c","choices":7,"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1,"audio_tokens":null}}}"#,
            )
            .unwrap();
        assert_eq!(
            t.usage,
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 2,
                cached_tokens: 1,
                cache_write_tokens: 0,
                web_searches: 0,
            }),
            "{kind:?}"
        );
    }
    // In a stream: the chunk goes on as it is, without usage.
    let input = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":[2]}}\n\ndata: [DONE]\n\n";
    let (out, usage) = stream(Kind::Openai, input.as_bytes());
    assert_eq!((out.as_str(), usage), (input, None));
}
