#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! The scripted agent mode (`[[mock-tools: …]]` in the user's prompt):
//! each provider answers the next scripted call, stream or not, then text
//! quoting the last tool result. A conversation is replayed turn by turn
//! as an agent would send it; nothing is kept between requests.

use crate::common::*;
use serde_json::{json, Value};

const PROMPT: &str = r#"Read the notes. [[mock-tools: Bash {"command":"ls /tmp/x"} ; Read {"file_path":"/tmp/x/notes.txt"}]]"#;
const LS: &str = "notes.txt";
const NOTES: &str = "the secret is 4711";
const FINAL: &str = "mock agent result: the secret is 4711";

fn schema() -> Value {
    json!({"type": "object", "properties": {"command": {"type": "string"}, "file_path": {"type": "string"}}})
}

// ---- OpenAI chat ----

fn chat_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "Bash", "parameters": schema()}},
        {"type": "function", "function": {"name": "Read", "parameters": schema()}},
    ])
}

async fn chat(msgs: &Value, stream: bool) -> Resp {
    let body =
        json!({"model": "gpt-4o-mini", "messages": msgs, "tools": chat_tools(), "stream": stream});
    openai(&app(), &body.to_string(), &[]).await
}

/// The tool call of a chat answer, stream or not: (id, name, arguments).
fn chat_call(r: &Resp, stream: bool) -> (String, String, Value) {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        let v = r.json();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let c = &v["choices"][0]["message"]["tool_calls"][0];
        let args = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
        return (
            c["id"].as_str().unwrap().into(),
            c["function"]["name"].as_str().unwrap().into(),
            args,
        );
    }
    let data = r.sse_data();
    let first = &data[0]["choices"][0]["delta"]["tool_calls"][0];
    let args: String = data
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    (
        first["id"].as_str().unwrap().into(),
        first["function"]["name"].as_str().unwrap().into(),
        serde_json::from_str(&args).unwrap(),
    )
}

fn chat_text(r: &Resp, stream: bool) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        return r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .into();
    }
    r.sse_data()
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

#[tokio::test]
async fn openai_chat_runs_the_script() {
    for stream in [false, true] {
        let mut msgs =
            json!([{"role": "system", "content": "agent"}, {"role": "user", "content": PROMPT}]);
        for (want, args, result) in [
            ("Bash", json!({"command": "ls /tmp/x"}), LS),
            ("Read", json!({"file_path": "/tmp/x/notes.txt"}), NOTES),
        ] {
            let (id, name, got) = chat_call(&chat(&msgs, stream).await, stream);
            assert_eq!((name.as_str(), &got), (want, &args));
            let a = msgs.as_array_mut().unwrap();
            a.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": name, "arguments": got.to_string()}}]}));
            a.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
        }
        assert_eq!(chat_text(&chat(&msgs, stream).await, stream), FINAL);
    }
}

#[tokio::test]
async fn script_edge_cases() {
    let app = app();
    // No tools declared (a client's side request, e.g. a title): the echo.
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}]});
    let r = openai(&app, &body.to_string(), &[]).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "mock response to: Read the notes. [[mock-tools: Bash {\"command\":\"ls /tmp/x\"} ;"
    );
    // The next scripted tool is not declared: refused, naming it.
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}],
        "tools": [{"type": "function", "function": {"name": "Read", "parameters": schema()}}]});
    let r = openai(&app, &body.to_string(), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"Bash\" (the next step of the mock-tools directive) is not declared"));
    // A malformed directive says why.
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "[[mock-tools: Bash {\"command\": ]]"}],
        "tools": chat_tools()});
    let r = openai(&app, &body.to_string(), &[]).await;
    assert_eq!(r.status, 400);
    assert!(r
        .text()
        .contains("bad [[mock-tools: directive: arguments of Bash"));
    // x-mock-tool-call still wins.
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}], "tools": chat_tools()});
    let r = openai(&app, &body.to_string(), &[("x-mock-tool-call", "Read")]).await;
    let (_, name, args) = chat_call(&r, false);
    assert_eq!(
        (name.as_str(), args),
        ("Read", json!({"command": "mock", "file_path": "mock"}))
    );
}

// ---- OpenAI Responses ----

async fn responses(input: &Value, tools: &Value, stream: bool) -> Resp {
    let body = json!({"model": "gpt-4o-mini", "input": input, "tools": tools, "stream": stream,
        "store": false, "reasoning": null, "include": [], "prompt_cache_key": "s1",
        "client_metadata": {"session_id": "s1"}});
    call(&app(), "POST", "/v1/responses", &[OA], &body.to_string()).await
}

/// The output items of a Responses answer, stream (from
/// `response.completed`) or not.
fn response_output(r: &Resp, stream: bool) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    let v = if stream {
        r.sse_data()
            .into_iter()
            .find(|d| d["type"] == "response.completed")
            .unwrap()["response"]
            .clone()
    } else {
        r.json()
    };
    v["output"].as_array().unwrap().clone()
}

#[tokio::test]
async fn openai_responses_runs_the_script_with_namespaced_tools() {
    // Codex: shell as a plain function, an MCP tool inside a namespace,
    // a custom tool and a built-in tool beside them.
    let tools = json!([
        {"type": "function", "name": "Bash", "strict": false, "parameters": schema()},
        {"type": "namespace", "name": "mcp__files__", "description": "Tools in the mcp__files__ namespace.",
         "tools": [{"type": "function", "name": "Read", "strict": false, "parameters": schema()}]},
        {"type": "web_search", "external_web_access": false},
    ]);
    for stream in [false, true] {
        let mut input = json!([
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "agent"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]},
        ]);
        for (want, ns, args, result) in [
            ("Bash", None, json!({"command": "ls /tmp/x"}), LS),
            (
                "Read",
                Some("mcp__files__"),
                json!({"file_path": "/tmp/x/notes.txt"}),
                NOTES,
            ),
        ] {
            let out = response_output(&responses(&input, &tools, stream).await, stream);
            let call = &out[0];
            assert_eq!(call["type"], "function_call");
            assert_eq!(call["name"], want);
            assert_eq!(call.get("namespace").and_then(Value::as_str), ns);
            let got: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(got, args);
            // Replayed as Codex does: no `id`, no `status`.
            let mut item = json!({"type": "function_call", "call_id": call["call_id"],
                "name": call["name"], "arguments": call["arguments"]});
            if let Some(ns) = ns {
                item["namespace"] = json!(ns);
            }
            let a = input.as_array_mut().unwrap();
            a.push(item);
            a.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": result}));
        }
        let out = response_output(&responses(&input, &tools, stream).await, stream);
        assert_eq!(out[0]["content"][0]["text"], FINAL);
    }
}

#[tokio::test]
async fn responses_namespaced_tool_called_by_its_full_name() {
    let tools = json!([{"type": "namespace", "name": "mcp__files__", "description": "d",
        "tools": [{"type": "function", "name": "read", "parameters": schema()}]}]);
    let input = json!("go [[mock-tools: mcp__files__read {\"file_path\": \"/a\"}]]");
    let out = response_output(&responses(&input, &tools, false).await, false);
    assert_eq!(out[0]["name"], "read");
    assert_eq!(out[0]["namespace"], "mcp__files__");
}

// ---- Anthropic ----

fn anthropic_tools() -> Value {
    json!([
        {"name": "Bash", "description": "run", "input_schema": schema()},
        {"name": "Read", "description": "read", "input_schema": schema(), "cache_control": {"type": "ephemeral"}},
    ])
}

async fn messages(msgs: &Value, stream: bool) -> Resp {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "messages": msgs,
        "tools": anthropic_tools(), "stream": stream});
    call(
        &app(),
        "POST",
        "/v1/messages?beta=true",
        &[AK, AV],
        &body.to_string(),
    )
    .await
}

/// The answer's content blocks, rebuilt from the stream when streaming.
fn anthropic_content(r: &Resp, stream: bool) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        return r.json()["content"].as_array().unwrap().clone();
    }
    let data = r.sse_data();
    let mut block = data
        .iter()
        .find(|d| d["type"] == "content_block_start")
        .unwrap()["content_block"]
        .clone();
    let mut text = String::new();
    let mut json_s = String::new();
    for d in data.iter().filter(|d| d["type"] == "content_block_delta") {
        text.push_str(d["delta"]["text"].as_str().unwrap_or(""));
        json_s.push_str(d["delta"]["partial_json"].as_str().unwrap_or(""));
    }
    if block["type"] == "tool_use" {
        block["input"] = serde_json::from_str(&json_s).unwrap();
    } else {
        block["text"] = json!(text);
    }
    vec![block]
}

#[tokio::test]
async fn anthropic_runs_the_script() {
    for stream in [false, true] {
        // Claude Code's shape: the prompt after a reminder block, results
        // followed by text in the same user turn.
        let mut msgs = json!([{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]}]);
        for (want, args, result) in [
            ("Bash", json!({"command": "ls /tmp/x"}), json!(LS)),
            (
                "Read",
                json!({"file_path": "/tmp/x/notes.txt"}),
                json!([{"type": "text", "text": NOTES}]),
            ),
        ] {
            let content = anthropic_content(&messages(&msgs, stream).await, stream);
            let tu = &content[0];
            assert_eq!(
                (tu["type"].as_str(), tu["name"].as_str()),
                (Some("tool_use"), Some(want))
            );
            assert_eq!(tu["input"], args);
            let a = msgs.as_array_mut().unwrap();
            a.push(json!({"role": "assistant", "content": [tu]}));
            a.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tu["id"], "content": result},
                {"type": "text", "text": "<system-reminder>later</system-reminder>"}]}));
        }
        let content = anthropic_content(&messages(&msgs, stream).await, stream);
        assert_eq!(content[0]["text"], FINAL);
    }
}

// ---- Gemini ----

fn gemini_tools() -> Value {
    json!([{"functionDeclarations": [
        {"name": "Bash", "description": "run", "parametersJsonSchema": schema()},
        {"name": "Read", "description": "read", "parametersJsonSchema": schema()}]}])
}

async fn gemini(contents: &Value, stream: bool) -> Resp {
    let body = json!({"contents": contents, "tools": gemini_tools()});
    let path = if stream {
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    } else {
        "/v1beta/models/gemini-2.5-flash:generateContent"
    };
    call(
        &app(),
        "POST",
        path,
        &[("x-goog-api-key", "mock-gemini-key-1")],
        &body.to_string(),
    )
    .await
}

/// The parts of the answer (streamed text joined into one part).
fn gemini_parts(r: &Resp, stream: bool) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        return r.json()["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .clone();
    }
    let data: Vec<Value> = r
        .text()
        .split("\r\n\r\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let parts: Vec<Value> = data
        .iter()
        .flat_map(|d| {
            d["candidates"][0]["content"]["parts"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    if parts[0].get("text").is_some() {
        let t: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        return vec![json!({"text": t})];
    }
    parts
}

#[tokio::test]
async fn gemini_runs_the_script() {
    for stream in [false, true] {
        let mut contents = json!([{"role": "user", "parts": [{"text": PROMPT}]}]);
        for (want, args, result) in [
            (
                "Bash",
                json!({"command": "ls /tmp/x"}),
                json!({"output": LS}),
            ),
            (
                "Read",
                json!({"file_path": "/tmp/x/notes.txt"}),
                json!({"content": NOTES}),
            ),
        ] {
            let parts = gemini_parts(&gemini(&contents, stream).await, stream);
            let fc = &parts[0]["functionCall"];
            assert_eq!((fc["name"].as_str(), &fc["args"]), (Some(want), &args));
            let a = contents.as_array_mut().unwrap();
            a.push(json!({"role": "model", "parts": [{"functionCall": fc}]}));
            a.push(json!({"role": "user", "parts": [{"functionResponse": {"name": want, "response": result}}]}));
        }
        let parts = gemini_parts(&gemini(&contents, stream).await, stream);
        assert_eq!(parts[0]["text"], FINAL);
    }
}

// ---- Bedrock ----

fn bedrock_tools() -> Value {
    json!({"tools": [
        {"toolSpec": {"name": "Bash", "description": "run", "inputSchema": {"json": schema()}}},
        {"toolSpec": {"name": "Read", "description": "read", "inputSchema": {"json": schema()}}}]})
}

/// The content blocks of a Converse answer, rebuilt from the event stream
/// when streaming.
fn bedrock_content(r: &Resp, stream: bool) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    if !stream {
        return r.json()["output"]["message"]["content"]
            .as_array()
            .unwrap()
            .clone();
    }
    let mut buf: &[u8] = &r.body;
    let (mut tool, mut text, mut input) = (None::<Value>, String::new(), String::new());
    while !buf.is_empty() {
        let (h, payload, used) = decode(buf);
        buf = &buf[used..];
        let ty = h
            .iter()
            .find(|(k, _)| k == ":event-type")
            .unwrap()
            .1
            .clone();
        let v: Value = serde_json::from_slice(&payload).unwrap();
        match ty.as_str() {
            "contentBlockStart" => tool = Some(v["start"]["toolUse"].clone()),
            "contentBlockDelta" => {
                text.push_str(v["delta"]["text"].as_str().unwrap_or(""));
                input.push_str(v["delta"]["toolUse"]["input"].as_str().unwrap_or(""));
            }
            _ => {}
        }
    }
    match tool {
        Some(mut t) => {
            t["input"] = serde_json::from_str(&input).unwrap();
            vec![json!({"toolUse": t})]
        }
        None => vec![json!({"text": text})],
    }
}

#[tokio::test]
async fn bedrock_runs_the_script() {
    let app = app();
    for (op, stream) in [("converse", false), ("converse-stream", true)] {
        let mut msgs = json!([{"role": "user", "content": [{"text": PROMPT}]}]);
        for (want, args, result) in [
            (
                "Bash",
                json!({"command": "ls /tmp/x"}),
                json!([{"text": LS}]),
            ),
            (
                "Read",
                json!({"file_path": "/tmp/x/notes.txt"}),
                json!([{"json": {"content": NOTES}}]),
            ),
        ] {
            let body = json!({"messages": msgs, "toolConfig": bedrock_tools()}).to_string();
            let content = bedrock_content(
                &bedrock(&app, op, &body, "mock-bedrock-secret-1").await,
                stream,
            );
            let tu = &content[0]["toolUse"];
            assert_eq!((tu["name"].as_str(), &tu["input"]), (Some(want), &args));
            let a = msgs.as_array_mut().unwrap();
            a.push(json!({"role": "assistant", "content": [{"toolUse": tu}]}));
            a.push(json!({"role": "user", "content": [{"toolResult": {"toolUseId": tu["toolUseId"], "content": result}}]}));
        }
        let body = json!({"messages": msgs, "toolConfig": bedrock_tools()}).to_string();
        let content = bedrock_content(
            &bedrock(&app, op, &body, "mock-bedrock-secret-1").await,
            stream,
        );
        assert_eq!(content[0]["text"], FINAL);
    }
}
