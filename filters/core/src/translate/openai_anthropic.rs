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

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_ir::{self, Accept, Chat, Part, Role, ToolChoice};
use super::chunk::{arguments_delta, BlockTools, ChunkWriter};
use super::read::{self, Unreadable};
use super::{
    add_cache_breakpoints, feed_sse, finish_sse, include_usage_flag, upstream_error, write_json,
    Completion, Endpoint, RequestCtx, ResponseCtx, SseEvents, StreamTranslator, Translated,
    Translator, UpstreamRequest, Usage,
};
use crate::codec::sse::{Event, SseParser};
use crate::config::{Api, Key, Kind, Provider, DEFAULT_ANTHROPIC_VERSION};
use crate::error::{ApiError, INVALID_REQUEST};

pub struct OpenAiAnthropic;

const PROVIDER: &str = "anthropic";

fn unsupported(param: &str) -> ApiError {
    ApiError::unsupported_param(param, PROVIDER)
}

/// Name of the tool that carries JSON-mode answers (`response_format`).
pub const JSON_TOOL: &str = "json_response";

/// The JSON schema a JSON-mode answer must follow (JSON mode is done by
/// forcing a single tool with that input schema, and a tool's input is an
/// object): `{"type": "object"}` for `json_object`.
fn json_mode_schema(json: &Option<Value>) -> Result<Value, ApiError> {
    match json {
        None => Ok(json!({"type": "object"})),
        Some(s) if s.get("type").and_then(Value::as_str) == Some("object") => Ok(s.clone()),
        Some(_) => Err(ApiError {
            message: format!(
                "Provider '{PROVIDER}' supports 'response_format.json_schema.schema' only with \"type\": \"object\" at the top"
            ),
            ..unsupported("response_format.json_schema.schema")
        }),
    }
}

fn block(p: Part) -> Value {
    match p {
        // Moved in, not copied (`json!` would copy the text: a whole
        // 512 KB prompt once more).
        Part::Text(t) => Value::Object(Map::from_iter([
            ("type".to_string(), Value::from("text")),
            ("text".to_string(), Value::String(t)),
        ])),
        Part::Image { media, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
        }
        Part::ImageUrl { url, .. } => {
            json!({"type": "image", "source": {"type": "url", "url": url}})
        }
        Part::ToolCall { id, name, args } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": args})
        }
        Part::ToolResult { id, content, .. } => {
            json!({"type": "tool_result", "tool_use_id": id, "content": content})
        }
    }
}

fn translate_request(ctx: &RequestCtx<'_>, mut chat: Chat) -> Result<Value, ApiError> {
    let messages: Vec<Value> = std::mem::take(&mut chat.turns)
        .into_iter()
        .map(|t| {
            let role = match t.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": t.parts.into_iter().map(block).collect::<Vec<_>>()})
        })
        .collect();
    let mut out = Map::new();
    out.insert("model".into(), Value::String(ctx.model.to_string()));
    let max_tokens = chat.max_tokens.unwrap_or(ctx.model_cfg.max_tokens as u64);
    out.insert("max_tokens".into(), json!(max_tokens));
    if !chat.system.is_empty() {
        out.insert("system".into(), Value::String(chat.system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(t) = &chat.temperature {
        out.insert("temperature".into(), t.clone());
    }
    if let Some(t) = &chat.top_p {
        out.insert("top_p".into(), t.clone());
    }
    if !chat.stop.is_empty() {
        out.insert("stop_sequences".into(), json!(chat.stop));
    }
    if let Some(json) = &chat.json {
        if !chat.tools.is_empty() {
            return Err(ApiError {
                message: format!(
                    "'response_format' json modes cannot be combined with 'tools' for provider '{PROVIDER}'"
                ),
                ..unsupported("response_format")
            });
        }
        out.insert(
            "tools".into(),
            json!([{"name": JSON_TOOL, "description": "Give the answer as JSON matching this schema.", "input_schema": json_mode_schema(json)?}]),
        );
        out.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": JSON_TOOL}),
        );
    } else if !chat.tools.is_empty() {
        let tools: Vec<Value> = chat
            .tools
            .iter()
            .map(|t| Value::Object(t.declared(Some(("input_schema", t.parameters.clone())))))
            .collect();
        out.insert("tools".into(), Value::Array(tools));
        let mut choice = chat.tool_choice.as_ref().map(|c| match c {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
        });
        if chat.parallel_tool_calls == Some(false) && chat.tool_choice != Some(ToolChoice::None) {
            let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
            if let Some(o) = c.as_object_mut() {
                o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
            }
        }
        if let Some(c) = choice {
            out.insert("tool_choice".into(), c);
        }
    }
    if let Some(u) = &chat.user {
        out.insert("metadata".into(), json!({"user_id": u}));
    }
    if chat.stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    let mut out = Value::Object(out);
    if ctx.cache_breakpoints {
        add_cache_breakpoints(&mut out);
    }
    Ok(out)
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
        let mut chat = chat_ir::parse(
            body,
            &Accept {
                provider: PROVIDER,
                sampling_extras: false,
            },
        )?;
        let include_usage = include_usage_flag(body)?;
        let lowered = chat.lower_to(ctx.model_cfg.max_output_tokens);
        if chat.temperature.is_some() && chat.top_p.is_some() {
            // Claude 4.5 and later take one of the two.
            chat.top_p = None;
            chat.drop("top_p");
        }
        let (stream, json_mode) = (chat.stream, chat.json.is_some());
        let dropped = chat.dropped.clone();
        let out = translate_request(ctx, chat)?;
        let mut bytes = Vec::new();
        write_json(&mut bytes, &out);
        Ok(UpstreamRequest {
            path: format!("{}/messages", ctx.provider.base_path),
            body: bytes,
            stream,
            include_usage,
            json_mode,
            dropped,
            lowered,
            ..UpstreamRequest::default()
        })
    }

    /// `chat_ir` moves texts into parts, joins system and tool-result
    /// texts, and tests them only for emptiness; `block` moves them in.
    fn keeps_texts_whole(&self) -> bool {
        true
    }

    fn auth_headers(
        &self,
        provider: &Provider,
        key: &Key,
        _req: &UpstreamRequest,
        _now_ms: u64,
    ) -> Result<Vec<(&'static str, String)>, ApiError> {
        Ok(vec![
            crate::credentials::api_key("x-api-key", key),
            (
                "anthropic-version",
                match &provider.api {
                    Api::Anthropic { version } => version.clone(),
                    _ => DEFAULT_ANTHROPIC_VERSION.to_string(),
                },
            ),
        ])
    }

    fn response(&self, ctx: &ResponseCtx, body: &[u8]) -> Result<Translated, ApiError> {
        let v: native::Message = read::parse(body).map_err(|e| {
            ApiError::new(
                502,
                crate::error::SERVER,
                "provider_error",
                e.message("The provider returned a malformed response"),
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

/// Anthropic usage object → [`Usage`] (cache tokens count as prompt tokens;
/// a usage object that cannot be read counts nothing).
pub fn parse_usage(u: &Value) -> Usage {
    native::Usage::deserialize(u)
        .map(|u| u.usage())
        .unwrap_or_default()
}

/// A tool's input as OpenAI `arguments` (compact JSON; `{}` when absent).
fn arguments(input: Option<&Value>) -> String {
    input.map_or_else(|| "{}".into(), Value::to_string)
}

fn translate_response<'a>(ctx: &ResponseCtx, v: &'a native::Message) -> (Completion<'a>, Usage) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in v.content.iter().flatten() {
        match b.kind.as_deref() {
            Some("text") => {
                if let Some(t) = &b.text {
                    text.push_str(t);
                }
            }
            Some("tool_use") if ctx.json_mode && b.name.as_deref() == Some(JSON_TOOL) => {
                if let Some(input) = &b.input {
                    text.push_str(&input.to_string());
                }
            }
            Some("tool_use") => {
                calls.push(json!({
                    "id": b.id,
                    "type": "function",
                    "function": {
                        "name": b.name,
                        "arguments": arguments(b.input.as_ref()),
                    }
                }));
            }
            _ => {}
        }
    }
    let usage = v
        .usage
        .as_ref()
        .map(native::Usage::usage)
        .unwrap_or_default();
    let finish = match v.stop_reason.as_deref() {
        // JSON mode: the forced tool call is the answer.
        Some("tool_use") if ctx.json_mode && calls.is_empty() => "stop",
        Some(r) => finish_reason(r),
        None => "stop",
    };
    let out = Completion::new(
        v.id.as_deref(),
        ctx.created,
        v.model.as_deref(),
        text,
        calls,
        finish,
        &usage,
    );
    (out, usage)
}

/// Anthropic's Messages answer and stream events as the translator reads
/// them: each field's name and type, here only. Unknown fields and block
/// or event types are skipped; a known field of the wrong type makes the
/// answer (or event) unreadable.
mod native {
    use serde::Deserialize;
    use serde_json::Value;

    use crate::translate::read::Str;

    /// A `message` (the answer, and `message_start`'s `message`).
    #[derive(Deserialize)]
    pub(super) struct Message<'a> {
        #[serde(borrow)]
        pub id: Option<Str<'a>>,
        #[serde(borrow)]
        pub model: Option<Str<'a>>,
        #[serde(borrow)]
        pub content: Option<Vec<Block<'a>>>,
        #[serde(borrow)]
        pub stop_reason: Option<Str<'a>>,
        pub usage: Option<Usage>,
    }

    /// A content block (`text`, `tool_use`, …).
    #[derive(Deserialize)]
    pub(super) struct Block<'a> {
        #[serde(rename = "type", borrow)]
        pub kind: Option<Str<'a>>,
        #[serde(borrow)]
        pub text: Option<Str<'a>>,
        #[serde(borrow)]
        pub id: Option<Str<'a>>,
        #[serde(borrow)]
        pub name: Option<Str<'a>>,
        /// Re-serialized compactly as OpenAI `arguments`.
        pub input: Option<Value>,
    }

    #[derive(Deserialize, Default)]
    pub(super) struct Usage {
        /// Present (even as null) or not: `message_delta` carries input
        /// tokens only in some API versions.
        #[serde(default, deserialize_with = "present")]
        pub input_tokens: Option<Option<u64>>,
        pub output_tokens: Option<u64>,
        pub cache_creation_input_tokens: Option<u64>,
        pub cache_read_input_tokens: Option<u64>,
        pub server_tool_use: Option<ServerToolUse>,
    }

    /// The server tools Anthropic ran for the answer (cumulative in a
    /// stream's `message_delta`).
    #[derive(Deserialize, Default)]
    pub(super) struct ServerToolUse {
        pub web_search_requests: Option<u64>,
    }

    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
        Option::<u64>::deserialize(d).map(Some)
    }

    impl Usage {
        pub fn usage(&self) -> super::Usage {
            let read = self.cache_read_input_tokens.unwrap_or(0);
            super::Usage {
                prompt_tokens: self.input_tokens.flatten().unwrap_or(0)
                    + self.cache_creation_input_tokens.unwrap_or(0)
                    + read,
                completion_tokens: self.output_tokens.unwrap_or(0),
                cached_tokens: read,
                cache_write_tokens: self.cache_creation_input_tokens.unwrap_or(0),
                web_searches: self
                    .server_tool_use
                    .as_ref()
                    .and_then(|s| s.web_search_requests)
                    .unwrap_or(0),
            }
        }
    }

    /// One stream event (`message_start`, `content_block_start`,
    /// `content_block_delta`, `message_delta`, `message_stop`, `error`, …).
    #[derive(Deserialize)]
    pub(super) struct Event<'a> {
        #[serde(rename = "type", borrow)]
        pub kind: Option<Str<'a>>,
        pub index: Option<u64>,
        #[serde(borrow)]
        pub message: Option<Message<'a>>,
        #[serde(borrow)]
        pub content_block: Option<Block<'a>>,
        #[serde(borrow)]
        pub delta: Option<Delta<'a>>,
        pub usage: Option<Usage>,
        #[serde(borrow)]
        pub error: Option<Error<'a>>,
    }

    /// `content_block_delta`'s and `message_delta`'s `delta`.
    #[derive(Deserialize)]
    pub(super) struct Delta<'a> {
        #[serde(rename = "type", borrow)]
        pub kind: Option<Str<'a>>,
        #[serde(borrow)]
        pub text: Option<Str<'a>>,
        #[serde(borrow)]
        pub partial_json: Option<Str<'a>>,
        #[serde(borrow)]
        pub stop_reason: Option<Str<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Error<'a> {
        #[serde(rename = "type", borrow)]
        pub kind: Option<Str<'a>>,
        #[serde(borrow)]
        pub message: Option<Str<'a>>,
    }

    /// Only an event's type: what an unreadable event was.
    #[derive(Deserialize)]
    pub(super) struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        pub kind: Option<Str<'a>>,
    }
}

/// The stream events the translator reads.
const HANDLED: [&str; 6] = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "message_delta",
    "message_stop",
    "error",
];

/// Anthropic SSE → OpenAI `chat.completion.chunk` SSE, one event at a time.
pub struct AnthropicStream {
    parser: SseParser,
    w: ChunkWriter,
    /// The tool calls, by Anthropic content-block index.
    tools: BlockTools,
    usage: Usage,
    saw_usage: bool,
    finish: Option<&'static str>,
    json_mode: bool,
    /// JSON mode: Anthropic block index of the forced tool, streamed as content.
    json_block: Option<u64>,
}

impl AnthropicStream {
    pub fn new(ctx: &ResponseCtx) -> AnthropicStream {
        AnthropicStream {
            parser: SseParser::default(),
            w: ChunkWriter::new(ctx),
            tools: BlockTools::default(),
            usage: Usage::default(),
            saw_usage: false,
            finish: None,
            json_mode: ctx.json_mode,
            json_block: None,
        }
    }

    fn chunk(&mut self, out: &mut Vec<u8>, delta: &str, finish: Option<&str>) {
        self.w.delta(out, delta, finish);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        let f = self.finish.unwrap_or("stop");
        self.w.end(out, f, self.usage);
    }

    /// A content delta of `text`, unless there is none.
    fn content(&mut self, out: &mut Vec<u8>, text: Option<&str>) {
        if let Some(t) = text {
            if !t.is_empty() {
                let d = json!({"content": t}).to_string();
                self.chunk(out, &d, None);
            }
        }
    }

    /// `message_start`: the stream's id, model and first usage, and the
    /// assistant's opening chunk.
    fn message_start(&mut self, v: &native::Event<'_>, out: &mut Vec<u8>) {
        let m = v.message.as_ref();
        let id = m.and_then(|m| m.id.as_deref()).unwrap_or("");
        let model = m.and_then(|m| m.model.as_deref()).unwrap_or("");
        self.w.open(id, model);
        if let Some(u) = m.and_then(|m| m.usage.as_ref()) {
            self.usage = u.usage();
            self.saw_usage = true;
        }
        self.chunk(out, "{\"role\":\"assistant\",\"content\":\"\"}", None);
    }

    /// `content_block_start` of block `idx`: its text, or a tool call opened
    /// (JSON mode's forced tool becomes the content instead).
    fn block_start(&mut self, idx: u64, b: &native::Block<'_>, out: &mut Vec<u8>) {
        match b.kind.as_deref() {
            Some("text") => self.content(out, b.text.as_deref()),
            Some("tool_use") if self.json_mode && b.name.as_deref() == Some(JSON_TOOL) => {
                self.json_block = Some(idx);
            }
            Some("tool_use") => {
                let (k, d) = self.tools.open(idx, &b.id, &b.name);
                self.w.delta_value(out, &d, None);
                // Some producers put a non-empty input on start.
                if let Some(input) = &b.input {
                    if input.as_object().is_some_and(|o| !o.is_empty()) {
                        self.w
                            .delta_value(out, &arguments_delta(k, &input.to_string()), None);
                    }
                }
            }
            _ => {}
        }
    }

    /// `content_block_delta` of block `idx`: more text, or more of a tool
    /// call's arguments (JSON mode's forced tool: more content).
    fn block_delta(&mut self, idx: u64, d: &native::Delta<'_>, out: &mut Vec<u8>) {
        match d.kind.as_deref() {
            Some("text_delta") => self.content(out, d.text.as_deref()),
            Some("input_json_delta") if self.json_block == Some(idx) => {
                self.content(out, d.partial_json.as_deref());
            }
            Some("input_json_delta") => {
                if let (Some(k), Some(p)) = (self.tools.call_of(idx), d.partial_json.as_deref()) {
                    if !p.is_empty() {
                        self.w.delta_value(out, &arguments_delta(k, p), None);
                    }
                }
            }
            _ => {}
        }
    }

    /// `message_delta`: the final usage and the stop reason.
    fn message_delta(&mut self, v: &native::Event<'_>) {
        if let Some(u) = &v.usage {
            if let Some(o) = u.output_tokens {
                self.usage.completion_tokens = o;
            }
            if let Some(n) = u
                .server_tool_use
                .as_ref()
                .and_then(|s| s.web_search_requests)
            {
                self.usage.web_searches = n;
            }
            if u.input_tokens.is_some() {
                let p = u.usage();
                if p.prompt_tokens > 0 {
                    self.usage.prompt_tokens = p.prompt_tokens;
                    self.usage.cached_tokens = p.cached_tokens;
                }
            }
            self.saw_usage = true;
        }
        if let Some(r) = v.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
            self.finish = Some(
                if r == "tool_use" && self.json_block.is_some() && self.tools.is_empty() {
                    "stop"
                } else {
                    finish_reason(r)
                },
            );
        }
    }

    /// An `error` event: the stream ends with an OpenAI error, its status
    /// from the error's type.
    fn provider_error(&mut self, e: Option<&native::Error<'_>>, out: &mut Vec<u8>) {
        let status = match e.and_then(|e| e.kind.as_deref()) {
            Some("overloaded_error") => 529,
            Some("rate_limit_error") => 429,
            _ => 502,
        };
        let msg = e
            .and_then(|e| e.message.as_deref())
            .unwrap_or("Provider error")
            .to_string();
        self.error_event(out, status, &msg);
    }
}

impl SseEvents for AnthropicStream {
    fn parser(&mut self) -> &mut SseParser {
        &mut self.parser
    }

    fn is_done(&self) -> bool {
        self.w.is_done()
    }

    fn on_event(&mut self, ev: Event, out: &mut Vec<u8>) {
        if self.w.is_done() || ev.data.is_empty() {
            return;
        }
        let v: native::Event = match read::parse_str(&ev.data) {
            Ok(v) => v,
            Err(Unreadable::Syntax) => return,
            Err(e) => {
                // A field of the wrong type in an event the translator reads
                // would lose or garble the answer; in any other event it is
                // none of the translator's business.
                let kind = read::parse_str::<native::Kind>(&ev.data)
                    .ok()
                    .and_then(|k| k.kind)
                    .map(|k| k.0.into_owned())
                    .unwrap_or_else(|| ev.event.clone());
                if HANDLED.contains(&kind.as_str()) {
                    self.error_event(out, 502, &e.message("Malformed stream from the provider"));
                }
                return;
            }
        };
        let ty = v.kind.as_deref().unwrap_or(ev.event.as_str());
        match ty {
            "message_start" => self.message_start(&v, out),
            "content_block_start" => {
                if let Some(b) = &v.content_block {
                    self.block_start(v.index.unwrap_or(0), b, out);
                }
            }
            "content_block_delta" => {
                if let Some(d) = &v.delta {
                    self.block_delta(v.index.unwrap_or(0), d, out);
                }
            }
            "message_delta" => self.message_delta(&v),
            "message_stop" => self.end(out),
            "error" => self.provider_error(v.error.as_ref(), out),
            _ => {}
        }
    }

    fn error_event(&mut self, out: &mut Vec<u8>, status: u16, message: &str) {
        self.w.fail(out, status, message);
    }
}

impl StreamTranslator for AnthropicStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        feed_sse(self, chunk, out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if finish_sse(self, out) {
            self.error_event(out, 502, "The provider's stream ended early");
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.saw_usage.then_some(self.usage)
    }

    fn first_token_seen(&self) -> bool {
        self.w.first_token_seen()
    }
}
