//! The Responses front door's translators: every provider's stream turned
//! into Responses events at every split (byte boundaries, byte by byte),
//! the event sequence the official SDKs accumulate (created, in_progress,
//! item added before its deltas, done events, completed with usage), the
//! native passthrough read only for usage, and the request conversion.

use serde_json::{json, Value};
use tollgate_core::config::Runtime;
use tollgate_core::translate::responses::{to_chat, translator};
use tollgate_core::translate::{Endpoint, RequestCtx, ResponseCtx, Translator, Usage};

const CONFIG: &str = r#"{"providers": {
  "openai": {"kind": "openai", "cluster": "openai", "models": ["gpt-4o-mini"], "keys": [{"id": "o", "value": "sk"}]},
  "compat": {"kind": "openai", "cluster": "compat", "responses_api": false, "models": ["m"], "keys": [{"id": "c", "value": "ck"}]},
  "azure": {"kind": "azure", "cluster": "azure", "deployments": {"gpt-4o-mini": "dep-mini"}, "models": ["gpt-4o-mini"], "keys": [{"id": "z", "value": "zk"}]},
  "anthropic": {"kind": "anthropic", "cluster": "anthropic", "models": ["claude-sonnet-4-5"], "keys": [{"id": "a", "value": "ak"}]},
  "gemini": {"kind": "gemini", "cluster": "gemini", "models": ["gemini-2.0-flash"], "keys": [{"id": "g", "value": "gk"}]},
  "bedrock": {"kind": "bedrock", "cluster": "bedrock", "region": "us-east-1", "models": ["anthropic.claude-3-haiku-20240307-v1:0"],
              "keys": [{"id": "b", "access_key_id": "AKID", "value": "secret"}]}
}}"#;

fn rt() -> Runtime {
    Runtime::from_json(CONFIG.as_bytes(), &|_| None).unwrap()
}

fn tr(rt: &Runtime, provider: &str) -> &'static dyn Translator {
    let p = (0..)
        .map_while(|i| rt.provider(i))
        .find(|p| p.name == provider)
        .unwrap();
    translator(p, Endpoint::Responses)
}

fn ctx() -> ResponseCtx {
    ResponseCtx {
        endpoint: Endpoint::Responses,
        stream: true,
        include_usage: true,
        created: 1_700_000_000,
        json_mode: false,
        prompt_estimate: 0,
        embed_base64: false,
        model: "upstream-model".into(),
    }
}

fn run(t: &dyn Translator, parts: &[&[u8]]) -> (Vec<u8>, Option<Usage>) {
    let mut s = t.stream(&ctx());
    let mut out = Vec::new();
    for p in parts {
        s.feed(p, &mut out);
    }
    s.finish(&mut out);
    (out, s.usage())
}

/// The events of a Responses stream, checked as the SDK's accumulator
/// reads them: `event:` names its data's type, sequence numbers count up
/// from 0, lifecycle first, each content event after its item's `added`.
fn events(out: &[u8]) -> Vec<Value> {
    let s = std::str::from_utf8(out).expect("utf8");
    let mut evs = Vec::new();
    let mut added = std::collections::BTreeSet::new();
    for block in s.split("\n\n").filter(|b| !b.is_empty()) {
        let (name, data) = block.split_once('\n').expect("event and data lines");
        let name = name.strip_prefix("event: ").expect("event line");
        let v: Value =
            serde_json::from_str(data.strip_prefix("data: ").expect("data line")).unwrap();
        assert_eq!(v["type"], name);
        assert_eq!(v["sequence_number"], evs.len() as u64, "{block}");
        if let Some(i) = v["output_index"].as_u64() {
            if name == "response.output_item.added" {
                assert!(added.insert(i), "output index {i} added twice");
            } else {
                assert!(added.contains(&i), "{name} before its item was added");
            }
        }
        evs.push(v);
    }
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types.get(..2),
        Some(&["response.created", "response.in_progress"][..])
    );
    evs
}

fn types(evs: &[Value]) -> Vec<&str> {
    evs.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Text and the calls' (name, call id, arguments) from the deltas; the
/// completed response must hold the same.
fn check_answer(evs: &[Value], text: &str, calls: &[(&str, &str, Value)], usage: (u64, u64)) {
    let got_text: String = evs
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(got_text, text);
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{last}");
    let r = &last["response"];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["usage"]["input_tokens"], usage.0);
    assert_eq!(r["usage"]["output_tokens"], usage.1);
    assert_eq!(r["usage"]["total_tokens"], usage.0 + usage.1);
    let output = r["output"].as_array().unwrap();
    let msgs: Vec<&Value> = output.iter().filter(|i| i["type"] == "message").collect();
    if text.is_empty() {
        assert!(msgs.is_empty());
    } else {
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0]["content"][0]["text"], text);
    }
    let fcs: Vec<&Value> = output
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(fcs.len(), calls.len(), "{output:?}");
    for (fc, (name, id, args)) in fcs.iter().zip(calls) {
        assert_eq!(fc["name"], *name);
        assert_eq!(fc["call_id"], *id);
        let parsed: Value = serde_json::from_str(fc["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(&parsed, args);
        // The deltas of this item add up to its arguments.
        let deltas: String = evs
            .iter()
            .filter(|e| {
                e["type"] == "response.function_call_arguments.delta" && e["item_id"] == fc["id"]
            })
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, fc["arguments"].as_str().unwrap());
    }
    // Every item added is done, in the completed output at its index.
    let done: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done.len(), output.len());
    for d in done {
        assert_eq!(
            &output[d["output_index"].as_u64().unwrap() as usize],
            &d["item"]
        );
    }
}

const ANTHROPIC: &str = include_str!("fixtures/anthropic_tool_stream.sse");

const CHAT: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hé \"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"there\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n\
data: [DONE]\n\n";

fn gemini_stream() -> Vec<u8> {
    let mut s = Vec::new();
    for line in [
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi "}]}}], "responseId": "r1", "modelVersion": "gemini-2.0-flash"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "you"}, {"functionCall": {"name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3}, "responseId": "r1"}),
    ] {
        s.extend_from_slice(format!("data: {line}\r\n\r\n").as_bytes());
    }
    s
}

fn bedrock_stream() -> Vec<u8> {
    let mut s = Vec::new();
    for (t, p) in [
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ),
        (
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":"}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"1}"}}}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":1}"#),
        ("messageStop", r#"{"stopReason":"tool_use"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":7,"outputTokens":2}}"#,
        ),
    ] {
        s.extend(tollgate_core::codec::eventstream::event(t, p.as_bytes()));
    }
    s
}

/// The same output at every two-way split and byte by byte.
fn every_split(t: &dyn Translator, input: &[u8]) -> Vec<u8> {
    let (whole, usage) = run(t, &[input]);
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        let (out, u) = run(t, &[a, b]);
        assert!(
            out == whole,
            "split at {i}:\n{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(u, usage);
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(run(t, &bytes).0, whole);
    whole
}

#[test]
fn anthropic_stream_becomes_responses_events_at_every_split() {
    let rt = rt();
    let t = tr(&rt, "anthropic");
    let out = every_split(t, ANTHROPIC.as_bytes());
    let evs = events(&out);
    check_answer(
        &evs,
        "Let me check ☀️ the weather.",
        &[
            (
                "get_weather",
                "toolu_01",
                json!({"location": "San Francisco, CA", "unit": "c"}),
            ),
            ("get_time", "toolu_02", json!({"tz": "PST"})),
        ],
        (130, 89),
    );
    assert_eq!(
        run(t, &[ANTHROPIC.as_bytes()]).1.unwrap().cached_tokens,
        100
    );
    // The text item closes before the first call opens.
    let ts = types(&evs);
    let text_done = ts
        .iter()
        .position(|t| *t == "response.output_text.done")
        .unwrap();
    let first_call = ts
        .iter()
        .position(|t| *t == "response.function_call_arguments.delta")
        .unwrap();
    assert!(text_done < first_call);
}

#[test]
fn chat_only_openai_stream_becomes_responses_events_at_every_split() {
    let rt = rt();
    let out = every_split(tr(&rt, "compat"), CHAT.as_bytes());
    let evs = events(&out);
    check_answer(
        &evs,
        "Hé there",
        &[("f", "call_1", json!({"a": 1}))],
        (9, 4),
    );
    assert_eq!(evs[0]["response"]["id"], "resp_1");
    assert_eq!(evs[0]["response"]["model"], "m");
}

#[test]
fn gemini_stream_becomes_responses_events_at_every_split() {
    let rt = rt();
    let out = every_split(tr(&rt, "gemini"), &gemini_stream());
    let evs = events(&out);
    let call_id = evs
        .iter()
        .find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call")
        .map(|e| e["item"]["call_id"].as_str().unwrap().to_string())
        .unwrap();
    check_answer(&evs, "Hi you", &[("f", &call_id, json!({"a": 1}))], (5, 3));
}

#[test]
fn bedrock_stream_becomes_responses_events_at_every_split() {
    let rt = rt();
    let out = every_split(tr(&rt, "bedrock"), &bedrock_stream());
    check_answer(&events(&out), "Hi", &[("f", "t1", json!({"a": 1}))], (7, 2));
}

#[test]
fn a_cut_or_failed_stream_ends_with_error_and_response_failed() {
    let rt = rt();
    let t = tr(&rt, "anthropic");
    let cut = ANTHROPIC.find("event: message_delta").unwrap();
    let (out, usage) = run(t, &[&ANTHROPIC.as_bytes()[..cut]]);
    let evs = events(&out);
    let ts = types(&evs);
    assert_eq!(ts[ts.len() - 2..], ["error", "response.failed"]);
    assert!(!ts.contains(&"response.completed"));
    assert_eq!(evs.last().unwrap()["response"]["status"], "failed");
    // What was seen is still counted.
    assert_eq!(usage.unwrap().prompt_tokens, 130);
    // An in-stream provider error.
    let err = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let evs = events(&run(t, &[err]).0);
    let e = evs.iter().find(|e| e["type"] == "error").unwrap();
    assert_eq!(e["code"], "provider_overloaded");
    assert_eq!(e["message"], "Overloaded");
    assert_eq!(types(&evs).last(), Some(&"response.failed"));
    // Nothing at all from the provider.
    let evs = events(&run(t, &[]).0);
    assert_eq!(types(&evs).last(), Some(&"response.failed"));
}

const NATIVE: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"Hi\"}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":11,\"input_tokens_details\":{\"cached_tokens\":4},\"output_tokens\":6,\"total_tokens\":17}}}\n\n";

#[test]
fn native_streams_pass_through_and_give_usage_at_every_split() {
    let rt = rt();
    for provider in ["openai", "azure"] {
        let t = tr(&rt, provider);
        assert!(t.passthrough());
        let want = Some(Usage {
            prompt_tokens: 11,
            completion_tokens: 6,
            cached_tokens: 4,
            cache_write_tokens: 0,
            web_searches: 0,
        });
        let input = NATIVE.as_bytes();
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            let mut s = t.stream(&ctx());
            let mut out = Vec::new();
            s.feed(a, &mut out);
            assert_eq!(
                s.first_token_seen(),
                a.len() >= NATIVE.find("event: response.completed").unwrap()
            );
            s.feed(b, &mut out);
            s.finish(&mut out);
            assert_eq!(out, input, "split at {i}");
            assert_eq!(s.usage(), want, "split at {i}");
        }
        // Without `event:` lines the type in the data decides.
        let bare: String = NATIVE
            .split("\n\n")
            .filter_map(|b| b.split_once('\n').map(|(_, d)| format!("{d}\n\n")))
            .collect();
        assert_eq!(run(t, &[bare.as_bytes()]).1, want);
        let body = br#"{"id":"resp_1","output":[],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}"#;
        let got = t.response(&ctx(), body).unwrap();
        assert_eq!((got.body, got.usage.map(|u| u.total())), (None, Some(5)));
        // The provider's web searches are counted from its output items,
        // in a whole answer and in the stream's final response.
        let searched = json!({"id": "resp_1", "output": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "web_search_call", "id": "ws_2", "status": "completed"},
            {"type": "message", "id": "m", "content": []}],
            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let got = t.response(&ctx(), searched.to_string().as_bytes()).unwrap();
        assert_eq!(got.usage.map(|u| u.web_searches), Some(2));
        let event = json!({"type": "response.completed", "response": searched});
        let stream = format!("event: response.completed\ndata: {event}\n\n");
        assert_eq!(
            run(t, &[stream.as_bytes()]).1.map(|u| u.web_searches),
            Some(2)
        );
    }
}

fn request(
    rt: &Runtime,
    provider: &str,
    model: &str,
    body: Value,
) -> Result<(String, Value), String> {
    let res = rt.resolve(&format!("{provider}/{model}")).unwrap();
    let p = rt.provider(res.provider).unwrap();
    let ctx = RequestCtx {
        provider: p,
        model: &res.model,
        model_cfg: &p.models[&res.model],
        endpoint: Endpoint::Responses,
        cache_breakpoints: false,
    };
    translator(p, Endpoint::Responses)
        .request(&ctx, &body)
        .map(|u| (u.path, serde_json::from_slice(&u.body).unwrap()))
        .map_err(|e| format!("{} {} {}", e.status, e.param.unwrap_or_default(), e.message))
}

/// The translated request of a Responses body, with the dropped and
/// lowered names.
fn translated(
    rt: &Runtime,
    provider: &str,
    model: &str,
    body: Value,
) -> (Value, Vec<&'static str>, Vec<String>) {
    let res = rt.resolve(&format!("{provider}/{model}")).unwrap();
    let p = rt.provider(res.provider).unwrap();
    let ctx = RequestCtx {
        provider: p,
        model: &res.model,
        model_cfg: &p.models[&res.model],
        endpoint: Endpoint::Responses,
        cache_breakpoints: false,
    };
    let up = translator(p, Endpoint::Responses)
        .request(&ctx, &body)
        .unwrap();
    (
        serde_json::from_slice(&up.body).unwrap(),
        up.dropped,
        up.lowered,
    )
}

#[test]
fn built_in_tools_pass_through_natively_and_are_dropped_or_mapped_elsewhere() {
    // Codex's default request: function tools beside the built-in web
    // search, and the built-in calls of an earlier turn.
    let body = |model: &str| {
        json!({"model": model, "input": [
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                  {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}}],
               "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}},
                         {"type": "web_search", "filters": {"allowed_domains": ["docs.rs"]}},
                         {"type": "custom", "name": "apply_patch"},
                         {"type": "image_generation"}],
               "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []},
               "top_logprobs": 2, "max_output_tokens": 100000,
               "reasoning": {"effort": "medium", "summary": "auto"}})
    };
    let rt = rt();
    // OpenAI runs its built-in tools: the body goes as it came.
    let (_, up) = request(&rt, "openai", "gpt-4o-mini", body("openai/gpt-4o-mini")).unwrap();
    assert_eq!(up["tools"], body("x")["tools"]);
    assert_eq!(up["max_output_tokens"], 100000);
    // Without web search enabled, Anthropic gets the function only.
    let (up, dropped, lowered) = translated(
        &rt,
        "anthropic",
        "claude-sonnet-4-5",
        body("anthropic/claude-sonnet-4-5"),
    );
    assert_eq!(up["tools"].as_array().unwrap().len(), 1, "{up}");
    assert_eq!(up["tools"][0]["name"], "shell");
    assert_eq!(up.get("tool_choice"), None);
    assert_eq!(
        dropped,
        vec![
            "top_logprobs",
            "input_items",
            "custom",
            "image_generation",
            "tool_choice",
            "reasoning",
            "web_search"
        ]
    );
    assert!(lowered.is_empty(), "no limit configured: {lowered:?}");
    // With web search enabled and a model limit: Anthropic's own search
    // tool, and the output limit lowered to the model's.
    let cfg = CONFIG
        .replace(
            r#""kind": "anthropic", "cluster": "anthropic", "models": ["claude-sonnet-4-5"]"#,
            r#""kind": "anthropic", "cluster": "anthropic", "web_search": true,
               "models": {"claude-sonnet-4-5": {"max_output_tokens": 64000, "context_window": 200000}}"#,
        )
        .replace(
            r#""kind": "gemini", "cluster": "gemini", "models""#,
            r#""kind": "gemini", "cluster": "gemini", "web_search": true, "models""#,
        );
    let rt = Runtime::from_json(cfg.as_bytes(), &|_| None).unwrap();
    let (up, dropped, lowered) = translated(
        &rt,
        "anthropic",
        "claude-sonnet-4-5",
        body("anthropic/claude-sonnet-4-5"),
    );
    assert_eq!(
        up["tools"][1],
        json!({"type": "web_search_20250305", "name": "web_search", "allowed_domains": ["docs.rs"]})
    );
    assert!(!dropped.contains(&"web_search"), "{dropped:?}");
    assert_eq!(up["max_tokens"], 64000);
    assert_eq!(lowered, vec!["max_tokens=64000"]);
    // Gemini 2.x does not combine Google Search with functions: dropped
    // there, used when the request declares no function.
    let (_, dropped, _) = translated(
        &rt,
        "gemini",
        "gemini-2.0-flash",
        body("gemini/gemini-2.0-flash"),
    );
    assert!(dropped.contains(&"web_search"), "{dropped:?}");
    let (up, dropped, _) = translated(
        &rt,
        "gemini",
        "gemini-2.0-flash",
        json!({"model": "gemini/gemini-2.0-flash", "input": "news?", "tools": [{"type": "web_search_preview"}]}),
    );
    assert_eq!(up["tools"], json!([{"googleSearch": {}}]));
    assert!(dropped.is_empty(), "{dropped:?}");
    // A limit the request stays under is left alone.
    let (up, _, lowered) = translated(
        &rt,
        "anthropic",
        "claude-sonnet-4-5",
        json!({"model": "anthropic/claude-sonnet-4-5", "input": "hi", "max_output_tokens": 100}),
    );
    assert_eq!(up["max_tokens"], 100);
    assert!(lowered.is_empty());
}

#[test]
fn native_requests_keep_their_body_with_the_upstream_model_and_no_store() {
    let rt = rt();
    let body = json!({"model": "openai/gpt-4o-mini", "input": "hi", "stream": true, "include": ["reasoning.encrypted_content"],
                      "tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "apply_patch"}], "store": false});
    let (path, up) = request(&rt, "openai", "gpt-4o-mini", body.clone()).unwrap();
    assert_eq!(path, "/v1/responses");
    let mut want = body.clone();
    want["model"] = json!("gpt-4o-mini");
    assert_eq!(up, want);
    let (path, up) = request(&rt, "azure", "gpt-4o-mini", body).unwrap();
    assert_eq!(
        (path.as_str(), &up["model"], &up["store"]),
        ("/openai/v1/responses", &json!("dep-mini"), &json!(false))
    );
}

#[test]
fn codex_like_requests_translate_to_chat() {
    let body = json!({
        "model": "anthropic/claude-sonnet-4-5", "instructions": "You are a coding agent.", "stream": true, "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k", "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"}, "tool_choice": "auto", "max_output_tokens": 300,
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}},
        "tools": [{"type": "function", "name": "shell", "description": "run", "strict": false,
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running ls."}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "shell", "arguments": "{\"cmd\":\"pwd\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "/src"}]}
        ]
    });
    let chat = to_chat(&body, "anthropic", tollgate_core::config::Kind::Anthropic).unwrap();
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "system", "content": "You are a coding agent."},
            {"role": "system", "content": [{"type": "text", "text": "be careful"}]},
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": "Running ls.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"pwd\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
            {"role": "tool", "tool_call_id": "call_2", "content": "/src"}
        ])
    );
    assert_eq!(chat["tools"][0]["function"]["name"], "shell");
    assert_eq!(chat["max_tokens"], 300);
    assert_eq!(chat["parallel_tool_calls"], false);
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    assert_eq!(chat["response_format"]["json_schema"]["name"], "out");
    assert!(chat.get("reasoning_effort").is_none());
    // The whole request reaches Anthropic's native shape (which refuses a
    // JSON schema beside tools).
    let rt = rt();
    let mut without_format = body.clone();
    without_format.as_object_mut().unwrap().remove("text");
    let (path, up) = request(&rt, "anthropic", "claude-sonnet-4-5", without_format)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(path, "/v1/messages");
    assert_eq!(up["messages"].as_array().unwrap().len(), 3);
    // An OpenAI-compatible chat server gets the effort.
    let chat = to_chat(&body, "compat", tollgate_core::config::Kind::Openai).unwrap();
    assert_eq!(chat["reasoning_effort"], "medium");
}

#[test]
fn refusals_name_the_parameter() {
    let rt = rt();
    let refused = |provider: &str, model: &str, extra: Value| {
        let mut body = json!({"model": format!("{provider}/{model}"), "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        request(&rt, provider, model, body).unwrap_err()
    };
    for (p, m) in [
        ("openai", "gpt-4o-mini"),
        ("anthropic", "claude-sonnet-4-5"),
        ("compat", "m"),
    ] {
        assert!(refused(p, m, json!({"previous_response_id": "resp_1"}))
            .starts_with("400 previous_response_id"));
        assert!(refused(p, m, json!({"store": true})).contains("stateless"));
        assert!(refused(p, m, json!({"conversation": "conv_1"})).starts_with("400 conversation"));
        assert!(refused(p, m, json!({"background": true})).starts_with("400 background"));
        assert!(refused(
            p,
            m,
            json!({"input": [{"type": "item_reference", "id": "x"}]})
        )
        .starts_with("400 input[0]"));
        assert!(refused(p, m, json!({"input": null})).starts_with("400 input"));
        assert!(refused(p, m, json!({"tools": [{"name": "f"}]})).starts_with("400 tools[0].type"));
    }
    let e = refused(
        "gemini",
        "gemini-2.0-flash",
        json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
    );
    assert!(e.starts_with("400 input[0].content[0].type"), "{e}");
    let e = refused(
        "anthropic",
        "claude-sonnet-4-5",
        json!({"input": [{"type": "function_call", "name": "f"}]}),
    );
    assert!(e.starts_with("400 input[0].call_id"), "{e}");
}

#[test]
fn chat_answers_become_response_objects() {
    let rt = rt();
    let t = tr(&rt, "compat");
    let chat = json!({"id": "chatcmpl-9", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "Hello", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1}}});
    let mut c = ctx();
    c.stream = false;
    let got = t.response(&c, &serde_json::to_vec(&chat).unwrap()).unwrap();
    let r: Value = serde_json::from_slice(&got.body.unwrap()).unwrap();
    assert_eq!(r["id"], "resp_9");
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(
        r["output"][0]["content"][0],
        json!({"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []})
    );
    assert_eq!(r["output"][1]["call_id"], "call_1");
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 1);
    assert_eq!(got.usage.unwrap().total(), 5);
    // Cut by max tokens: incomplete.
    let mut cut = chat.clone();
    cut["choices"][0]["finish_reason"] = json!("length");
    let got = t.response(&c, &serde_json::to_vec(&cut).unwrap()).unwrap();
    let r: Value = serde_json::from_slice(&got.body.unwrap()).unwrap();
    assert_eq!(
        (r["status"].as_str(), &r["incomplete_details"]["reason"]),
        (Some("incomplete"), &json!("max_output_tokens"))
    );
    // Not a chat completion: a 502, never a wrong answer.
    assert_eq!(t.response(&c, b"{\"choices\":[]}").unwrap_err().status, 502);
}

/// An OpenAI-compatible server may interleave the argument deltas of
/// parallel calls: each goes to its own item.
#[test]
fn interleaved_parallel_calls_keep_their_arguments_apart() {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-2", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        )
    };
    let call = |i: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut f = json!({"arguments": args});
        if let Some(n) = name {
            f["name"] = json!(n);
        }
        let mut tc = json!({"index": i, "function": f});
        if let Some(id) = id {
            tc["id"] = json!(id);
        }
        chunk(json!({"tool_calls": [tc]}))
    };
    let stream = [
        call(0, Some("call_a"), Some("f"), "{\"x\":"),
        call(1, Some("call_b"), Some("g"), "{\"y\":"),
        call(0, None, None, "1}"),
        call(1, None, None, "2}"),
        "data: {\"id\":\"chatcmpl-2\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6}}\n\n".into(),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let rt = rt();
    let out = every_split(tr(&rt, "compat"), stream.as_bytes());
    check_answer(
        &events(&out),
        "",
        &[
            ("f", "call_a", json!({"x": 1})),
            ("g", "call_b", json!({"y": 2})),
        ],
        (4, 6),
    );
}

mod flow {
    //! `/v1/responses` through the filter's whole flow (in-memory host):
    //! routed, translated back, usage reported under the canonical model.

    use std::sync::Arc;

    use serde_json::{json, Value};
    use tollgate_core::flow::{Action, Flow};
    use tollgate_core::host::fake::FakeHost;

    fn host(body: &Value) -> FakeHost {
        let body = serde_json::to_vec(body).unwrap();
        FakeHost {
            now: 1_700_000_000_000,
            req_headers: [
                (":method", "POST"),
                (":path", "/v1/responses"),
                ("x-tollgate-tenant", "demo"),
                ("x-tollgate-key-id", "demo-key"),
                ("x-tollgate-models", "*"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .to_vec(),
            req_body: body,
            ..FakeHost::default()
        }
    }

    fn run(body: Value, status: u16, ctype: &str, answer: &[u8]) -> FakeHost {
        let rt = Arc::new(super::rt());
        let mut f = Flow::new(Arc::clone(&rt));
        let mut h = host(&body);
        assert_eq!(f.on_request_headers(&mut h, false), Action::Pause);
        let n = h.req_body.len();
        assert_eq!(f.on_request_body(&mut h, n, true), Action::Continue);
        assert!(h.local_reply.is_none(), "{:?}", h.local_reply);
        h.resp_headers = vec![
            (":status".into(), status.to_string()),
            ("content-type".into(), ctype.into()),
        ];
        h.resp_body = answer.to_vec();
        f.on_response_headers(&mut h, false);
        f.on_response_body(&mut h, answer.len(), true);
        f.on_log(&mut h);
        h
    }

    fn property(h: &FakeHost, name: &str) -> String {
        String::from_utf8(h.properties[name].clone()).unwrap()
    }

    #[test]
    fn translated_answer_and_usage_report() {
        let answer = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":2}}"#;
        let h = run(
            json!({"model": "anthropic/claude-sonnet-4-5", "input": "hi", "instructions": "brief"}),
            200,
            "application/json",
            answer,
        );
        assert_eq!(h.req_header(":path").as_deref(), Some("/v1/messages"));
        let sent: Value = serde_json::from_slice(&h.req_body).unwrap();
        assert_eq!(sent["system"], "brief");
        let out: Value = serde_json::from_slice(&h.resp_body).unwrap();
        assert_eq!(out["object"], "response");
        assert_eq!(out["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(
            h.resp_header("content-length"),
            Some(h.resp_body.len().to_string())
        );
        assert_eq!(
            h.resp_header("content-type").as_deref(),
            Some("application/json")
        );
        let u: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
        assert_eq!(u["model"], "anthropic/claude-sonnet-4-5");
        assert_eq!(
            (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
            (Some(7), Some(2))
        );
        assert_eq!(
            property(&h, tollgate_core::metrics::property::OPERATION),
            "responses"
        );
    }

    #[test]
    fn passthrough_answer_is_untouched_and_its_usage_reported() {
        let answer = br#"{"id":"resp_1","object":"response","output":[],"usage":{"input_tokens":5,"output_tokens":3,"total_tokens":8}}"#;
        let h = run(
            json!({"model": "openai/gpt-4o-mini", "input": "hi"}),
            200,
            "application/json",
            answer,
        );
        assert_eq!(h.req_header(":path").as_deref(), Some("/v1/responses"));
        assert_eq!(h.resp_body, answer);
        let u: Value = serde_json::from_slice(&h.posts[0].2).unwrap();
        assert_eq!(
            (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()),
            (Some(5), Some(3))
        );
    }

    #[test]
    fn provider_errors_are_openai_errors() {
        let h = run(
            json!({"model": "anthropic/claude-sonnet-4-5", "input": "hi"}),
            429,
            "application/json",
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        );
        let out: Value = serde_json::from_slice(&h.resp_body).unwrap();
        assert_eq!(h.resp_header(":status").as_deref(), Some("429"));
        assert_eq!(out["error"]["code"], "rate_limit_exceeded");
    }
}
