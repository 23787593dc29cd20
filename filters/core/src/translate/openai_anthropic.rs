//! OpenAI chat completions → Anthropic Messages, and back (non-streaming
//! and SSE streaming).
//!
//! Request: system/developer messages are lifted into `system`; consecutive
//! same-role turns are merged (tool results become `tool_result` blocks in one
//! user turn, placed before any text as Anthropic requires); `max_tokens`
//! falls back to the model's configured default; `stop` → `stop_sequences`;
//! tools, `tool_choice`, `parallel_tool_calls`, images (data: URLs → base64
//! blocks, http(s) URLs → url blocks) and `user` are mapped. Parameters
//! Anthropic cannot honour (`n` > 1, penalties, logprobs, …) are refused
//! with a 400 naming them rather than dropped. `response_format`
//! `json_object` / `json_schema` is done by forcing one tool
//! ([`JSON_TOOL`]) whose input schema is the requested schema; its input is
//! returned as the message content (streamed as content deltas) with
//! `finish_reason: "stop"`. `seed` is accepted and ignored (it does not change the answer's
//! distribution).
//!
//! Response: content blocks → `message.content` / `tool_calls`,
//! `stop_reason` → `finish_reason`, usage with cache tokens counted in
//! `prompt_tokens` (OpenAI semantics) and reported as `cached_tokens`.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::{
    include_usage_flag, push_data, stream_flag, upstream_error, usage_json, Endpoint, RequestCtx,
    ResponseCtx, StreamTranslator, Translated, Translator, UpstreamRequest, Usage, DONE,
};
use crate::config::{Key, Kind, Provider};
use crate::error::{ApiError, INVALID_REQUEST};
use crate::sse::{Event, SseParser};

pub struct OpenAiAnthropic;

const PROVIDER: &str = "anthropic";

fn bad(param: &str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, msg)
}

fn unsupported(param: &str) -> ApiError {
    ApiError::unsupported_param(param, PROVIDER)
}

/// Text of a system/developer/tool message: a string or text parts.
fn text_of(content: &Value, at: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(t);
                    }
                    _ => {
                        return Err(bad(
                            &format!("{at}[{j}]"),
                            format!(
                            "Invalid content part at '{at}[{j}]': only text parts are allowed here"
                        ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(bad(
            at,
            format!("Invalid type for '{at}': expected a string or an array of content parts"),
        )),
    }
}

fn image_block(url: &str, at: &str) -> Result<Value, ApiError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((meta, data)) = rest.split_once(',') else {
            return Err(bad(at, format!("Invalid data URL in '{at}'")));
        };
        let Some(media) = meta.strip_suffix(";base64") else {
            return Err(bad(
                at,
                format!("Data URL in '{at}' must be base64-encoded"),
            ));
        };
        if !matches!(
            media,
            "image/jpeg" | "image/png" | "image/gif" | "image/webp"
        ) {
            return Err(bad(
                at,
                format!("Unsupported image type '{media}' in '{at}' (jpeg, png, gif, webp)"),
            ));
        }
        Ok(json!({"type":"image","source":{"type":"base64","media_type":media,"data":data}}))
    } else if url.starts_with("https://") || url.starts_with("http://") {
        Ok(json!({"type":"image","source":{"type":"url","url":url}}))
    } else {
        Err(bad(
            at,
            format!("Invalid image URL in '{at}': expected a data: or http(s) URL"),
        ))
    }
}

/// Content of a user or assistant message → Anthropic blocks.
fn content_blocks(content: &Value, at: &str, images: bool) -> Result<Vec<Value>, ApiError> {
    let mut blocks = Vec::new();
    match content {
        Value::Null => {}
        Value::String(s) => {
            if !s.is_empty() {
                blocks.push(json!({"type":"text","text":s}));
            }
        }
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                let pat = format!("{at}[{j}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => match p.get("text") {
                        Some(Value::String(t)) => {
                            if !t.is_empty() {
                                blocks.push(json!({"type":"text","text":t}));
                            }
                        }
                        _ => return Err(bad(&format!("{pat}.text"), format!("Invalid type for '{pat}.text': expected a string"))),
                    },
                    Some("refusal") if !images => {
                        if let Some(Value::String(t)) = p.get("refusal") {
                            if !t.is_empty() {
                                blocks.push(json!({"type":"text","text":t}));
                            }
                        }
                    }
                    Some("image_url") if images => {
                        let url = match p.get("image_url") {
                            Some(Value::String(u)) => u.as_str(),
                            Some(Value::Object(o)) => match o.get("url") {
                                Some(Value::String(u)) => u.as_str(),
                                _ => return Err(bad(&format!("{pat}.image_url.url"), format!("Missing '{pat}.image_url.url'"))),
                            },
                            _ => return Err(bad(&format!("{pat}.image_url"), format!("Missing '{pat}.image_url'"))),
                        };
                        blocks.push(image_block(url, &format!("{pat}.image_url.url"))?);
                    }
                    Some(other) => {
                        return Err(ApiError {
                            message: format!(
                                "Content part type '{other}' at '{pat}' is not supported by provider '{PROVIDER}'"
                            ),
                            ..unsupported(&format!("{pat}.type"))
                        })
                    }
                    None => return Err(bad(&format!("{pat}.type"), format!("Missing '{pat}.type'"))),
                }
            }
        }
        _ => {
            return Err(bad(
                at,
                format!("Invalid type for '{at}': expected a string or an array of content parts"),
            ))
        }
    }
    Ok(blocks)
}

fn tool_use_blocks(calls: &Value, at: &str) -> Result<Vec<Value>, ApiError> {
    let Value::Array(calls) = calls else {
        if calls.is_null() {
            return Ok(Vec::new());
        }
        return Err(bad(
            at,
            format!("Invalid type for '{at}': expected an array"),
        ));
    };
    let mut out = Vec::new();
    for (j, c) in calls.iter().enumerate() {
        let cat = format!("{at}[{j}]");
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(&format!("{cat}.id"), format!("Missing '{cat}.id'")))?;
        let f = c.get("function").ok_or_else(|| {
            bad(
                &format!("{cat}.function"),
                format!("Missing '{cat}.function'"),
            )
        })?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
            bad(
                &format!("{cat}.function.name"),
                format!("Missing '{cat}.function.name'"),
            )
        })?;
        let input = match f.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(Value::String(s)) if s.trim().is_empty() => json!({}),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(bad(
                        &format!("{cat}.function.arguments"),
                        format!(
                            "'{cat}.function.arguments' must be a JSON object encoded as a string"
                        ),
                    ))
                }
            },
            Some(_) => {
                return Err(bad(
                    &format!("{cat}.function.arguments"),
                    format!("Invalid type for '{cat}.function.arguments': expected a string"),
                ))
            }
        };
        out.push(json!({"type":"tool_use","id":id,"name":name,"input":input}));
    }
    Ok(out)
}

fn push_turn(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    if let Some((r, b)) = turns.last_mut() {
        if *r == role {
            b.extend(blocks);
            return;
        }
    }
    turns.push((role, blocks));
}

fn is_tool_result(b: &Value) -> bool {
    b.get("type").and_then(Value::as_str) == Some("tool_result")
}

fn number(body: &Map<String, Value>, name: &str) -> Result<Option<Value>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => Ok(Some(v.clone())),
        Some(_) => Err(bad(
            name,
            format!("Invalid type for '{name}': expected a number"),
        )),
    }
}

fn positive_int(body: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(bad(
                name,
                format!("Invalid value for '{name}': expected a positive integer"),
            )),
        },
    }
}

/// Name of the tool that carries JSON-mode answers (`response_format`).
pub const JSON_TOOL: &str = "json_response";

/// `response_format` → the JSON schema the answer must follow (JSON mode is
/// done by forcing a single tool with that input schema), or `None`.
fn json_mode_schema(rf: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(rf) = rf.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "object"}))),
        Some("json_schema") => {
            let schema = rf.get("json_schema").and_then(|j| j.get("schema"));
            match schema {
                Some(s @ Value::Object(o))
                    if o.get("type").and_then(Value::as_str) == Some("object") =>
                {
                    Ok(Some(s.clone()))
                }
                Some(Value::Object(_)) => Err(ApiError {
                    message: format!(
                        "Provider '{PROVIDER}' supports 'response_format.json_schema.schema' only with \"type\": \"object\" at the top"
                    ),
                    ..unsupported("response_format.json_schema.schema")
                }),
                _ => Err(bad(
                    "response_format.json_schema.schema",
                    "Missing 'response_format.json_schema.schema' (a JSON schema object)",
                )),
            }
        }
        _ => Err(bad(
            "response_format.type",
            "Invalid value for 'response_format.type': expected text, json_object or json_schema",
        )),
    }
}

fn translate_request(ctx: &RequestCtx<'_>, body: &Value) -> Result<Value, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid_json("expected an object"));
    };
    // Parameters: handled, harmless, or refused.
    for (k, v) in obj {
        match k.as_str() {
            "model"
            | "messages"
            | "stream"
            | "stream_options"
            | "max_tokens"
            | "max_completion_tokens"
            | "temperature"
            | "top_p"
            | "stop"
            | "tools"
            | "tool_choice"
            | "parallel_tool_calls"
            | "user"
            | "seed"
            | "store"
            | "service_tier"
            | "metadata"
            | "n"
            | "response_format" => {}
            "presence_penalty" | "frequency_penalty" => {
                if !(v.is_null() || v.as_f64() == Some(0.0)) {
                    return Err(unsupported(k));
                }
            }
            "logprobs" => {
                if !(v.is_null() || *v == Value::Bool(false)) {
                    return Err(unsupported(k));
                }
            }
            _ => {
                if !v.is_null() {
                    return Err(unsupported(k));
                }
            }
        }
    }
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => return Err(unsupported("n")),
    }
    let json_schema = json_mode_schema(obj.get("response_format"))?;
    let msgs = super::check_messages(body)?;
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                let t = text_of(content, &format!("{at}.content"))?;
                if !t.is_empty() {
                    system.push(t);
                }
            }
            "user" => {
                let blocks = content_blocks(content, &format!("{at}.content"), true)?;
                push_turn(&mut turns, "user", blocks);
            }
            "assistant" => {
                let mut blocks = content_blocks(content, &format!("{at}.content"), false)?;
                if let Some(calls) = m.get("tool_calls") {
                    blocks.extend(tool_use_blocks(calls, &format!("{at}.tool_calls"))?);
                }
                push_turn(&mut turns, "assistant", blocks);
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        bad(
                            &format!("{at}.tool_call_id"),
                            format!("Missing '{at}.tool_call_id'"),
                        )
                    })?;
                let text = text_of(content, &format!("{at}.content"))?;
                push_turn(
                    &mut turns,
                    "user",
                    vec![json!({"type":"tool_result","tool_use_id":id,"content":text})],
                );
            }
            other => {
                return Err(bad(
                    &format!("{at}.role"),
                    format!("Unsupported role '{other}' at '{at}.role'"),
                ))
            }
        }
    }
    if turns.is_empty() {
        return Err(bad(
            "messages",
            "'messages' must contain at least one non-empty user or assistant message",
        ));
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" && blocks.iter().any(is_tool_result) {
                // Stable: tool results first, then the rest in order.
                let (mut tr, rest): (Vec<Value>, Vec<Value>) =
                    blocks.drain(..).partition(is_tool_result);
                tr.extend(rest);
                blocks = tr;
            }
            json!({"role": role, "content": blocks})
        })
        .collect();

    let mut out = Map::new();
    out.insert("model".into(), Value::String(ctx.model.to_string()));
    let max_tokens = match positive_int(obj, "max_completion_tokens")? {
        Some(n) => n,
        None => positive_int(obj, "max_tokens")?.unwrap_or(ctx.model_cfg.max_tokens as u64),
    };
    out.insert("max_tokens".into(), json!(max_tokens));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(t) = number(obj, "temperature")? {
        out.insert("temperature".into(), t);
    }
    if let Some(t) = number(obj, "top_p")? {
        out.insert("top_p".into(), t);
    }
    match obj.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            if !a.is_empty() {
                out.insert("stop_sequences".into(), Value::Array(a.clone()));
            }
        }
        Some(_) => {
            return Err(bad(
                "stop",
                "Invalid type for 'stop': expected a string or an array of strings",
            ))
        }
    }
    let mut has_tools = false;
    match obj.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => {
            let mut out_tools = Vec::new();
            for (j, t) in tools.iter().enumerate() {
                let at = format!("tools[{j}]");
                if t.get("type").and_then(Value::as_str) != Some("function") {
                    return Err(ApiError {
                        message: format!("Only function tools are supported by provider '{PROVIDER}' ('{at}.type')"),
                        ..unsupported(&format!("{at}.type"))
                    });
                }
                let f = t.get("function").ok_or_else(|| {
                    bad(
                        &format!("{at}.function"),
                        format!("Missing '{at}.function'"),
                    )
                })?;
                let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                    bad(
                        &format!("{at}.function.name"),
                        format!("Missing '{at}.function.name'"),
                    )
                })?;
                let mut tool = Map::new();
                tool.insert("name".into(), Value::String(name.to_string()));
                if let Some(Value::String(d)) = f.get("description") {
                    tool.insert("description".into(), Value::String(d.clone()));
                }
                let schema = match f.get("parameters") {
                    None | Some(Value::Null) => json!({"type":"object","properties":{}}),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => {
                        return Err(bad(
                            &format!("{at}.function.parameters"),
                            format!(
                                "Invalid type for '{at}.function.parameters': expected an object"
                            ),
                        ))
                    }
                };
                tool.insert("input_schema".into(), schema);
                out_tools.push(Value::Object(tool));
            }
            has_tools = !out_tools.is_empty();
            if has_tools {
                out.insert("tools".into(), Value::Array(out_tools));
            }
        }
        Some(_) => return Err(bad("tools", "Invalid type for 'tools': expected an array")),
    }
    let parallel = match obj.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(bad(
                "parallel_tool_calls",
                "Invalid type for 'parallel_tool_calls': expected a boolean",
            ))
        }
    };
    let mut choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Some(json!({"type":"auto"})),
            "none" => Some(json!({"type":"none"})),
            "required" => Some(json!({"type":"any"})),
            _ => return Err(bad("tool_choice", format!("Invalid value for 'tool_choice': '{s}'"))),
        },
        Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) => Some(json!({"type":"tool","name":name})),
            None => return Err(bad("tool_choice", "Invalid value for 'tool_choice': expected {\"type\":\"function\",\"function\":{\"name\":...}}")),
        },
        Some(_) => return Err(bad("tool_choice", "Invalid type for 'tool_choice'")),
    };
    if let Some(schema) = json_schema {
        if has_tools {
            return Err(ApiError {
                message: format!(
                    "'response_format' json modes cannot be combined with 'tools' for provider '{PROVIDER}'"
                ),
                ..unsupported("response_format")
            });
        }
        out.insert(
            "tools".into(),
            json!([{"name": JSON_TOOL, "description": "Give the answer as JSON matching this schema.", "input_schema": schema}]),
        );
        out.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": JSON_TOOL}),
        );
    } else if has_tools {
        if !parallel {
            let c = choice.get_or_insert_with(|| json!({"type":"auto"}));
            if c.get("type").and_then(Value::as_str) != Some("none") {
                if let Some(o) = c.as_object_mut() {
                    o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
                }
            }
        }
        if let Some(c) = choice {
            out.insert("tool_choice".into(), c);
        }
    }
    match obj.get("user") {
        None | Some(Value::Null) => {}
        Some(Value::String(u)) => {
            out.insert("metadata".into(), json!({"user_id": u}));
        }
        Some(_) => return Err(bad("user", "Invalid type for 'user': expected a string")),
    }
    if stream_flag(body)? {
        out.insert("stream".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}

impl Translator for OpenAiAnthropic {
    fn kind(&self) -> Kind {
        Kind::Anthropic
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        if ctx.endpoint == Endpoint::Embeddings {
            return Err(ApiError {
                param: Some("model".into()),
                ..ApiError::new(
                    400,
                    INVALID_REQUEST,
                    "unsupported_endpoint",
                    format!("Provider '{}' does not serve embeddings", ctx.provider.name),
                )
            });
        }
        let stream = stream_flag(body)?;
        let include_usage = include_usage_flag(body)?;
        let json_mode = json_mode_schema(body.get("response_format"))?.is_some();
        let out = translate_request(ctx, body)?;
        let bytes = serde_json::to_vec(&out).map_err(|e| ApiError::invalid_json(&e.to_string()))?;
        Ok(UpstreamRequest {
            path: format!("{}/messages", ctx.provider.base_path),
            body: bytes,
            stream,
            include_usage,
            json_mode,
            prompt_estimate: 0,
            embed_base64: false,
        })
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![
            ("x-api-key", key.value.clone()),
            ("anthropic-version", provider.version.clone()),
        ])
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|_| {
            ApiError::new(
                502,
                crate::error::SERVER,
                "provider_error",
                "The provider returned a malformed response",
            )
        })?;
        let (out, usage) = translate_response(ctx, &v);
        let bytes = serde_json::to_vec(&out).map_err(|_| {
            ApiError::new(
                502,
                crate::error::SERVER,
                "provider_error",
                "Could not encode the response",
            )
        })?;
        Ok(Translated {
            body: Some(bytes),
            usage: Some(usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        let msg = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
            v.get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        upstream_error(status, msg)
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(AnthropicStream::new(ctx))
    }
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`.
pub fn finish_reason(stop: &str) -> &'static str {
    match stop {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// Anthropic usage object → [`Usage`] (cache tokens count as prompt tokens).
pub fn parse_usage(u: &Value) -> Usage {
    let g = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = g("cache_read_input_tokens");
    Usage {
        prompt_tokens: g("input_tokens") + g("cache_creation_input_tokens") + cache_read,
        completion_tokens: g("output_tokens"),
        cached_tokens: cache_read,
    }
}

fn translate_response(ctx: &ResponseCtx, v: &Value) -> (Value, Usage) {
    let mut text = String::new();
    let mut calls = Vec::new();
    if let Some(Value::Array(blocks)) = v.get("content") {
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(t) = b.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
                Some("tool_use")
                    if ctx.json_mode
                        && b.get("name").and_then(Value::as_str) == Some(JSON_TOOL) =>
                {
                    if let Some(input) = b.get("input") {
                        text.push_str(&input.to_string());
                    }
                }
                Some("tool_use") => {
                    let args = b
                        .get("input")
                        .map(|i| serde_json::to_string(i).unwrap_or_else(|_| "{}".into()))
                        .unwrap_or_else(|| "{}".into());
                    calls.push(json!({
                        "id": b.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": b.get("name").cloned().unwrap_or(Value::Null),
                            "arguments": args,
                        }
                    }));
                }
                _ => {}
            }
        }
    }
    let usage = v.get("usage").map(parse_usage).unwrap_or_default();
    let finish = match v.get("stop_reason").and_then(Value::as_str) {
        // JSON mode: the forced tool call is the answer.
        Some("tool_use") if ctx.json_mode && calls.is_empty() => "stop",
        Some(r) => finish_reason(r),
        None => "stop",
    };
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    message.insert("refusal".into(), Value::Null);
    let out = json!({
        "id": v.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": ctx.created,
        "model": v.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{
            "index": 0,
            "message": Value::Object(message),
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": usage_json(&usage),
    });
    (out, usage)
}

/// Anthropic SSE → OpenAI `chat.completion.chunk` SSE, one event at a time.
pub struct AnthropicStream {
    parser: SseParser,
    include_usage: bool,
    created: u64,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[{"index":0,"delta":`
    prefix: String,
    /// Anthropic content-block index → OpenAI tool_call index.
    tool_index: Vec<(u64, u32)>,
    next_tool: u32,
    usage: Usage,
    saw_usage: bool,
    finish: Option<&'static str>,
    done: bool,
    first_token: bool,
    json_mode: bool,
    /// JSON mode: Anthropic block index of the forced tool, streamed as content.
    json_block: Option<u64>,
}

impl AnthropicStream {
    pub fn new(ctx: &ResponseCtx) -> AnthropicStream {
        AnthropicStream {
            parser: SseParser::default(),
            include_usage: ctx.include_usage,
            created: ctx.created,
            prefix: String::new(),
            tool_index: Vec::new(),
            next_tool: 0,
            usage: Usage::default(),
            saw_usage: false,
            finish: None,
            done: false,
            first_token: false,
            json_mode: ctx.json_mode,
            json_block: None,
        }
    }

    fn set_prefix(&mut self, id: &str, model: &str) {
        let id = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
        let model = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".into());
        self.prefix.clear();
        let _ = write!(
            self.prefix,
            "data: {{\"id\":{id},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{model},\"choices\":[{{\"index\":0,\"delta\":",
            self.created
        );
    }

    fn chunk(&mut self, out: &mut Vec<u8>, delta: &str, finish: Option<&str>) {
        if !self.first_token
            && (delta.starts_with("{\"content\"") || delta.starts_with("{\"tool_calls\""))
        {
            self.first_token = true;
        }
        if self.prefix.is_empty() {
            self.set_prefix("", "");
        }
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(delta.as_bytes());
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        match finish {
            Some(f) => {
                out.push(b'"');
                out.extend_from_slice(f.as_bytes());
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"}]}\n\n");
    }

    fn error_event(&mut self, out: &mut Vec<u8>, kind: &str, message: &str) {
        let e = json!({"error": {"message": message, "type": kind, "param": null, "code": kind}});
        push_data(out, e.to_string().as_bytes());
        out.extend_from_slice(DONE);
        self.done = true;
    }

    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>) {
        if self.done || ev.data.is_empty() {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            return;
        };
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(ev.event.as_str());
        match ty {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                let id = m.get("id").and_then(Value::as_str).unwrap_or("");
                let model = m.get("model").and_then(Value::as_str).unwrap_or("");
                self.set_prefix(id, model);
                if let Some(u) = m.get("usage") {
                    self.usage = parse_usage(u);
                    self.saw_usage = true;
                }
                self.chunk(out, "{\"role\":\"assistant\",\"content\":\"\"}", None);
            }
            "content_block_start" => {
                let idx = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let b = v.get("content_block").unwrap_or(&Value::Null);
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = b.get("text").and_then(Value::as_str) {
                            if !t.is_empty() {
                                let d = json!({"content": t}).to_string();
                                self.chunk(out, &d, None);
                            }
                        }
                    }
                    Some("tool_use")
                        if self.json_mode
                            && b.get("name").and_then(Value::as_str) == Some(JSON_TOOL) =>
                    {
                        self.json_block = Some(idx);
                    }
                    Some("tool_use") => {
                        let k = self.next_tool;
                        self.next_tool += 1;
                        self.tool_index.push((idx, k));
                        let d = json!({"tool_calls": [{
                            "index": k,
                            "id": b.get("id").cloned().unwrap_or(Value::Null),
                            "type": "function",
                            "function": {"name": b.get("name").cloned().unwrap_or(Value::Null), "arguments": ""},
                        }]})
                        .to_string();
                        self.chunk(out, &d, None);
                        // Some producers put a non-empty input on start.
                        if let Some(input) = b.get("input") {
                            if input.as_object().is_some_and(|o| !o.is_empty()) {
                                let d = json!({"tool_calls": [{"index": k, "function": {"arguments": input.to_string()}}]}).to_string();
                                self.chunk(out, &d, None);
                            }
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let idx = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let d = v.get("delta").unwrap_or(&Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(t) = d.get("text").and_then(Value::as_str) {
                            if !t.is_empty() {
                                let d = json!({"content": t}).to_string();
                                self.chunk(out, &d, None);
                            }
                        }
                    }
                    Some("input_json_delta") if self.json_block == Some(idx) => {
                        if let Some(p) = d.get("partial_json").and_then(Value::as_str) {
                            if !p.is_empty() {
                                let d = json!({"content": p}).to_string();
                                self.chunk(out, &d, None);
                            }
                        }
                    }
                    Some("input_json_delta") => {
                        let k = self
                            .tool_index
                            .iter()
                            .find(|(i, _)| *i == idx)
                            .map(|(_, k)| *k);
                        if let (Some(k), Some(p)) =
                            (k, d.get("partial_json").and_then(Value::as_str))
                        {
                            if !p.is_empty() {
                                let d = json!({"tool_calls": [{"index": k, "function": {"arguments": p}}]}).to_string();
                                self.chunk(out, &d, None);
                            }
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(u) = v.get("usage") {
                    let g = |k: &str| u.get(k).and_then(Value::as_u64);
                    if let Some(o) = g("output_tokens") {
                        self.usage.completion_tokens = o;
                    }
                    if u.get("input_tokens").is_some() {
                        let p = parse_usage(u);
                        if p.prompt_tokens > 0 {
                            self.usage.prompt_tokens = p.prompt_tokens;
                            self.usage.cached_tokens = p.cached_tokens;
                        }
                    }
                    self.saw_usage = true;
                }
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.finish = Some(
                        if r == "tool_use" && self.json_block.is_some() && self.next_tool == 0 {
                            "stop"
                        } else {
                            finish_reason(r)
                        },
                    );
                }
            }
            "message_stop" => self.end(out),
            "error" => {
                let e = v.get("error").unwrap_or(&Value::Null);
                let kind = match e.get("type").and_then(Value::as_str) {
                    Some("overloaded_error") => "provider_overloaded",
                    Some("rate_limit_error") => "rate_limit_exceeded",
                    _ => "provider_error",
                };
                let msg = e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Provider error")
                    .to_string();
                self.error_event(out, kind, &msg);
            }
            _ => {}
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        let f = self.finish.unwrap_or("stop");
        self.chunk(out, "{}", Some(f));
        if self.include_usage {
            let mut s = self.prefix.clone();
            // Usage chunk: same envelope, empty choices.
            if let Some(pos) = s.find("\"choices\":[") {
                s.truncate(pos);
            }
            out.extend_from_slice(s.as_bytes());
            let u = usage_json(&self.usage).to_string();
            out.extend_from_slice(b"\"choices\":[],\"usage\":");
            out.extend_from_slice(u.as_bytes());
            out.extend_from_slice(b"}\n\n");
        }
        out.extend_from_slice(DONE);
        self.done = true;
    }
}

impl StreamTranslator for AnthropicStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let mut events = Vec::new();
        let r = self.parser.feed(chunk, &mut |e| events.push(e));
        for e in events {
            self.on_event(e, out);
        }
        if r.is_err() && !self.done {
            self.error_event(out, "provider_error", "Malformed stream from the provider");
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let mut events = Vec::new();
        let _ = self.parser.finish(&mut |e| events.push(e));
        for e in events {
            self.on_event(e, out);
        }
        if !self.done {
            self.error_event(out, "provider_error", "The provider's stream ended early");
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.saw_usage.then_some(self.usage)
    }

    fn first_token_seen(&self) -> bool {
        self.first_token
    }
}
