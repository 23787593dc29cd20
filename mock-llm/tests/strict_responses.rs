#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! The Responses API's members, one row per rule: the request, the status,
//! and the `param`, `code` and words of OpenAI's answer. Rules:
//! openai-python's `types/responses` and notes/openai.md (what Codex
//! sends, how the API refuses).

use crate::common::*;
use serde_json::{json, Value};

fn req(extra: Value) -> Value {
    let mut v = json!({"model": "gpt-4o-mini", "input": "hi"});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn input(items: Value) -> Value {
    req(
        json!({"input": items, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": false}]}),
    )
}

/// (rule, request, status, param, code, words)
type Row = (
    &'static str,
    Value,
    u16,
    &'static str,
    &'static str,
    &'static str,
);

fn rows() -> Vec<Row> {
    let user = json!({"role": "user", "content": "hi"});
    vec![
        (
            "unknown parameter",
            req(json!({"parent_id": "x"})),
            400,
            "parent_id",
            "unknown_parameter",
            "Unknown parameter: 'parent_id'.",
        ),
        (
            "a Chat Completions parameter",
            req(json!({"messages": []})),
            400,
            "messages",
            "unknown_parameter",
            "Unknown parameter: 'messages'.",
        ),
        (
            "unknown message member",
            input(json!([{"role": "user", "content": "hi", "name": "u"}])),
            400,
            "input[0].name",
            "unknown_parameter",
            "Unknown parameter: 'input[0].name'.",
        ),
        (
            "unknown content part member",
            input(
                json!([{"role": "user", "content": [{"type": "input_text", "text": "hi", "cache_control": {}}]}]),
            ),
            400,
            "input[0].content[0].cache_control",
            "unknown_parameter",
            "Unknown parameter: 'input[0].content[0].cache_control'.",
        ),
        (
            "unknown function_call member",
            input(
                json!([user, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "thought": "x"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"}]),
            ),
            400,
            "input[1].thought",
            "unknown_parameter",
            "Unknown parameter: 'input[1].thought'.",
        ),
        (
            "function_call_output.output required",
            input(
                json!([user, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1"}]),
            ),
            400,
            "input[2].output",
            "missing_required_parameter",
            "Missing required parameter: 'input[2].output'.",
        ),
        (
            "an unknown item type",
            input(json!([{"type": "tool_result", "content": "x"}])),
            400,
            "input[0].type",
            "invalid_value",
            "Invalid value: 'tool_result'.",
        ),
        (
            "unknown function tool member",
            req(json!({"tools": [{"type": "function", "name": "f", "input_schema": {}}]})),
            400,
            "tools[0].input_schema",
            "unknown_parameter",
            "Unknown parameter: 'tools[0].input_schema'.",
        ),
        (
            "a Chat Completions-shaped tool",
            req(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
            400,
            "tools[0].function",
            "unknown_parameter",
            "Unknown parameter: 'tools[0].function'.",
        ),
        (
            "unknown namespaced tool member",
            req(
                json!({"tools": [{"type": "namespace", "name": "mcp__m__", "description": "d",
            "tools": [{"type": "function", "name": "f", "parameters": {}, "annotations": {}}]}]}),
            ),
            400,
            "tools[0].tools[0].annotations",
            "unknown_parameter",
            "Unknown parameter: 'tools[0].tools[0].annotations'.",
        ),
        (
            "custom tool grammar syntax",
            req(
                json!({"tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}}]}),
            ),
            400,
            "tools[0].format.syntax",
            "invalid_value",
            "Invalid value: 'ebnf'.",
        ),
        (
            "unknown reasoning member",
            req(json!({"reasoning": {"effort": "low", "budget_tokens": 100}})),
            400,
            "reasoning.budget_tokens",
            "unknown_parameter",
            "Unknown parameter: 'reasoning.budget_tokens'.",
        ),
        (
            "unknown text member",
            req(json!({"text": {"schema": {}}})),
            400,
            "text.schema",
            "unknown_parameter",
            "Unknown parameter: 'text.schema'.",
        ),
        (
            "include values",
            req(json!({"include": ["reasoning.summary"]})),
            400,
            "include[0]",
            "invalid_value",
            "Invalid value: 'reasoning.summary'.",
        ),
        (
            "service_tier enum",
            req(json!({"service_tier": "turbo"})),
            400,
            "service_tier",
            "invalid_value",
            "Invalid value: 'turbo'.",
        ),
        (
            "max_output_tokens above gpt-4o-mini's limit",
            req(json!({"max_output_tokens": 16385})),
            400,
            "max_output_tokens",
            "invalid_value",
            "max_output_tokens is too large: 16385.",
        ),
        // What the API accepts, Codex's requests among it.
        (
            "Codex's request",
            json!({
            "model": "gpt-4o-mini", "instructions": "You are Codex.", "stream": true, "store": false,
            "tool_choice": "auto", "parallel_tool_calls": false, "reasoning": null, "include": [],
            "prompt_cache_key": "019a-thread", "client_metadata": {"session_id": "s", "x-codex-turn-metadata": "{}"},
            "text": {"verbosity": "low"},
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
                {"type": "reasoning", "summary": [], "encrypted_content": "e"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "looking"}], "phase": "commentary"},
                {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
                {"type": "function_call", "call_id": "c2", "name": "read", "namespace": "mcp__files__", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "x"}]},
                {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done"},
                {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}],
            "tools": [
                {"type": "function", "name": "exec_command", "description": "run", "strict": false,
                 "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"], "additionalProperties": false}},
                {"type": "namespace", "name": "mcp__files__", "description": "Tools in the mcp__files__ namespace.",
                 "tools": [{"type": "function", "name": "read", "strict": false, "defer_loading": true, "parameters": {"type": "object", "properties": {}}}]},
                {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "web_search", "external_web_access": false},
                {"type": "image_generation", "output_format": "png"}]}),
            200,
            "",
            "",
            "",
        ),
        (
            "reasoning as Codex sends it to a reasoning model",
            json!({"model": "o4-mini", "input": "hi",
            "reasoning": {"effort": "max", "summary": "auto"}, "include": ["reasoning.encrypted_content"]}),
            200,
            "",
            "",
            "",
        ),
    ]
}

#[tokio::test]
async fn each_rule_answers_as_openai_does() {
    let app = app();
    for (rule, body, status, param, code, says) in rows() {
        let r = call(&app, "POST", "/v1/responses", &[OA], &body.to_string()).await;
        assert_eq!(r.status, status, "{rule}: {}", r.text());
        if status == 200 {
            continue;
        }
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{rule}");
        assert_eq!(e["param"], param, "{rule}: {e}");
        assert_eq!(e["code"], code, "{rule}: {e}");
        assert!(e["message"].as_str().unwrap().contains(says), "{rule}: {e}");
    }
}
