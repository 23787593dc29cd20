//! The Anthropic Messages front door (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`).
//!
//! Anthropic providers get a **passthrough** ([`AnthropicPassthrough`]): the
//! client's body goes upstream untouched when it already names the upstream
//! model (bare names such as `claude-sonnet-4-5`), with only `model`,
//! `stream` and the answer's usage read; `anthropic-version` and
//! `anthropic-beta` travel with it (see `plan`).
//!
//! Every other provider family goes through one adapter ([`Adapter`]) around
//! its existing OpenAI translator, so there is one request representation
//! for both front doors: the Anthropic body becomes an OpenAI chat request
//! ([`to_chat`]), the provider's answer comes back from that translator as an
//! OpenAI `chat.completion` and becomes an Anthropic `message`
//! ([`to_message`]); streams are the OpenAI chunks turned into Anthropic
//! events by [`super::messages_stream`]. `thinking` and `cache_control`
//! reach the target's own controls where it has them (`reasoning_effort`
//! on OpenAI/Azure reasoning models, Gemini `thinkingConfig`, Bedrock
//! `additionalModelRequestFields.thinking` and `cachePoint` blocks: see
//! `native_extras`); what the target cannot carry is dropped and named in
//! the response header [`super::DROPPED_HEADER`]; a `max_tokens` above the
//! target model's `max_output_tokens` is lowered to it and named in
//! [`super::LOWERED_HEADER`].
//!
//! `count_tokens` for a non-Anthropic model is answered by the gateway with
//! an estimate ([`estimate_input_tokens`]): ⌈characters / 4⌉ of every text
//! the model would read (system, message text, tool inputs and results,
//! tool names, descriptions and schemas), the rule the gateway already uses
//! where a provider reports no usage.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::messages_parts::{anthropic_usage, message_id, stop_reason, tool_input};
use super::messages_stream::{AnthropicUsageStream, MessagesStream};
use super::openai_anthropic::{parse_usage, OpenAiAnthropic};
use super::openai_bedrock::is_anthropic;
use super::{
    add_cache_breakpoints, add_web_search, for_kind, lower_output_limit, stream_flag,
    upstream_error, Endpoint, Front, RequestCtx, ResponseCtx, StreamTranslator, Translated,
    Translator, UpstreamRequest, Usage,
};
use crate::config::{Key, Kind, Provider};
use crate::error::{echo, ApiError, SERVER};
use crate::scan::{edit_prefix, TopLevel};

/// The translator for a provider kind on a Messages route.
pub fn translator(kind: Kind, front: Front) -> &'static dyn Translator {
    match (kind, front) {
        (Kind::Anthropic, Front::CountTokens) => &AnthropicPassthrough { count: true },
        (Kind::Anthropic, _) => &AnthropicPassthrough { count: false },
        (Kind::Openai, _) => &Adapter(Kind::Openai),
        (Kind::Azure, _) => &Adapter(Kind::Azure),
        (Kind::Gemini, _) => &Adapter(Kind::Gemini),
        (Kind::Bedrock, _) => &Adapter(Kind::Bedrock),
    }
}

fn malformed() -> ApiError {
    ApiError::new(
        502,
        SERVER,
        "provider_error",
        "The provider returned a malformed response",
    )
}

/// The provider's message of an Anthropic error body.
fn anthropic_error_message(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        error: Detail<'a>,
    }
    #[derive(Deserialize)]
    struct Detail<'a> {
        #[serde(borrow)]
        message: std::borrow::Cow<'a, str>,
    }
    serde_json::from_slice::<Body<'_>>(body)
        .ok()
        .map(|b| b.error.message.into_owned())
}

// ---------------------------------------------------------------------------
// Anthropic passthrough

/// Messages (or count_tokens) to an Anthropic provider, untouched.
pub struct AnthropicPassthrough {
    /// `count_tokens` rather than `messages`.
    count: bool,
}

impl AnthropicPassthrough {
    fn upstream(&self, ctx: &RequestCtx<'_>, body: Vec<u8>, stream: bool) -> UpstreamRequest {
        let path = if self.count {
            format!("{}/messages/count_tokens", ctx.provider.base_path)
        } else {
            format!("{}/messages", ctx.provider.base_path)
        };
        UpstreamRequest {
            path,
            body,
            stream,
            ..UpstreamRequest::default()
        }
    }
}

impl Translator for AnthropicPassthrough {
    fn kind(&self) -> Kind {
        Kind::Anthropic
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        let stream = !self.count && stream_flag(body)?;
        // Untouched (an empty body tells the planner to send the client's
        // bytes) unless the client named the model another way
        // (`provider/model`, an alias), or breakpoints are added.
        let mut b = body.clone();
        let marked = ctx.cache_breakpoints && !self.count && add_cache_breakpoints(&mut b);
        let bytes = if !marked && body.get("model").and_then(Value::as_str) == Some(ctx.model) {
            Vec::new()
        } else {
            if let Some(o) = b.as_object_mut() {
                o.insert("model".into(), Value::String(ctx.model.to_string()));
            }
            serde_json::to_vec(&b).map_err(|e| ApiError::invalid_json(&e.to_string()))?
        };
        Ok(self.upstream(ctx, bytes, stream))
    }

    /// The client's body goes on as it is, read only for `stream` and
    /// edited only where it names the model another way: nothing is built,
    /// however long the conversation (Claude Code sends all of it every
    /// turn).
    fn request_in_place(
        &self,
        ctx: &RequestCtx<'_>,
        top: &TopLevel<'_>,
    ) -> Option<Result<(UpstreamRequest, usize), ApiError>> {
        if ctx.cache_breakpoints && !self.count && !top.body().contains("\"cache_control\"") {
            // Breakpoints to add: the body is built ([`Translator::request`]).
            return None;
        }
        let stream = if self.count {
            Ok(false)
        } else {
            top.small(&["stream"]).and_then(|small| stream_flag(&small))
        };
        Some(stream.map(|stream| {
            let edit = top.model_edit(ctx.model);
            let (prefix, replaced) = edit_prefix(top.body(), edit.as_slice());
            (self.upstream(ctx, prefix, stream), replaced)
        }))
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        // The same credentials and version as the OpenAI → Anthropic route.
        OpenAiAnthropic.auth_headers(provider, key, req, now_ms)
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn response(&self, _ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        if self.count {
            // No generation: nothing to debit (the reservation is refunded).
            return Ok(Translated {
                body: None,
                usage: Some(Usage::default()),
            });
        }
        #[derive(Deserialize)]
        struct Answer {
            usage: Option<Value>,
        }
        let a: Answer = serde_json::from_slice(body).map_err(|_| malformed())?;
        Ok(Translated {
            body: None,
            usage: a.usage.as_ref().map(parse_usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        upstream_error(status, anthropic_error_message(body))
    }

    fn stream(&self, _ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        Box::new(AnthropicUsageStream::default())
    }
}

// ---------------------------------------------------------------------------
// Every other provider: Anthropic in, OpenAI chat through the kind's
// translator, Anthropic out.

/// The Messages adapter around a provider kind's OpenAI translator.
pub struct Adapter(Kind);

impl Adapter {
    fn inner(&self) -> &'static dyn Translator {
        for_kind(self.0)
    }
}

impl Translator for Adapter {
    fn kind(&self) -> Kind {
        self.0
    }

    fn request(&self, ctx: &RequestCtx<'_>, body: &Value) -> Result<UpstreamRequest, ApiError> {
        request(self.0, ctx, body).map(|(up, _)| up)
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        req: &UpstreamRequest,
        now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        self.inner().auth_headers(provider, key, req, now_ms)
    }

    fn is_stream(&self, content_type: &str) -> bool {
        self.inner().is_stream(content_type)
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let t = self.inner().response(ctx, body)?;
        let chat = t.body.as_deref().unwrap_or(body);
        let v: Value = serde_json::from_slice(chat).map_err(|_| malformed())?;
        let usage = t.usage.unwrap_or_else(|| openai_usage(v.get("usage")));
        let msg = to_message(&v, &ctx.model, usage);
        let bytes = serde_json::to_vec(&msg).map_err(|_| malformed())?;
        Ok(Translated {
            body: Some(bytes),
            usage: Some(usage),
        })
    }

    fn error(&self, status: u16, body: &[u8]) -> ApiError {
        self.inner().error(status, body)
    }

    fn stream(&self, ctx: &ResponseCtx) -> Box<dyn StreamTranslator> {
        // The inner translator must write the usage chunk: the request asked
        // for it (`stream_options.include_usage`).
        let inner_ctx = ResponseCtx {
            include_usage: true,
            ..ctx.clone()
        };
        Box::new(MessagesStream::new(
            self.inner().stream(&inner_ctx),
            &ctx.model,
        ))
    }
}

/// Plans the upstream request of a Messages request (not count_tokens) for
/// a provider kind: the passthrough for Anthropic, else the OpenAI chat
/// request through the kind's translator, with the Anthropic fields it
/// dropped (for [`super::DROPPED_HEADER`]).
pub fn request(
    kind: Kind,
    ctx: &RequestCtx<'_>,
    body: &Value,
) -> Result<(UpstreamRequest, Vec<&'static str>), ApiError> {
    if kind == Kind::Anthropic {
        let up = AnthropicPassthrough { count: false }.request(ctx, body)?;
        return Ok((up, Vec::new()));
    }
    let mut chat = to_chat(body, &ctx.provider.name)?;
    let chat_ctx = RequestCtx {
        endpoint: Endpoint::Chat,
        ..*ctx
    };
    let budget = thinking_budget(body);
    if ctx.model_cfg.reasoning && matches!(kind, Kind::Openai | Kind::Azure) {
        if let Some(effort) = wanted_effort(body, budget) {
            // OpenAI / Azure reasoning models: an effort, and
            // `max_completion_tokens` (they refuse `max_tokens`).
            if let Value::Object(o) = &mut chat.body {
                if let Some(max) = o.remove("max_tokens") {
                    o.insert("max_completion_tokens".into(), max);
                }
                o.insert("reasoning_effort".into(), json!(effort));
            }
            forget(&mut chat.dropped, "thinking");
            forget(&mut chat.dropped, "output_config.effort");
        }
    }
    let mut lowered = Vec::new();
    lower_output_limit(&mut chat.body, ctx.model_cfg, &mut lowered);
    let mut up = for_kind(kind).request(&chat_ctx, &chat.body)?;
    let think = native_thinking(kind, ctx, body, budget);
    native_extras(kind, think, body, &mut up, &mut chat.dropped)?;
    if let Some(search) = body.get("tools").and_then(Value::as_array).and_then(|ts| {
        ts.iter().find(|t| {
            t.get("type")
                .and_then(Value::as_str)
                .and_then(anthropic_tool)
                == Some("web_search")
        })
    }) {
        if add_web_search(ctx.provider, &mut up, search)? {
            forget(&mut chat.dropped, "web_search");
        }
    }
    up.lowered.extend(lowered);
    Ok((up, chat.dropped))
}

/// The OpenAI `reasoning_effort` a Messages request asks for, if it asks
/// for reasoning at all: `output_config.effort` (Anthropic's `low`,
/// `medium`, `high`; `xhigh` and `max` are OpenAI's `high`), else an
/// enabled thinking budget's ([`reasoning_effort`]), else `high` for
/// adaptive thinking (Anthropic's default effort).
fn wanted_effort(body: &Value, budget: Option<u64>) -> Option<&'static str> {
    let effort = body
        .get("output_config")
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str);
    match effort {
        Some("low") => return Some("low"),
        Some("medium") => return Some("medium"),
        Some("high" | "xhigh" | "max") => return Some("high"),
        _ => {}
    }
    if let Some(n) = budget {
        return Some(reasoning_effort(n));
    }
    let adaptive = body
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("adaptive");
    adaptive.then_some("high")
}

/// `thinking: {"type": "enabled", "budget_tokens": N}` → N (checked by
/// [`to_chat`]).
fn thinking_budget(body: &Value) -> Option<u64> {
    let t = body.get("thinking")?;
    if t.get("type").and_then(Value::as_str) != Some("enabled") {
        return None;
    }
    t.get("budget_tokens").and_then(Value::as_u64)
}

/// A thinking budget → OpenAI `reasoning_effort`: below 2048 tokens `low`,
/// below 8192 `medium`, else `high`.
pub fn reasoning_effort(budget_tokens: u64) -> &'static str {
    match budget_tokens {
        0..=2047 => "low",
        2048..=8191 => "medium",
        _ => "high",
    }
}

fn forget(dropped: &mut Vec<&'static str>, what: &str) {
    dropped.retain(|d| *d != what);
}

/// Whether a Messages block (system, content or tool) carries a
/// `cache_control` marker.
fn marked(v: &Value) -> bool {
    v.get("cache_control").is_some_and(|c| !c.is_null())
}

/// The thinking budget a Gemini or Bedrock body gets for a Messages
/// request, on models that think (`"reasoning": true` in the config; others,
/// such as gemini-2.0-flash, refuse a thinking config): an enabled budget
/// as given; adaptive thinking or an effort becomes Gemini's dynamic budget
/// (-1: the model decides), which Bedrock has no counterpart for.
fn native_thinking(
    kind: Kind,
    ctx: &RequestCtx<'_>,
    body: &Value,
    budget: Option<u64>,
) -> Option<i64> {
    if !ctx.model_cfg.reasoning {
        return None;
    }
    let budget = budget.and_then(|n| i64::try_from(n).ok());
    match kind {
        Kind::Gemini => budget.or_else(|| wanted_effort(body, None).map(|_| -1)),
        Kind::Bedrock if is_anthropic(ctx.model) => budget,
        _ => None,
    }
}

/// Maps what the provider's native body can carry but the OpenAI chat
/// request cannot: the thinking budget (Gemini `thinkingConfig`, Anthropic
/// models on Bedrock `additionalModelRequestFields.thinking`) and Bedrock
/// `cachePoint` blocks after the system prompt, the marked tools and the
/// turns holding a marked block. What is mapped leaves `dropped`.
fn native_extras(
    kind: Kind,
    think: Option<i64>,
    body: &Value,
    up: &mut UpstreamRequest,
    dropped: &mut Vec<&'static str>,
) -> Result<(), ApiError> {
    let cache = kind == Kind::Bedrock && dropped.contains(&"cache_control");
    if think.is_none() && !cache {
        return Ok(());
    }
    let mut native: Value = serde_json::from_slice(&up.body).map_err(|_| malformed())?;
    let Some(obj) = native.as_object_mut() else {
        return Err(malformed());
    };
    if let Some(n) = think {
        if kind == Kind::Gemini {
            let gc = obj.entry("generationConfig").or_insert_with(|| json!({}));
            if let Value::Object(gc) = gc {
                gc.insert("thinkingConfig".into(), json!({"thinkingBudget": n}));
            }
            forget(dropped, "output_config.effort");
        } else {
            let extra = obj
                .entry("additionalModelRequestFields")
                .or_insert_with(|| json!({}));
            if let Value::Object(extra) = extra {
                extra.insert(
                    "thinking".into(),
                    json!({"type": "enabled", "budget_tokens": n}),
                );
            }
        }
        forget(dropped, "thinking");
    }
    if cache && bedrock_cache_points(body, obj) {
        forget(dropped, "cache_control");
    }
    up.body = serde_json::to_vec(&native).map_err(|_| malformed())?;
    Ok(())
}

/// Puts Bedrock `cachePoint` blocks into a Converse body: after the system
/// blocks when any system block (or mid-conversation system message) is
/// marked, after each marked tool, and at the end of each turn holding a
/// marked block. Bedrock caches the prefix up to a cache point, so a point
/// at the end of the marked turn caches at least what the marker asked
/// for. False (nothing changed) when the Converse turns do not line up
/// with the Messages turns.
fn bedrock_cache_points(body: &Value, native: &mut Map<String, Value>) -> bool {
    let point = || json!({"cachePoint": {"type": "default"}});
    let blocks = |m: &Value| -> bool {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(marked))
    };
    // Messages turns (consecutive same-role messages merged, system
    // messages outside them), each with whether it holds a marker.
    let mut system = body
        .get("system")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(marked));
    let mut turns: Vec<(&str, bool)> = Vec::new();
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "system" {
            system |= blocks(m);
            continue;
        }
        let empty = match m.get("content") {
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => true,
        };
        if empty {
            continue;
        }
        match turns.last_mut() {
            Some((r, mark)) if *r == role => *mark |= blocks(m),
            _ => turns.push((role, blocks(m))),
        }
    }
    let Some(msgs) = native.get_mut("messages").and_then(Value::as_array_mut) else {
        return false;
    };
    if msgs.len() != turns.len() {
        return false;
    }
    for (m, (_, mark)) in msgs.iter_mut().zip(&turns) {
        if *mark {
            if let Some(c) = m.get_mut("content").and_then(Value::as_array_mut) {
                c.push(point());
            }
        }
    }
    if system {
        if let Some(s) = native.get_mut("system").and_then(Value::as_array_mut) {
            s.push(point());
        }
    }
    let marked_tools: Vec<usize> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, t)| marked(t))
        .map(|(i, _)| i)
        .collect();
    if let Some(tools) = native
        .get_mut("toolConfig")
        .and_then(|t| t.get_mut("tools"))
        .and_then(Value::as_array_mut)
    {
        for i in marked_tools.into_iter().rev() {
            if i < tools.len() {
                tools.insert(i + 1, point());
            }
        }
    }
    true
}

/// OpenAI `usage` → [`Usage`].
pub(crate) fn openai_usage(u: Option<&Value>) -> Usage {
    let g = |k: &str| {
        u.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Usage {
        prompt_tokens: g("prompt_tokens"),
        completion_tokens: g("completion_tokens"),
        cached_tokens: u
            .and_then(|u| u.get("prompt_tokens_details"))
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_tokens: 0,
        web_searches: 0,
    }
}

/// An OpenAI `chat.completion` → an Anthropic `message`.
pub fn to_message(v: &Value, model: &str, usage: Usage) -> Value {
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .unwrap_or(&Value::Null);
    let msg = choice.get("message").unwrap_or(&Value::Null);
    let mut content = Vec::new();
    if let Some(t) = msg.get("content").and_then(Value::as_str) {
        if !t.is_empty() {
            content.push(json!({"type": "text", "text": t}));
        }
    }
    if let Some(Value::Array(calls)) = msg.get("tool_calls") {
        for c in calls {
            let f = c.get("function").unwrap_or(&Value::Null);
            content.push(json!({
                "type": "tool_use",
                "id": c.get("id").and_then(Value::as_str).unwrap_or(""),
                "name": f.get("name").and_then(Value::as_str).unwrap_or(""),
                "input": tool_input(f.get("arguments").and_then(Value::as_str).unwrap_or("")),
            }));
        }
    }
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("stop");
    json!({
        "id": message_id(v.get("id").and_then(Value::as_str).unwrap_or("")),
        "type": "message",
        "role": "assistant",
        "model": v.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).unwrap_or(model),
        "content": content,
        "stop_reason": stop_reason(finish),
        "stop_sequence": Value::Null,
        "usage": anthropic_usage(&usage),
    })
}

// ---------------------------------------------------------------------------
// Request: Anthropic Messages → OpenAI chat

/// A Messages request read into an OpenAI chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub body: Value,
    /// Anthropic fields the OpenAI request does not carry, in order of
    /// first appearance (for [`super::DROPPED_HEADER`]).
    pub dropped: Vec<&'static str>,
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

fn note(dropped: &mut Vec<&'static str>, what: &'static str) {
    if !dropped.contains(&what) {
        dropped.push(what);
    }
}

/// Text of a `system` value (a string or text blocks).
fn system_text(
    v: &Value,
    param: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                if b.get("cache_control").is_some() {
                    note(dropped, "cache_control");
                }
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push(t.clone()),
                    _ => {
                        return Err(bad(
                            &format!("{param}[{i}]"),
                            format!("Invalid value for '{param}[{i}]': expected a text block"),
                        ))
                    }
                }
            }
            Ok(out.join("\n\n"))
        }
        _ => Err(bad(
            param,
            format!("Invalid type for '{param}': expected a string or an array of text blocks"),
        )),
    }
}

/// A `tool_result`'s `content` as text (a string, or text blocks joined).
fn tool_result_text(v: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut out = String::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(t);
                    }
                    _ => {
                        return Err(ApiError {
                            message: format!("Only text blocks are supported in '{param}'"),
                            ..ApiError::unsupported_param(&format!("{param}[{i}]"), "")
                        })
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(bad(
            param,
            format!("Invalid type for '{param}': expected a string or an array of blocks"),
        )),
    }
}

/// An `image` block → an OpenAI `image_url` part.
fn image_part(b: &Value, param: &str) -> Result<Value, ApiError> {
    let src = b.get("source").unwrap_or(&Value::Null);
    let s = |k: &str| src.get(k).and_then(Value::as_str);
    let url = match s("type") {
        Some("base64") => match (s("media_type"), s("data")) {
            (Some(m), Some(d)) => format!("data:{m};base64,{d}"),
            _ => {
                return Err(bad(
                    &format!("{param}.source"),
                    format!("Invalid value for '{param}.source': base64 images need 'media_type' and 'data'"),
                ))
            }
        },
        Some("url") => match s("url") {
            Some(u) => u.to_string(),
            None => {
                return Err(bad(
                    &format!("{param}.source.url"),
                    format!("Missing required parameter: '{param}.source.url'"),
                ))
            }
        },
        _ => {
            return Err(bad(
                &format!("{param}.source.type"),
                format!("Invalid value for '{param}.source.type': expected base64 or url"),
            ))
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// One Anthropic message → OpenAI messages (tool results become `tool`
/// messages, placed first as OpenAI wants them right after the assistant's
/// calls).
fn convert_message(
    m: &Value,
    i: usize,
    provider: &str,
    out: &mut Vec<Value>,
    dropped: &mut Vec<&'static str>,
) -> Result<(), ApiError> {
    let param = format!("messages[{i}]");
    let role = match m.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant" | "system")) => r,
        _ => {
            return Err(bad(
                &format!("{param}.role"),
                format!("Invalid value for '{param}.role': expected 'user' or 'assistant'"),
            ))
        }
    };
    if role == "system" {
        // A mid-conversation system message (per-turn control): an OpenAI
        // system message at the same place.
        let text = system_text(
            m.get("content").unwrap_or(&Value::Null),
            &format!("{param}.content"),
            dropped,
        )?;
        out.push(json!({"role": "system", "content": text}));
        return Ok(());
    }
    let blocks: Vec<Value> = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(a)) => a.clone(),
        _ => {
            return Err(bad(
                &format!("{param}.content"),
                format!("Invalid type for '{param}.content': expected a string or an array of content blocks"),
            ))
        }
    };
    let mut converted = Blocks::default();
    for (j, b) in blocks.iter().enumerate() {
        converted.add(b, &format!("{param}.content[{j}]"), role, provider, dropped)?;
    }
    converted.push_to(role, out);
    Ok(())
}

/// The content blocks of one Anthropic message, read into their OpenAI
/// places.
#[derive(Default)]
struct Blocks {
    /// Text and image parts.
    parts: Vec<Value>,
    /// The assistant's tool calls.
    calls: Vec<Value>,
    /// The user's tool results, as `tool` messages.
    tool_msgs: Vec<Value>,
}

impl Blocks {
    /// Reads one block (`bp`: its parameter path) of a `role` message.
    fn add(
        &mut self,
        b: &Value,
        bp: &str,
        role: &str,
        provider: &str,
        dropped: &mut Vec<&'static str>,
    ) -> Result<(), ApiError> {
        if b.get("cache_control").is_some() {
            note(dropped, "cache_control");
        }
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match b.get("text") {
                Some(Value::String(t)) => self.parts.push(json!({"type": "text", "text": t})),
                _ => {
                    return Err(bad(
                        &format!("{bp}.text"),
                        format!("Invalid type for '{bp}.text': expected a string"),
                    ))
                }
            },
            Some("image") if role == "user" => self.parts.push(image_part(b, bp)?),
            Some("tool_use") if role == "assistant" => {
                let id = b.get("id").and_then(Value::as_str);
                let name = b.get("name").and_then(Value::as_str);
                let (Some(id), Some(name)) = (id, name) else {
                    return Err(bad(
                        bp,
                        format!(
                            "Invalid value for '{bp}': tool_use needs a string 'id' and 'name'"
                        ),
                    ));
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                self.calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                }));
            }
            Some("tool_result") if role == "user" => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(bad(
                        &format!("{bp}.tool_use_id"),
                        format!("Missing required parameter: '{bp}.tool_use_id'"),
                    ));
                };
                let mut text = tool_result_text(b.get("content"), &format!("{bp}.content"))?;
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    text = format!("Error: {text}");
                }
                self.tool_msgs
                    .push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            Some("thinking") | Some("redacted_thinking") if role == "assistant" => {
                // Earlier reasoning of an Anthropic model: no OpenAI field.
                note(dropped, "thinking");
            }
            // Blocks Anthropic takes that chat has no place for: documents,
            // search results, the records of Anthropic's own tools.
            Some(other) if ANTHROPIC_BLOCKS.contains(&other) => {
                let name = ANTHROPIC_BLOCKS
                    .iter()
                    .find(|b| **b == other)
                    .copied()
                    .unwrap_or("content");
                note(dropped, name);
                // The model is told, and a turn of only such blocks stays a
                // turn.
                self.parts.push(json!({"type": "text",
                    "text": format!("[a {name} block was left out: provider '{provider}' cannot read it]")}));
            }
            Some(other) => {
                let what = format!("A '{}' block in a {role} message", echo(other));
                return Err(ApiError {
                    message: format!("{what} is not supported by provider '{provider}'"),
                    ..ApiError::unsupported_param(&format!("{bp}.type"), provider)
                });
            }
            None => {
                return Err(bad(
                    &format!("{bp}.type"),
                    format!("Missing required parameter: '{bp}.type'"),
                ))
            }
        }
        Ok(())
    }

    /// The blocks' OpenAI messages: the tool results first, then the
    /// assistant's text and calls, or the user's parts.
    fn push_to(self, role: &str, out: &mut Vec<Value>) {
        out.extend(self.tool_msgs);
        if role == "assistant" {
            if self.parts.is_empty() && self.calls.is_empty() {
                return;
            }
            let text: String = self
                .parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("");
            let mut a = Map::new();
            a.insert("role".into(), json!("assistant"));
            a.insert(
                "content".into(),
                if text.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                },
            );
            if !self.calls.is_empty() {
                a.insert("tool_calls".into(), Value::Array(self.calls));
            }
            out.push(Value::Object(a));
        } else if !self.parts.is_empty() {
            out.push(json!({"role": "user", "content": self.parts}));
        }
    }
}

/// Anthropic `tools` → OpenAI `tools` (client tools only: Anthropic's
/// server tools run on Anthropic's side and have no OpenAI counterpart).
/// Content block types of Anthropic's Messages API (anthropic-sdk-python's
/// `ContentBlockParam`) that a chat request has no place for.
const ANTHROPIC_BLOCKS: [&str; 13] = [
    "document",
    "search_result",
    "container_upload",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "compaction",
];

/// Anthropic's own tool types, by family (`web_search_20250305` →
/// `web_search`): the name a translated request drops it under.
const ANTHROPIC_TOOLS: [&str; 10] = [
    "web_search",
    "web_fetch",
    "code_execution",
    "bash",
    "text_editor",
    "computer",
    "memory",
    "tool_search_tool",
    "mcp_toolset",
    "advisor",
];

fn anthropic_tool(ty: &str) -> Option<&'static str> {
    ANTHROPIC_TOOLS.iter().copied().find(|f| {
        ty == *f
            || ty.strip_prefix(f).is_some_and(|rest| {
                rest.starts_with('_')
                    && rest[1..].starts_with(|c: char| c.is_ascii_digit() || c.is_ascii_lowercase())
            })
    })
}

fn convert_tools(
    v: &Value,
    provider: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<Value, ApiError> {
    let Value::Array(tools) = v else {
        return Err(bad("tools", "Invalid type for 'tools': expected an array"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        if t.get("cache_control").is_some() {
            note(dropped, "cache_control");
        }
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => match anthropic_tool(other) {
                // Anthropic's own tools (server-side, or with a schema only
                // Anthropic knows): dropped and named; web search is mapped
                // by `native_extras` where the provider has its own.
                Some(family) => {
                    note(dropped, family);
                    continue;
                }
                None => {
                    return Err(ApiError {
                        message: format!(
                            "Tool type '{}' is not supported by provider '{provider}'",
                            echo(other)
                        ),
                        ..ApiError::unsupported_param(&format!("tools[{i}].type"), provider)
                    })
                }
            },
        }
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(bad(
                &format!("tools[{i}].name"),
                format!("Missing required parameter: 'tools[{i}].name'"),
            ));
        };
        let mut f = Map::new();
        f.insert("name".into(), json!(name));
        if let Some(d) = t.get("description").and_then(Value::as_str) {
            f.insert("description".into(), json!(d));
        }
        f.insert(
            "parameters".into(),
            t.get("input_schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        );
        out.push(json!({"type": "function", "function": Value::Object(f)}));
    }
    Ok(Value::Array(out))
}

/// Anthropic `tool_choice` → OpenAI `tool_choice` (+ `parallel_tool_calls`).
fn convert_tool_choice(v: &Value, out: &mut Map<String, Value>) -> Result<(), ApiError> {
    let choice = match v.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match v.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": n}}),
            None => {
                return Err(bad(
                    "tool_choice.name",
                    "Missing required parameter: 'tool_choice.name'",
                ))
            }
        },
        _ => {
            return Err(bad(
                "tool_choice.type",
                "Invalid value for 'tool_choice.type': expected auto, any, tool or none",
            ))
        }
    };
    out.insert("tool_choice".into(), choice);
    if v.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
        out.insert("parallel_tool_calls".into(), json!(false));
    }
    Ok(())
}

/// Anthropic Messages request → OpenAI chat request (for every
/// non-Anthropic provider). Malformed input is a 400 naming the parameter.
pub fn to_chat(body: &Value, provider: &str) -> Result<ChatRequest, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid_json("expected an object"));
    };
    let mut dropped = Vec::new();
    let mut out = Map::new();
    let messages = chat_messages(obj, provider, &mut dropped)?;
    for (k, v) in obj {
        convert_field(k, v, body, provider, &mut out, &mut dropped)?;
    }
    if !out.contains_key("max_tokens") {
        return Err(bad(
            "max_tokens",
            "Missing required parameter: 'max_tokens'",
        ));
    }
    if out.contains_key("tool_choice") && !out.contains_key("tools") {
        // Anthropic accepts a choice without tools; OpenAI does not.
        out.remove("tool_choice");
        out.remove("parallel_tool_calls");
    }
    out.insert("messages".into(), Value::Array(messages));
    Ok(ChatRequest {
        body: Value::Object(out),
        dropped,
    })
}

/// The system prompt and the messages of a Messages request as OpenAI chat
/// messages.
fn chat_messages(
    obj: &Map<String, Value>,
    provider: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<Vec<Value>, ApiError> {
    let mut messages = Vec::new();
    if let Some(s) = obj.get("system") {
        if !s.is_null() {
            let text = system_text(s, "system", dropped)?;
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    match obj.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => {
            for (i, m) in a.iter().enumerate() {
                convert_message(m, i, provider, &mut messages, dropped)?;
            }
        }
        Some(Value::Array(_)) => {
            return Err(bad(
                "messages",
                "'messages' must contain at least one message",
            ))
        }
        None | Some(Value::Null) => {
            return Err(bad("messages", "Missing required parameter: 'messages'"))
        }
        Some(_) => {
            return Err(bad(
                "messages",
                "Invalid type for 'messages': expected an array",
            ))
        }
    }
    Ok(messages)
}

/// One top-level field `k` of a Messages request (`body`) into the chat
/// request `out`, or the 400 that names it; `system` and `messages` are
/// [`chat_messages`]'.
fn convert_field(
    k: &str,
    v: &Value,
    body: &Value,
    provider: &str,
    out: &mut Map<String, Value>,
    dropped: &mut Vec<&'static str>,
) -> Result<(), ApiError> {
    match k {
        "model" => {
            out.insert("model".into(), v.clone());
        }
        "system" | "messages" => {}
        "max_tokens" => match v.as_u64() {
            Some(n) if n > 0 => {
                out.insert("max_tokens".into(), json!(n));
            }
            _ => {
                return Err(bad(
                    "max_tokens",
                    "Invalid value for 'max_tokens': expected a positive integer",
                ))
            }
        },
        "stream" => {
            let s = stream_flag(body)?;
            out.insert("stream".into(), json!(s));
            if s {
                out.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
        "temperature" | "top_p" => {
            if !v.is_null() {
                out.insert(k.to_string(), v.clone());
            }
        }
        "stop_sequences" => match v {
            Value::Array(a) if a.iter().all(Value::is_string) => {
                if !a.is_empty() {
                    out.insert("stop".into(), v.clone());
                }
            }
            Value::Null => {}
            _ => {
                return Err(bad(
                    "stop_sequences",
                    "Invalid type for 'stop_sequences': expected an array of strings",
                ))
            }
        },
        "tools" => {
            if !v.is_null() {
                let tools = convert_tools(v, provider, dropped)?;
                if tools.as_array().is_some_and(|a| !a.is_empty()) {
                    out.insert("tools".into(), tools);
                }
            }
        }
        "tool_choice" => {
            if !v.is_null() {
                convert_tool_choice(v, out)?;
            }
        }
        "metadata" => {
            if let Some(u) = v.get("user_id").and_then(Value::as_str) {
                out.insert("user".into(), json!(u));
            }
        }
        "thinking" => {
            // Mapped by `request` where the target has a reasoning
            // control; named dropped otherwise.
            match v.get("type").and_then(Value::as_str) {
                Some("enabled") => {
                    check_thinking_budget(v, body.get("max_tokens").and_then(Value::as_u64))?;
                    note(dropped, "thinking");
                }
                Some("adaptive") => note(dropped, "thinking"),
                _ => {}
            }
        }
        "top_k" => {
            // Chat has no top_k: the sampling the provider picks.
            if !v.is_null() {
                note(dropped, "top_k");
            }
        }
        "output_format" => {
            if let Some(format) = convert_output_format(v)? {
                out.insert("response_format".into(), format);
            }
        }
        "output_config" => {
            // `format` is the stable name of `output_format`; `effort` is
            // mapped by `request` where the target has an effort.
            if let Some(format) = v.get("format") {
                if let Some(format) = convert_output_format(format)? {
                    out.insert("response_format".into(), format);
                }
            }
            if v.get("effort").is_some_and(|e| !e.is_null()) {
                note(dropped, "output_config.effort");
            }
        }
        other => without_counterpart(other, v, provider, dropped)?,
    }
    Ok(())
}

/// Anthropic request fields (stable and beta) that run inside Anthropic's
/// own service and have no counterpart elsewhere: dropped and named in the
/// response header when set, since Anthropic itself accepts them.
const ANTHROPIC_ONLY: [&str; 8] = [
    "context_management",
    "container",
    "mcp_servers",
    "inference_geo",
    "speed",
    "cache_control",
    "fallbacks",
    "diagnostics",
];

/// A field with no counterpart in the chat request: one of Anthropic's own
/// settings, ignored (`service_tier`) or dropped and named in the response
/// header (Claude Code sends `context_management`); a field Anthropic does
/// not know either is refused, as Anthropic refuses it.
fn without_counterpart(
    k: &str,
    v: &Value,
    provider: &str,
    dropped: &mut Vec<&'static str>,
) -> Result<(), ApiError> {
    if k == "service_tier" {
        return Ok(());
    }
    match ANTHROPIC_ONLY.iter().find(|f| **f == k) {
        Some(f) if !v.is_null() => note(dropped, f),
        Some(_) => {}
        None => return Err(ApiError::unsupported_param(k, provider)),
    }
    Ok(())
}

/// An enabled `thinking`'s budget: at least 1024 tokens, and below
/// `max_tokens`.
fn check_thinking_budget(v: &Value, max_tokens: Option<u64>) -> Result<(), ApiError> {
    match v.get("budget_tokens").and_then(Value::as_u64) {
        Some(n) if max_tokens.is_some_and(|m| n >= m) => Err(bad(
            "thinking.budget_tokens",
            "'max_tokens' must be greater than 'thinking.budget_tokens'",
        )),
        Some(n) if n >= 1024 => Ok(()),
        _ => Err(bad(
            "thinking.budget_tokens",
            "'thinking.budget_tokens' must be an integer of at least 1024",
        )),
    }
}

/// Anthropic `output_format` → OpenAI `response_format` (`None` for null).
fn convert_output_format(v: &Value) -> Result<Option<Value>, ApiError> {
    match (v.get("type").and_then(Value::as_str), v.get("schema")) {
        (Some("json_schema"), Some(schema)) => Ok(Some(json!({"type": "json_schema",
               "json_schema": {"name": "output", "schema": schema}}))),
        _ if v.is_null() => Ok(None),
        _ => Err(bad(
            "output_format",
            "Invalid value for 'output_format': expected {\"type\": \"json_schema\", \"schema\": …}",
        )),
    }
}

// ---------------------------------------------------------------------------
// count_tokens estimate

/// `count_tokens` without a generation, for models of non-Anthropic
/// providers: ⌈characters / 4⌉ over the system prompt, every text, tool
/// input and tool result of the messages, and each tool's name,
/// description and schema; the request is checked as a Messages request
/// would be (without `max_tokens`). Returns the answer body.
pub fn estimate_input_tokens(body: &Value, provider: &str) -> Result<(u64, Vec<u8>), ApiError> {
    let mut probe = body.clone();
    if let Some(o) = probe.as_object_mut() {
        o.insert("max_tokens".into(), json!(1));
        o.remove("stream");
    }
    let chat = to_chat(&probe, provider)?;
    let mut chars = 0u64;
    let mut add = |s: &str| chars += s.chars().count() as u64;
    if let Some(Value::Array(msgs)) = chat.body.get("messages") {
        for m in msgs {
            match m.get("content") {
                Some(Value::String(s)) => add(s),
                Some(Value::Array(parts)) => {
                    for p in parts {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            add(t);
                        }
                    }
                }
                _ => {}
            }
            if let Some(Value::Array(calls)) = m.get("tool_calls") {
                for c in calls {
                    add(&c.to_string());
                }
            }
        }
    }
    if let Some(tools) = chat.body.get("tools") {
        add(&tools.to_string());
    }
    let tokens = chars.div_ceil(4).max(1);
    let bytes = serde_json::to_vec(&json!({ "input_tokens": tokens }))
        .map_err(|e| ApiError::invalid_json(&e.to_string()))?;
    Ok((tokens, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_maps_system_tools_results_and_drops_markers() {
        let body = json!({
            "model": "gpt-4o-mini", "max_tokens": 2000, "stream": true,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "stop_sequences": ["END"],
            "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u1"},
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "thanks"},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]}]},
                {"role": "system", "content": "now answer in French"}
            ]
        });
        let c = to_chat(&body, "openai").unwrap();
        let b = &c.body;
        assert_eq!(b["max_tokens"], 2000);
        assert_eq!(b["stop"], json!(["END"]));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["tool_choice"], "required");
        assert_eq!(b["parallel_tool_calls"], false);
        assert_eq!(b["user"], "u1");
        assert_eq!(
            b["tools"][0]["function"]["parameters"]["properties"]["city"]["type"],
            "string"
        );
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[2]["content"], "Let me check.");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
        // The tool result comes right after the call, before the user's text.
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(m[4]["content"][0]["text"], "thanks");
        assert_eq!(
            m[5],
            json!({"role": "system", "content": "now answer in French"})
        );
        assert_eq!(c.dropped, vec!["cache_control", "thinking"]);
    }

    #[test]
    fn anthropic_own_tools_and_fields_are_dropped_and_named() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let c = to_chat(
            &json!({"model": "m", "max_tokens": 5, "messages": msgs,
                    "context_management": {"edits": []}, "speed": "fast", "container": null,
                    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
                              {"type": "bash_20250124", "name": "bash"},
                              {"name": "Read", "input_schema": {"type": "object"}}]}),
            "openai",
        )
        .unwrap();
        assert_eq!(
            c.dropped,
            vec!["context_management", "speed", "web_search", "bash"]
        );
        let tools = c.body["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0]["function"]["name"], "Read");
        assert_eq!(anthropic_tool("web_fetch_20250910"), Some("web_fetch"));
        assert_eq!(anthropic_tool("text_editor_20250728"), Some("text_editor"));
        assert_eq!(anthropic_tool("web_searcher"), None);
        // A field Anthropic does not know either is still refused.
        let err = to_chat(
            &json!({"model": "m", "max_tokens": 5, "messages": msgs, "frobnicate": 1}),
            "openai",
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("frobnicate"));
    }

    #[test]
    fn effort_and_adaptive_thinking_become_a_reasoning_effort() {
        let e = |b: Value| wanted_effort(&b, thinking_budget(&b));
        assert_eq!(e(json!({"output_config": {"effort": "low"}})), Some("low"));
        assert_eq!(e(json!({"output_config": {"effort": "max"}})), Some("high"));
        assert_eq!(e(json!({"thinking": {"type": "adaptive"}})), Some("high"));
        assert_eq!(
            e(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})),
            Some("low")
        );
        assert_eq!(
            e(json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}})),
            Some("medium")
        );
        assert_eq!(e(json!({"thinking": {"type": "disabled"}})), None);
        assert_eq!(e(json!({})), None);
    }

    #[test]
    fn request_refusals_name_the_parameter() {
        let param = |b: Value| to_chat(&b, "openai").unwrap_err().param.unwrap_or_default();
        let msgs = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(param(json!({"model": "m", "messages": msgs})), "max_tokens");
        assert_eq!(
            param(json!({"model": "m", "max_tokens": 0, "messages": msgs})),
            "max_tokens"
        );
        assert_eq!(
            param(json!({"model": "m", "max_tokens": 5, "messages": []})),
            "messages"
        );
        assert_eq!(
            param(json!({"model": "m", "max_tokens": 5, "messages": msgs, "bogus": 1})),
            "bogus"
        );
        assert_eq!(
            param(
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]})
            ),
            "messages[0].content[0].type"
        );
        assert_eq!(
            param(
                json!({"model": "m", "max_tokens": 5, "messages": msgs, "tools": [{"type": "not_a_tool_20990101", "name": "x"}]})
            ),
            "tools[0].type"
        );
        assert_eq!(
            param(
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]})
            ),
            "messages[0].role"
        );
    }

    #[test]
    fn response_maps_text_tool_use_stop_and_cache_usage() {
        let v = json!({"id": "chatcmpl-1", "model": "gpt-4o-mini", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "ok", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            "finish_reason": "tool_calls"}]});
        let u = Usage {
            prompt_tokens: 10,
            completion_tokens: 3,
            cached_tokens: 4,
            cache_write_tokens: 0,
            web_searches: 0,
        };
        let m = to_message(&v, "fallback", u);
        assert_eq!(m["id"], "msg_chatcmpl-1");
        assert_eq!(m["type"], "message");
        assert_eq!(m["content"][0], json!({"type": "text", "text": "ok"}));
        assert_eq!(
            m["content"][1],
            json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}})
        );
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["usage"]["input_tokens"], 6);
        assert_eq!(m["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(m["usage"]["output_tokens"], 3);
        assert_eq!(stop_reason("length"), "max_tokens");
        assert_eq!(stop_reason("stop"), "end_turn");
    }

    #[test]
    fn count_tokens_estimate() {
        let body = json!({"model": "m", "system": "abcd", "messages": [{"role": "user", "content": "abcdefgh"}]});
        let (n, bytes) = estimate_input_tokens(&body, "openai").unwrap();
        assert_eq!(n, 3);
        assert_eq!(bytes, br#"{"input_tokens":3}"#);
        assert!(estimate_input_tokens(&json!({"model": "m"}), "openai").is_err());
    }
}
