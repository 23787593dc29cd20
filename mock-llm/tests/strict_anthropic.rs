#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! The Messages API's types, one row per rule: the request, its beta
//! header, the status and the words of Anthropic's answer. Rules:
//! anthropic-sdk-python's param types (stable and beta) and the errors in
//! notes/anthropic.md.

use crate::common::*;
use serde_json::{json, Value};

const SONNET: &str = "claude-sonnet-4-5";
const OPUS5: &str = "claude-opus-5-5";

/// A request for `model` with one user turn plus `extra` members.
fn req(model: &str, extra: Value) -> Value {
    let mut v = json!({"model": model, "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// A conversation whose assistant turn holds `block`.
fn assistant_block(block: Value) -> Value {
    json!({"model": SONNET, "max_tokens": 1000, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": "more"}]})
}

struct Row {
    rule: &'static str,
    beta: &'static str,
    body: Value,
    status: u16,
    says: &'static str,
}

fn row(rule: &'static str, body: Value, status: u16, says: &'static str) -> Row {
    Row {
        rule,
        beta: "",
        body,
        status,
        says,
    }
}

fn with_beta(mut r: Row, beta: &'static str) -> Row {
    r.beta = beta;
    r
}

const CLEAR_THINKING: &str = r#"{"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}"#;

fn rows() -> Vec<Row> {
    let cm: Value = serde_json::from_str(CLEAR_THINKING).unwrap();
    vec![
        // Extra inputs at every level.
        row("unknown top-level member", req(SONNET, json!({"n": 1})), 400, "n: Extra inputs are not permitted"),
        row("unknown message member", json!({"model": SONNET, "max_tokens": 10, "messages": [{"role": "user", "content": "hi", "name": "u"}]}),
            400, "messages.0.name: Extra inputs are not permitted"),
        row("unknown text block member", json!({"model": SONNET, "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "id": "1"}]}]}),
            400, "messages.0.content.0.text.id: Extra inputs are not permitted"),
        row("cache_control on a thinking block", assistant_block(json!({"type": "thinking", "thinking": "t", "signature": "s", "cache_control": {"type": "ephemeral"}})),
            400, "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"),
        row("text on a tool_use block", json!({"model": SONNET, "max_tokens": 10, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}, "text": "x"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]}],
                "tools": [{"name": "f", "input_schema": {"type": "object"}}]}),
            400, "messages.1.content.0.tool_use.text: Extra inputs are not permitted"),
        row("thinking block signature required", assistant_block(json!({"type": "thinking", "thinking": "t"})),
            400, "messages.1.content.0.thinking.signature: Field required"),
        row("an OpenAI-style tool", req(SONNET, json!({"tools": [{"name": "f", "input_schema": {"type": "object"}, "parameters": {}}]})),
            400, "tools.0.custom.parameters: Extra inputs are not permitted"),
        row("custom tool input_schema required", req(SONNET, json!({"tools": [{"name": "f"}]})),
            400, "tools.0.custom.input_schema: Field required"),
        row("an Anthropic tool's fixed name", req(SONNET, json!({"tools": [{"type": "web_search_20250305", "name": "search"}]})),
            400, "tools.0.web_search_20250305.name: Input should be 'web_search'"),
        row("unknown member of an Anthropic tool", req(SONNET, json!({"tools": [{"type": "bash_20250124", "name": "bash", "command": "ls"}]})),
            400, "tools.0.bash_20250124.command: Extra inputs are not permitted"),
        row("an unknown tool type", req(SONNET, json!({"tools": [{"type": "web_search", "name": "web_search"}]})),
            400, "tools.0: Input tag 'web_search' found using 'type' does not match any of the expected tags"),
        row("a tool with every stable member", req(SONNET, json!({"tools": [
                {"type": "custom", "name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}},
                 "cache_control": {"type": "ephemeral", "ttl": "1h"}, "strict": true, "defer_loading": false,
                 "eager_input_streaming": true, "input_examples": [{}], "allowed_callers": ["direct"]},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3, "allowed_domains": ["a.b"],
                 "user_location": {"type": "approximate", "country": "FR"}},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 1000}]})),
            200, ""),
        row("unknown tool_choice member", req(SONNET, json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto", "parallel": false}})),
            400, "tool_choice.auto.parallel: Extra inputs are not permitted"),
        row("tool_choice none has no disable_parallel_tool_use", req(SONNET, json!({"tool_choice": {"type": "none", "disable_parallel_tool_use": true}})),
            400, "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted"),
        row("unknown image source member", json!({"model": SONNET, "max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://x/a.png", "detail": "low"}}]}]}),
            400, "messages.0.content.0.image.source.url.detail: Extra inputs are not permitted"),
        row("unknown metadata member", req(SONNET, json!({"metadata": {"session_id": "s"}})),
            400, "metadata.session_id: Extra inputs are not permitted"),
        row("metadata.user_id as Claude Code sends it", req(SONNET, json!({"metadata": {"user_id": "{\"device_id\":\"ab\",\"account_uuid\":\"\",\"session_id\":\"c\"}"}})),
            200, ""),
        row("unknown cache_control member", req(SONNET, json!({"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "scope": "global"}}]})),
            400, "system.0.cache_control.ephemeral.scope: Extra inputs are not permitted"),
        with_beta(row("cache_control scope with its beta", req(SONNET, json!({"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "scope": "global"}}]})),
            200, ""), "claude-code-20250219,prompt-caching-scope-2026-01-05"),
        row("top-level cache_control", req(SONNET, json!({"cache_control": {"type": "ephemeral"}})), 200, ""),
        row("cache_control ttl enum", req(SONNET, json!({"cache_control": {"type": "ephemeral", "ttl": "2h"}})),
            400, "cache_control.ephemeral.ttl: Input should be '5m' or '1h'"),
        // Beta-only members: extra inputs without their anthropic-beta header.
        row("context_management without its beta", req(OPUS5, json!({"thinking": {"type": "adaptive"}, "context_management": cm.clone()})),
            400, "context_management: Extra inputs are not permitted"),
        with_beta(row("context_management with its beta", req(OPUS5, json!({"thinking": {"type": "adaptive"}, "context_management": cm.clone()})), 200, ""),
            "context-management-2025-06-27"),
        with_beta(row("clear_thinking needs thinking on", req(OPUS5, json!({"context_management": cm})), 400,
            "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"), "context-management-2025-06-27"),
        row("mcp_servers without its beta", req(SONNET, json!({"mcp_servers": [{"type": "url", "name": "m", "url": "https://m"}]})),
            400, "mcp_servers: Extra inputs are not permitted"),
        row("output_format without its beta", req(SONNET, json!({"output_format": {"type": "json_schema", "schema": {"type": "object"}}})),
            400, "output_format: Extra inputs are not permitted"),
        with_beta(row("output_format with its beta", req(SONNET, json!({"output_format": {"type": "json_schema", "schema": {"type": "object"}}})), 200, ""),
            "structured-outputs-2025-11-13"),
        row("a beta tool without its beta", req(SONNET, json!({"tools": [{"type": "computer_20250124", "name": "computer", "display_width_px": 800, "display_height_px": 600}]})),
            400, "tools.0: Input tag 'computer_20250124' found using 'type' does not match any of the expected tags"),
        with_beta(row("a beta tool with its beta", req(SONNET, json!({"tools": [{"type": "computer_20250124", "name": "computer", "display_width_px": 800, "display_height_px": 600}]})), 200, ""),
            "computer-use-2025-01-24"),
        row("output_config.task_budget without its beta", req(SONNET, json!({"output_config": {"task_budget": {"type": "tokens", "total": 100}}})),
            400, "output_config.task_budget: Extra inputs are not permitted"),
        // thinking and output_config.
        row("thinking budget at least 1024", req(SONNET, json!({"thinking": {"type": "enabled", "budget_tokens": 512}})),
            400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"),
        row("thinking type tag", req(SONNET, json!({"thinking": {"type": "on"}})),
            400, "thinking: Input tag 'on' found using 'type' does not match any of the expected tags: 'enabled', 'disabled', 'between_tools', 'adaptive'"),
        row("thinking budget below max_tokens", req(SONNET, json!({"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2048})),
            400, "`max_tokens` must be greater than `thinking.budget_tokens`."),
        row("thinking with a budget", req(SONNET, json!({"thinking": {"type": "enabled", "budget_tokens": 2048, "display": "summarized"}, "max_tokens": 4096})), 200, ""),
        row("a budget on a model that thinks adaptively only", req(OPUS5, json!({"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096})),
            400, "\"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\" and \"output_config.effort\" to control thinking behavior."),
        row("adaptive thinking and effort", req(OPUS5, json!({"thinking": {"type": "adaptive", "display": "omitted"}, "output_config": {"effort": "xhigh"}})), 200, ""),
        row("output_config.effort enum", req(OPUS5, json!({"output_config": {"effort": "extreme"}})),
            400, "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"),
        row("output_config.format", req(SONNET, json!({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})), 200, ""),
        // Limits.
        row("max_tokens above Sonnet 4.5's limit", req(SONNET, json!({"max_tokens": 64001})),
            400, "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5"),
        row("max_tokens at Opus 5.5's limit", req(OPUS5, json!({"max_tokens": 128000})), 200, ""),
        row("max_tokens above Opus 5.5's limit", req(OPUS5, json!({"max_tokens": 128001})),
            400, "max_tokens: 128001 > 128000, which is the maximum allowed number of output tokens for claude-opus-5-5"),
        row("temperature and top_p together on Claude 4.5", req(SONNET, json!({"temperature": 0.5, "top_p": 0.9})),
            400, "`temperature` and `top_p` cannot both be specified for this model. Please use only one."),
        row("temperature range", req(SONNET, json!({"temperature": 1.5})), 400, "temperature: Input should be less than or equal to 1"),
        row("stop_sequences is a list", req(SONNET, json!({"stop_sequences": "END"})), 400, "stop_sequences: Input should be a valid list"),
        row("service_tier enum", req(SONNET, json!({"service_tier": "priority"})), 400, "service_tier: Input should be 'auto' or 'standard_only'"),
        // What Claude Code sends.
        with_beta(row("Claude Code's request", json!({
            "model": OPUS5, "max_tokens": 128000, "stream": true,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1"},
                       {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h", "scope": "global"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
            "tools": [{"name": "Read", "description": "read", "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false}, "cache_control": {"type": "ephemeral"}}],
            "metadata": {"user_id": "{\"device_id\":\"d\",\"account_uuid\":\"\",\"session_id\":\"s\"}"},
            "thinking": {"type": "adaptive"}, "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"}}), 200, ""),
            "claude-code-20250219,interleaved-thinking-2025-05-14,redact-thinking-2026-02-12,context-management-2025-06-27,prompt-caching-scope-2026-01-05,advisor-tool-2026-03-01,effort-2025-11-24"),
        row("a system message after the first turn", json!({"model": SONNET, "max_tokens": 10, "messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]}, {"role": "user", "content": "c"}]}), 200, ""),
        row("a beta block without its beta", assistant_block(json!({"type": "mcp_tool_use", "id": "m", "name": "x", "server_name": "s", "input": {}})),
            400, "messages.1.content.0: Input tag 'mcp_tool_use' found using 'type' does not match any of the expected tags"),
    ]
}

#[tokio::test]
async fn each_rule_answers_as_anthropic_does() {
    let app = app();
    for r in rows() {
        let mut h = vec![AK, AV];
        if !r.beta.is_empty() {
            h.push(("anthropic-beta", r.beta));
        }
        let resp = call(
            &app,
            "POST",
            "/v1/messages?beta=true",
            &h,
            &r.body.to_string(),
        )
        .await;
        assert_eq!(resp.status, r.status, "{}: {}", r.rule, resp.text());
        if r.status != 200 {
            let v = resp.json();
            assert_eq!(v["error"]["type"], "invalid_request_error", "{}", r.rule);
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains(r.says), "{}: {msg}", r.rule);
        }
    }
}

#[tokio::test]
async fn count_tokens_takes_its_own_members() {
    let app = app();
    let base = json!({"model": SONNET, "messages": [{"role": "user", "content": "hi"}]});
    for (extra, beta, status, says) in [
        (
            json!({"speed": "fast", "cache_control": {"type": "ephemeral"}}),
            "",
            200,
            "",
        ),
        (
            json!({"temperature": 0.5}),
            "",
            400,
            "temperature: Extra inputs are not permitted",
        ),
        (
            json!({"metadata": {"user_id": "u"}}),
            "",
            400,
            "metadata: Extra inputs are not permitted",
        ),
        (
            json!({"context_management": {"edits": []}}),
            "",
            400,
            "context_management: Extra inputs are not permitted",
        ),
        (
            json!({"context_management": {"edits": []}}),
            "context-management-2025-06-27",
            200,
            "",
        ),
    ] {
        let mut body = base.clone();
        for (k, x) in extra.as_object().unwrap() {
            body[k] = x.clone();
        }
        let mut h = vec![AK, AV];
        if !beta.is_empty() {
            h.push(("anthropic-beta", beta));
        }
        let r = call(
            &app,
            "POST",
            "/v1/messages/count_tokens",
            &h,
            &body.to_string(),
        )
        .await;
        assert_eq!(r.status, status, "{extra}: {}", r.text());
        if status != 200 {
            assert!(
                r.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(says),
                "{}",
                r.text()
            );
        }
    }
}
