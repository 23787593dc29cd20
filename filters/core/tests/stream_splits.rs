//! Every streaming translator fed the same upstream stream split at every
//! byte boundary (and byte by byte, and with CRLF line ends) must produce the
//! same output as the unsplit stream, and that output must carry the right
//! text, tool-call arguments, finish reason and usage.

use serde_json::Value;
use tollgate_core::config::Kind;
use tollgate_core::translate::{for_kind, Endpoint, ResponseCtx, Usage};

const TOOL_STREAM: &str = include_str!("fixtures/anthropic_tool_stream.sse");

fn ctx(include_usage: bool) -> ResponseCtx {
    ResponseCtx {
        endpoint: Endpoint::Chat,
        stream: true,
        include_usage,
        created: 1700000000,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: String::new(),
    }
}

fn run(kind: Kind, include_usage: bool, parts: &[&[u8]]) -> (Vec<u8>, Option<Usage>) {
    let mut t = for_kind(kind).stream(&ctx(include_usage));
    let mut out = Vec::new();
    for p in parts {
        t.feed(p, &mut out);
    }
    t.finish(&mut out);
    (out, t.usage())
}

/// Parse OpenAI SSE output into chunk objects (and check it ends with [DONE]).
fn chunks(out: &[u8]) -> Vec<Value> {
    let s = std::str::from_utf8(out).expect("utf8 output");
    let mut v = Vec::new();
    let mut done = false;
    for ev in s.split("\n\n").filter(|e| !e.is_empty()) {
        let data = ev.strip_prefix("data: ").expect("data line");
        assert!(!done, "event after [DONE]");
        if data == "[DONE]" {
            done = true;
        } else {
            v.push(serde_json::from_str(data).expect("chunk json"));
        }
    }
    assert!(done, "stream must end with [DONE]");
    v
}

fn check_tool_stream(out: &[u8], include_usage: bool) {
    let cs = chunks(out);
    let mut text = String::new();
    let mut args: Vec<String> = Vec::new();
    let mut names = Vec::new();
    let mut finish = None;
    let mut usage = None;
    for c in &cs {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], "msg_01");
        assert_eq!(c["model"], "claude-sonnet-4-5");
        if let Some(u) = c.get("usage") {
            assert_eq!(c["choices"].as_array().unwrap().len(), 0);
            usage = Some(u.clone());
            continue;
        }
        let ch = &c["choices"][0];
        if let Some(t) = ch["delta"]["content"].as_str() {
            text.push_str(t);
        }
        if let Some(calls) = ch["delta"]["tool_calls"].as_array() {
            for tc in calls {
                let i = tc["index"].as_u64().unwrap() as usize;
                if args.len() <= i {
                    args.resize(i + 1, String::new());
                }
                if let Some(n) = tc["function"]["name"].as_str() {
                    names.push((i, n.to_string(), tc["id"].as_str().unwrap().to_string()));
                }
                if let Some(a) = tc["function"]["arguments"].as_str() {
                    args[i].push_str(a);
                }
            }
        }
        if let Some(f) = ch["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert_eq!(text, "Let me check ☀️ the weather.");
    assert_eq!(
        names,
        vec![
            (0, "get_weather".into(), "toolu_01".into()),
            (1, "get_time".into(), "toolu_02".into())
        ]
    );
    let a0: Value = serde_json::from_str(&args[0]).unwrap();
    assert_eq!(
        a0,
        serde_json::json!({"location": "San Francisco, CA", "unit": "c"})
    );
    assert_eq!(args[1], "{\"tz\":\"PST\"}");
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    if include_usage {
        let u = usage.expect("usage chunk");
        assert_eq!(u["prompt_tokens"], 130);
        assert_eq!(u["completion_tokens"], 89);
        assert_eq!(u["total_tokens"], 219);
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 100);
    } else {
        assert!(usage.is_none());
    }
}

#[test]
fn anthropic_tool_stream_every_split() {
    let input = TOOL_STREAM.as_bytes();
    for include_usage in [true, false] {
        let (whole, usage) = run(Kind::Anthropic, include_usage, &[input]);
        check_tool_stream(&whole, include_usage);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 130,
                completion_tokens: 89,
                cached_tokens: 100,
                cache_write_tokens: 5,
                web_searches: 0,
            })
        );
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            let (out, u) = run(Kind::Anthropic, include_usage, &[a, b]);
            assert_eq!(out, whole, "split at {i}");
            assert_eq!(u, usage);
        }
    }
}

#[test]
fn anthropic_tool_stream_three_way_splits() {
    let input = TOOL_STREAM.as_bytes();
    let (whole, _) = run(Kind::Anthropic, true, &[input]);
    let n = input.len();
    for i in (0..n).step_by(7) {
        for j in (i..n).step_by(13) {
            let (out, _) = run(
                Kind::Anthropic,
                true,
                &[&input[..i], &input[i..j], &input[j..]],
            );
            assert_eq!(out, whole, "splits at {i},{j}");
        }
    }
}

#[test]
fn anthropic_stream_byte_by_byte_and_crlf() {
    let crlf = TOOL_STREAM.replace('\n', "\r\n");
    let input = crlf.as_bytes();
    let (whole, _) = run(Kind::Anthropic, true, &[TOOL_STREAM.as_bytes()]);
    let parts: Vec<&[u8]> = input.chunks(1).collect();
    let (out, _) = run(Kind::Anthropic, true, &parts);
    assert_eq!(out, whole);
}

#[test]
fn anthropic_truncated_stream_ends_with_error_and_done() {
    let input = TOOL_STREAM.as_bytes();
    let cut = TOOL_STREAM.find("event: message_delta").unwrap();
    let (out, usage) = run(Kind::Anthropic, true, &[&input[..cut]]);
    let s = String::from_utf8(out).unwrap();
    assert!(s.contains("\"code\":\"provider_error\""), "{s}");
    assert!(s.ends_with("data: [DONE]\n\n"));
    // Usage known so far is still reported for accounting.
    assert_eq!(usage.unwrap().prompt_tokens, 130);
}

#[test]
fn anthropic_error_event() {
    let input = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (out, _) = run(Kind::Anthropic, false, &[input]);
    let s = String::from_utf8(out).unwrap();
    assert!(s.contains("\"code\":\"provider_overloaded\""));
    assert!(s.contains("Overloaded"));
    assert!(s.ends_with("data: [DONE]\n\n"));
}

#[test]
fn anthropic_rate_limit_event_keeps_its_type() {
    let input = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Slow down\"}}\n\n";
    let (out, _) = run(Kind::Anthropic, false, &[input]);
    let last = chunks(&out).pop().unwrap();
    assert_eq!(last["error"]["type"], "rate_limit_error");
    assert_eq!(last["error"]["code"], "rate_limit_exceeded");
}

/// Bytes that are not UTF-8 inside an SSE line end every SSE-reading
/// translator with one OpenAI error event and `[DONE]`, after what came
/// before, and whatever follows is ignored.
#[test]
fn malformed_sse_ends_with_one_error_and_done() {
    let good: &[(Kind, &[u8])] = &[
        (Kind::Openai, b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"),
        (Kind::Azure, b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"),
        (Kind::Anthropic, b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"),
        (Kind::Gemini, b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hi\"}]}}]}\n\n"),
    ];
    for (kind, head) in good {
        let (out, _) = run(*kind, false, &[head, b"data: \xff\xfe\n\n", head]);
        let c = chunks(&out);
        let text: String = c
            .iter()
            .filter_map(|v| v["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hi", "{kind:?}: {c:?}");
        let errors: Vec<&Value> = c.iter().filter(|v| v.get("error").is_some()).collect();
        assert_eq!(errors.len(), 1, "{kind:?}: {c:?}");
        assert_eq!(c.last(), Some(errors[0]), "{kind:?}: error is not last");
        let e = &errors[0]["error"];
        assert_eq!(
            (
                e["type"].as_str(),
                e["code"].as_str(),
                e["message"].as_str()
            ),
            (
                Some("server_error"),
                Some("provider_error"),
                Some("Malformed stream from the provider")
            ),
            "{kind:?}"
        );
    }
}

const OPENAI_TOOL_STREAM: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n\
data: [DONE]\n\n";

#[test]
fn openai_stream_every_split() {
    let input = OPENAI_TOOL_STREAM.as_bytes();
    for include_usage in [true, false] {
        let (whole, usage) = run(Kind::Openai, include_usage, &[input]);
        if include_usage {
            assert_eq!(whole, input);
        } else {
            assert!(!String::from_utf8(whole.clone()).unwrap().contains("usage"));
        }
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 9,
                completion_tokens: 4,
                cached_tokens: 0,
                cache_write_tokens: 0,
                web_searches: 0,
            })
        );
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(
                run(Kind::Openai, include_usage, &[a, b]).0,
                whole,
                "split at {i}"
            );
        }
    }
}

#[test]
fn random_multi_splits_match_the_unsplit_output() {
    use tollgate_core::keys::XorShift;
    let mut r = XorShift::new(99);
    for (kind, input) in [
        (Kind::Anthropic, TOOL_STREAM.as_bytes()),
        (Kind::Openai, OPENAI_TOOL_STREAM.as_bytes()),
    ] {
        for include_usage in [true, false] {
            let (whole, usage) = run(kind, include_usage, &[input]);
            for _ in 0..300 {
                let mut parts: Vec<&[u8]> = Vec::new();
                let mut rest = input;
                while !rest.is_empty() {
                    let n = (1 + r.next_u32() as usize % 40).min(rest.len());
                    let (a, b) = rest.split_at(n);
                    parts.push(a);
                    rest = b;
                }
                let (out, u) = run(kind, include_usage, &parts);
                assert_eq!(out, whole);
                assert_eq!(u, usage);
            }
        }
    }
}
