//! Anthropic Messages API: `POST /v1/messages`, non-stream and stream.
//!
//! Rules follow Anthropic's API reference: `x-api-key` (or the same key as
//! `Authorization: Bearer`, as the official SDK 2.x sends it) and
//! `anthropic-version` headers required; `model`, `max_tokens` and `messages` required; roles
//! only `user`/`assistant` (a `system` role is refused: system prompts go in
//! the top-level `system`; with the `mid-conversation-system-*` beta a
//! text-only `system` message may sit between later turns); the first message is `user` and roles alternate
//! (stricter than today's API, which merges consecutive same-role turns: a
//! gateway should not rely on that); every `tool_result` answers a `tool_use`
//! of the previous assistant message, and every `tool_use` is answered in the
//! next message. Errors: `{"type":"error","error":{"type","message"},
//! "request_id"}` with the documented status per error type.

use crate::core::ctx::{unknown_key_id, AuthFail, Ctx, ErrKind, KeyRt};
use crate::core::http::json_response;
use crate::core::plan::{plan, GenInput, Output};
use crate::core::reply::Reply;
use crate::core::script::Script;
use crate::core::{http, render, text};
use serde_json::{json, Value};

type Outcome = (Reply, Option<String>);

/// `anthropic-version` values are dates (`2023-06-01`, and later ones that
/// newer SDKs send); anything not shaped `YYYY-MM-DD` from 2023 on is refused.
fn valid_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && v >= "2023-01-01"
        && (1..=12).contains(&v[5..7].parse::<u8>().unwrap_or(0))
        && (1..=31).contains(&v[8..10].parse::<u8>().unwrap_or(0))
}

pub fn authenticate<'a>(ctx: &Ctx<'a>) -> Result<&'a KeyRt, AuthFail> {
    // `x-api-key` is the documented header; official SDKs 2.x send the same
    // API key as `Authorization: Bearer`, which the API accepts too.
    let bearer = ctx
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(key) = ctx.header("x-api-key").or(bearer).filter(|k| !k.is_empty()) else {
        return Err((
            err(
                ctx,
                401,
                "authentication_error",
                "x-api-key header is required",
            ),
            None,
        ));
    };
    match ctx.provider.key_by_secret(key) {
        Some(k) => Ok(k),
        None => Err((
            err(ctx, 401, "authentication_error", "invalid x-api-key"),
            Some(unknown_key_id(key)),
        )),
    }
}

/// The Anthropic error document.
pub fn err(ctx: &Ctx<'_>, status: u16, ty: &str, message: &str) -> Reply {
    err_h(ctx, status, ty, message, &[])
}

fn err_h(
    ctx: &Ctx<'_>,
    status: u16,
    ty: &str,
    message: &str,
    extra: &[(&'static str, String)],
) -> Reply {
    let rid = format!("req_{}", ctx.request_id);
    let v = json!({"type": "error", "error": {"type": ty, "message": message}, "request_id": rid});
    let mut h: Vec<(&'static str, String)> = vec![("request-id", rid)];
    h.extend_from_slice(extra);
    json_response(status, v.to_string(), &h)
}

pub fn error_for(ctx: &Ctx<'_>, k: ErrKind, _detail: &str) -> Reply {
    match k {
        ErrKind::MissingKey => err(
            ctx,
            401,
            "authentication_error",
            "x-api-key header is required",
        ),
        ErrKind::BadKey => err(ctx, 401, "authentication_error", "invalid x-api-key"),
        ErrKind::RateLimited => {
            let retry = ctx.retry_after_s().to_string();
            err_h(
                ctx,
                429,
                "rate_limit_error",
                "Number of requests has exceeded your per-minute rate limit",
                &[("retry-after", retry)],
            )
        }
        ErrKind::Internal => err(ctx, 500, "api_error", "Internal server error"),
        ErrKind::Unavailable => err(ctx, 503, "api_error", "Service unavailable"),
        ErrKind::Overloaded => err(ctx, 529, "overloaded_error", "Overloaded"),
        ErrKind::MethodNotAllowed => err(ctx, 405, "invalid_request_error", "Method not allowed"),
    }
}

fn bad(ctx: &Ctx<'_>, msg: &str) -> Reply {
    err(ctx, 400, "invalid_request_error", msg)
}

/// Collect the text of a `content` value (string or blocks) for counting.
fn block_text(b: &Value, out: &mut String) {
    if let Some(t) = b.get("text").and_then(Value::as_str) {
        out.push_str(t);
    }
    if let Some(i) = b.get("input") {
        out.push_str(&i.to_string());
    }
    if let Some(c) = b.get("content") {
        match c {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|x| block_text(x, out)),
            _ => {}
        }
    }
}

/// Top-level request fields of the Messages API; anything else is refused
/// ("Extra inputs are not permitted"), which catches OpenAI-only fields
/// (`n`, `response_format`, `stream_options`, …) forwarded by mistake.
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_format",
    "output_config",
    "inference_geo",
];

const IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// An image block's `source`: base64 with a supported media type, or a URL.
fn image_source_error(b: &Value) -> Option<String> {
    let src = b.get("source")?;
    match src.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let mt = src.get("media_type").and_then(Value::as_str).unwrap_or("");
            if !IMAGE_TYPES.contains(&mt) {
                return Some(format!("source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp' (got '{mt}')"));
            }
            if src.get("data").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Some("source.data: Field required".to_string());
            }
            None
        }
        Some("url") => src
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
            .map_or(Some("source.url: Field required".to_string()), |_| None),
        Some("file") => None,
        _ => Some("source.type: Input tag found using 'type' does not match any of the expected tags: 'base64', 'url', 'file'".to_string()),
    }
}

const BLOCK_TYPES: &[&str] = &[
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "search_result",
    "server_tool_use",
    "web_search_tool_result",
];

/// Request fields of `POST /v1/messages/count_tokens`.
const COUNT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
    "output_format",
    "output_config",
];

/// `POST /v1/messages`.
pub async fn messages(ctx: &Ctx<'_>) -> Outcome {
    messages_or_count(ctx, false).await
}

/// `POST /v1/messages/count_tokens`: the same checks as a message (without
/// `max_tokens` or sampling fields) and `{"input_tokens": N}`, N being the
/// `usage.input_tokens` the same request would get from `/v1/messages`.
pub async fn count_tokens(ctx: &Ctx<'_>) -> Outcome {
    messages_or_count(ctx, true).await
}

async fn messages_or_count(ctx: &Ctx<'_>, count: bool) -> Outcome {
    match ctx.header("anthropic-version") {
        None => return (bad(ctx, "anthropic-version: header is required"), None),
        Some(v) if !valid_version(v) => {
            return (
                bad(ctx, &format!("anthropic-version: invalid version: {v}")),
                None,
            )
        }
        _ => {}
    }
    let req: Value = match serde_json::from_slice::<Value>(ctx.body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return (bad(ctx, "body: Input should be an object"), None),
        Err(e) => {
            return (
                bad(
                    ctx,
                    &format!(
                        "There was an error parsing the body of your request: {}",
                        http::json_err(&e)
                    ),
                ),
                None,
            )
        }
    };
    let model = match req.get("model") {
        Some(Value::String(m)) => m.clone(),
        None => return (bad(ctx, "model: Field required"), None),
        Some(_) => return (bad(ctx, "model: Input should be a valid string"), None),
    };
    let m = Some(model.clone());
    let max_tokens = match req.get("max_tokens") {
        None if count => 0,
        Some(_) if count => return (bad(ctx, "max_tokens: Extra inputs are not permitted"), m),
        None => return (bad(ctx, "max_tokens: Field required"), m),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => n,
            _ => {
                return (
                    bad(
                        ctx,
                        "max_tokens: Input should be greater than or equal to 1",
                    ),
                    m,
                )
            }
        },
    };
    let msgs = match req.get("messages") {
        None => return (bad(ctx, "messages: Field required"), m),
        Some(Value::Array(a)) => a,
        Some(_) => return (bad(ctx, "messages: Input should be a valid list"), m),
    };
    if !ctx.provider.has_model(&model) {
        return (
            err(ctx, 404, "not_found_error", &format!("model: {model}")),
            m,
        );
    }
    if msgs.is_empty() {
        return (bad(ctx, "messages: at least one message is required"), m);
    }
    let fields = if count { COUNT_FIELDS } else { REQUEST_FIELDS };
    if let Some(k) = req
        .as_object()
        .and_then(|o| o.keys().find(|k| !fields.contains(&k.as_str())))
    {
        return (bad(ctx, &format!("{k}: Extra inputs are not permitted")), m);
    }
    if let Some(limit) = ctx.provider.output_limit(&model) {
        if max_tokens > limit {
            return (
                bad(ctx, &format!("max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of output tokens for {model}")),
                m,
            );
        }
    }
    for (p, hi) in [("temperature", 1.0), ("top_p", 1.0)] {
        if !http::in_range(req.get(p), 0.0, hi) {
            return (bad(ctx, &format!("{p}: range: 0..{hi}")), m);
        }
    }
    if !req
        .get("top_k")
        .is_none_or(|v| v.is_null() || v.as_u64().is_some())
    {
        return (
            bad(
                ctx,
                "top_k: Input should be a valid integer greater than or equal to 0",
            ),
            m,
        );
    }
    if let Some(s) = req.get("stop_sequences").filter(|v| !v.is_null()) {
        if !s.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            return (
                bad(
                    ctx,
                    "stop_sequences: Input should be a valid list of strings",
                ),
                m,
            );
        }
    }
    let stream = match req.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return (bad(ctx, "stream: Input should be a valid boolean"), m),
    };
    let mut prompt = String::new();
    match req.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => prompt.push_str(s),
        Some(Value::Array(a)) => {
            for (j, b) in a.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return (
                        bad(ctx, &format!("system.{j}.type: Input should be 'text'")),
                        m,
                    );
                }
                block_text(b, &mut prompt);
            }
        }
        Some(_) => {
            return (
                bad(
                    ctx,
                    "system: Input should be a valid string or a list of text blocks",
                ),
                m,
            )
        }
    }
    let mut echo = String::new();
    let mut prev_role = "";
    let mut prev_tool_uses: Vec<String> = Vec::new();
    let mut script = Script::default();
    // The mid-conversation-system beta (Claude Code sends it) lets a
    // `system` message sit between turns after the first.
    let mid_system = ctx.header("anthropic-beta").is_some_and(|b| {
        b.split(',')
            .any(|t| t.trim().starts_with("mid-conversation-system-"))
    });
    for (i, msg) in msgs.iter().enumerate() {
        if mid_system && i > 0 && msg.get("role").and_then(Value::as_str) == Some("system") {
            let mut t = String::new();
            match msg.get("content") {
                Some(Value::String(s)) => t.push_str(s),
                Some(Value::Array(blocks))
                    if blocks
                        .iter()
                        .all(|b| b.get("type").and_then(Value::as_str) == Some("text")) =>
                {
                    for b in blocks {
                        block_text(b, &mut t);
                    }
                }
                _ => {
                    return (
                        bad(
                            ctx,
                            &format!("messages.{i}.content: a system message holds text only"),
                        ),
                        m,
                    )
                }
            }
            prompt.push_str(&t);
            continue;
        }
        let role = match msg.get("role") {
            Some(Value::String(r)) => r.as_str(),
            None => return (bad(ctx, &format!("messages.{i}.role: Field required")), m),
            Some(_) => {
                return (
                    bad(
                        ctx,
                        &format!("messages.{i}.role: Input should be 'user' or 'assistant'"),
                    ),
                    m,
                )
            }
        };
        if role == "system" {
            return (
                bad(ctx, "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role."),
                m,
            );
        }
        if role != "user" && role != "assistant" {
            return (
                bad(
                    ctx,
                    &format!("messages.{i}.role: Input should be 'user' or 'assistant'"),
                ),
                m,
            );
        }
        if i == 0 && role != "user" {
            return (
                bad(ctx, "messages: first message must use the \"user\" role"),
                m,
            );
        }
        if role == prev_role {
            return (
                bad(ctx, &format!("messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"{role}\" roles in a row")),
                m,
            );
        }
        let mut t = String::new();
        let mut tool_uses: Vec<String> = Vec::new();
        let mut answered: Vec<String> = Vec::new();
        match msg.get("content") {
            None => return (bad(ctx, &format!("messages.{i}.content: Field required")), m),
            Some(Value::String(s)) => {
                if s.is_empty() && i + 1 < msgs.len() {
                    return (bad(ctx, "messages: text content blocks must be non-empty"), m);
                }
                if role == "user" {
                    script.user_text(s);
                }
                t.push_str(s)
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() && i + 1 < msgs.len() {
                    return (bad(ctx, &format!("messages.{i}: all messages must have non-empty content except for the optional final assistant message")), m);
                }
                for (j, b) in blocks.iter().enumerate() {
                    let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
                    if !BLOCK_TYPES.contains(&ty) {
                        return (bad(ctx, &format!("messages.{i}.content.{j}.type: Input tag '{ty}' found using 'type' does not match any of the expected tags")), m);
                    }
                    match ty {
                        "text" if b.get("text").and_then(Value::as_str).is_none() => {
                            return (bad(ctx, &format!("messages.{i}.content.{j}.text: Field required")), m);
                        }
                        "text" if b.get("text").and_then(Value::as_str) == Some("") => {
                            return (bad(ctx, "messages: text content blocks must be non-empty"), m);
                        }
                        "image" if b.get("source").is_none() => {
                            return (bad(ctx, &format!("messages.{i}.content.{j}.image.source: Field required")), m);
                        }
                        "image" => {
                            if let Some(e) = image_source_error(b) {
                                return (bad(ctx, &format!("messages.{i}.content.{j}.image.{e}")), m);
                            }
                        }
                        "tool_use" => {
                            if role != "assistant" {
                                return (bad(ctx, &format!("messages.{i}.content.{j}: tool_use blocks can only be in assistant messages")), m);
                            }
                            let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                            if id.is_empty() || b.get("name").and_then(Value::as_str).is_none() || !b.get("input").is_some_and(Value::is_object) {
                                return (bad(ctx, &format!("messages.{i}.content.{j}.tool_use: id, name and object input are required")), m);
                            }
                            tool_uses.push(id.to_string());
                        }
                        "tool_result" => {
                            if role != "user" {
                                return (bad(ctx, &format!("messages.{i}.content.{j}: tool_result blocks can only be in user messages")), m);
                            }
                            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                            if !prev_tool_uses.iter().any(|u| u == id) {
                                return (
                                    bad(ctx, &format!("messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")),
                                    m,
                                );
                            }
                            answered.push(id.to_string());
                            if script.active() {
                                let mut r = String::new();
                                if let Some(c) = b.get("content") {
                                    block_text(&json!({"content": c}), &mut r);
                                }
                                script.tool_result(r);
                            }
                        }
                        "text" if role == "user" => {
                            script.user_text(b.get("text").and_then(Value::as_str).unwrap_or(""));
                        }
                        _ => {}
                    }
                    block_text(b, &mut t);
                }
            }
            Some(_) => return (bad(ctx, &format!("messages.{i}.content: Input should be a valid string or list of content blocks")), m),
        }
        let missing: Vec<&String> = prev_tool_uses
            .iter()
            .filter(|u| !answered.contains(u))
            .collect();
        if !missing.is_empty() {
            let ids: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
            return (
                bad(ctx, &format!("messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i - 1, ids.join(", "))),
                m,
            );
        }
        if role == "user" {
            echo = t.clone();
        }
        prompt.push_str(&t);
        prev_tool_uses = tool_uses;
        prev_role = if role == "user" { "user" } else { "assistant" };
    }
    // Tools.
    let mut tools: Vec<(String, &Value)> = Vec::new();
    if let Some(ts) = req.get("tools").filter(|v| !v.is_null()) {
        let Some(arr) = ts.as_array() else {
            return (bad(ctx, "tools: Input should be a valid list"), m);
        };
        for (i, t) in arr.iter().enumerate() {
            let Some(name) = t.get("name").and_then(Value::as_str) else {
                return (bad(ctx, &format!("tools.{i}.name: Field required")), m);
            };
            match t.get("type").and_then(Value::as_str) {
                None | Some("custom") => {}
                Some(ty) => match server_tool_name(ty) {
                    // Anthropic's own tools: the type fixes the name; no
                    // schema (the service knows it). Not offered as a
                    // callable tool of the mock's answers.
                    Some(fixed) if fixed == name => continue,
                    Some(fixed) => {
                        return (
                            bad(ctx, &format!("tools.{i}.{ty}.name: Input should be '{fixed}'")),
                            m,
                        )
                    }
                    None => {
                        return (
                            bad(ctx, &format!("tools.{i}: Input tag '{ty}' found using 'type' does not match any of the expected tags")),
                            m,
                        )
                    }
                },
            }
            let Some(schema) = t.get("input_schema").filter(|s| s.is_object()) else {
                return (
                    bad(
                        ctx,
                        &format!("tools.{i}.custom.input_schema: Field required"),
                    ),
                    m,
                );
            };
            tools.push((name.to_string(), schema));
        }
    }
    let (mut forced, mut any) = (None, false);
    if let Some(tc) = req.get("tool_choice").filter(|v| !v.is_null()) {
        match tc.get("type").and_then(Value::as_str) {
            Some("auto") | Some("none") => {}
            Some("any") => {
                if tools.is_empty() {
                    return (
                        bad(ctx, "tool_choice: `tool_choice` requires `tools` to be set"),
                        m,
                    );
                }
                any = true;
            }
            Some("tool") => {
                let n = tc.get("name").and_then(Value::as_str).unwrap_or("");
                if !tools.iter().any(|t| t.0 == n) {
                    return (
                        bad(ctx, &format!("tool_choice: tool '{n}' not found in tools")),
                        m,
                    );
                }
                forced = Some(n.to_string());
            }
            _ => {
                return (
                    bad(
                        ctx,
                        "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                    ),
                    m,
                )
            }
        }
    }
    if count {
        let n = text::tokens_for_chars(prompt.chars().count());
        let hdrs = [("request-id", format!("req_{}", ctx.request_id))];
        return (ctx.json_ok(&json!({"input_tokens": n}), &hdrs).await, m);
    }
    let g = GenInput {
        echo,
        prompt_chars: prompt.chars().count(),
        tools,
        forced_tool: forced,
        any_tool: any,
        max_tokens: Some(max_tokens),
        tool_id_prefix: "toolu_",
        script,
    };
    let p = match plan(ctx, g) {
        Ok(p) => p,
        Err(e) => return (bad(ctx, &e), m),
    };
    let id = format!("msg_{}", ctx.request_id);
    let stop = if p.is_tool() {
        "tool_use"
    } else if p.truncated {
        "max_tokens"
    } else {
        "end_turn"
    };
    let hdrs = [("request-id", format!("req_{}", ctx.request_id))];
    if !stream {
        let content = match &p.output {
            Output::Text(t) => json!([{"type": "text", "text": t}]),
            Output::Tool { id, name, args } => {
                json!([{"type": "tool_use", "id": id, "name": name, "input": args}])
            }
        };
        let v = json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": p.prompt_tokens, "output_tokens": p.completion_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        });
        return (ctx.json_ok(&v, &hdrs).await, m);
    }
    let start = render::sse_event(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {"id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": p.prompt_tokens, "output_tokens": 1,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}},
        }),
    );
    let (start_block, content, delta) = match p.output {
        Output::Text(t) => (
            json!({"type": "text", "text": ""}),
            t,
            json!({"type": "text_delta", "text": render::PIECE}),
        ),
        Output::Tool { id, name, args } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            args.to_string(),
            json!({"type": "input_json_delta", "partial_json": render::PIECE}),
        ),
    };
    let head = vec![
        start,
        render::sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": start_block}),
        ),
        render::sse_event("ping", &json!({"type": "ping"})),
    ];
    let tpl = render::Template::new(&render::sse_event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
    ));
    let tail = vec![
        render::sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        render::sse_event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": p.completion_tokens},
            }),
        ),
        render::sse_event("message_stop", &json!({"type": "message_stop"})),
    ];
    (
        ctx.stream(
            "text/event-stream; charset=utf-8",
            head,
            content,
            Box::new(move |_, piece, _| tpl.render(piece)),
            tail,
            &hdrs,
            render::sse_event("error", &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ),
        m,
    )
}

/// The fixed name of an Anthropic-defined tool type of the stable API
/// (anthropic-sdk-python `ToolUnionParam`): server tools (web search, web
/// fetch, code execution, tool search) and the client-executed bash and
/// text editor. Beta-only types (computer use, MCP toolsets) are not here.
fn server_tool_name(ty: &str) -> Option<&'static str> {
    const TOOLS: [(&str, &str); 17] = [
        ("web_search_20250305", "web_search"),
        ("web_search_20260209", "web_search"),
        ("web_search_20260318", "web_search"),
        ("web_fetch_20250910", "web_fetch"),
        ("web_fetch_20260209", "web_fetch"),
        ("web_fetch_20260309", "web_fetch"),
        ("web_fetch_20260318", "web_fetch"),
        ("code_execution_20250825", "code_execution"),
        ("code_execution_20260120", "code_execution"),
        ("bash_20250124", "bash"),
        ("text_editor_20250124", "str_replace_editor"),
        ("text_editor_20250429", "str_replace_based_edit_tool"),
        ("text_editor_20250728", "str_replace_based_edit_tool"),
        ("memory_20250818", "memory"),
        ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
        ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
        ("code_execution_20260521", "code_execution"),
    ];
    TOOLS.iter().find(|(t, _)| *t == ty).map(|(_, n)| *n)
}
